//! Feedback while a person waits: a spinner on stderr with what is happening and for how long.
//! indicatif draws it only when stderr is a terminal, so piped output, logs and tests see
//! nothing of it.

use std::time::Duration;

/// A ticking spinner showing `msg` and the time elapsed; clear it with `finish_and_clear`.
pub fn spinner(msg: String) -> indicatif::ProgressBar {
    let s = indicatif::ProgressBar::new_spinner();
    s.set_style(
        indicatif::ProgressStyle::with_template("{spinner} {msg} ({elapsed})")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_spinner()),
    );
    s.set_message(msg);
    s.enable_steady_tick(Duration::from_millis(120));
    s
}
