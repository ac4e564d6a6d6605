//! The roofline floor stays a floor: a first bandwidth probe that read low (forced here: 1 kB/s,
//! so every step beats it) is re-measured by the first request that beats it — the request
//! reports its floor as re-measured at exactly 100%, the engine's bandwidth rises to what the
//! request proved, the probe runs again once on its own thread, and later requests are judged
//! against the corrected figure.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

mod common;

use common::*;
use ridge_engine::{EngineConfig, Event, FinishEvent, FloorProbe, Request};

fn finish(log: &Log) -> FinishEvent {
    log.lock()
        .unwrap()
        .iter()
        .find_map(|e| match e {
            Event::Finish(f) => Some(f.clone()),
            _ => None,
        })
        .expect("the request finished")
}

#[test]
fn a_slow_first_probe_is_re_measured_and_never_reads_above_100_percent() {
    let fx = fixture(256);
    let calls = Arc::new(AtomicUsize::new(0));
    let c = calls.clone();
    // The re-probe reads 1,000,000 GB/s: far above anything a step can prove, so the
    // corrected floor is the probe's, and no later step beats it.
    let mut core = fx.core(EngineConfig {
        bandwidth_gbs: Some(1e-6),
        floor_probe: Some(FloorProbe(Arc::new(move || {
            c.fetch_add(1, Ordering::SeqCst);
            Some(1e6)
        }))),
        ..Default::default()
    });
    let gauge = core.floor().expect("a bandwidth gives a floor").clone();
    assert_eq!(gauge.gbs(), 1e-6);

    let (s, log) = sink();
    let mut r = Request::greedy(vec![1, 2, 3, 4, 5], 8);
    r.ignore_eos = true;
    core.submit(1, r, s, Instant::now()).unwrap();
    run_to_end(&mut core);
    let t = finish(&log).timings;
    assert!(t.floor_remeasured, "{t:?}");
    // The corrected floor is what the request proved: its own TPOT.
    assert_eq!(t.roofline_tpot_ms, t.tpot_ms());
    assert_eq!(t.roofline_efficiency(), Some(1.0));
    assert!(gauge.gbs() > 1e-6, "{}", gauge.gbs());
    assert_eq!(gauge.remeasures(), 1);
    assert_eq!(gauge.initial_gbs(), 1e-6);

    // The re-probe runs on its own thread and raises the figure.
    let t0 = Instant::now();
    while gauge.probing() || gauge.gbs() < 1e6 {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "the re-probe never ended"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(calls.load(Ordering::SeqCst), 1);

    // A later request is judged against the re-measured floor: below 100%, not re-measured.
    let (s, log) = sink();
    let mut r = Request::greedy(vec![6, 7, 8], 8);
    r.ignore_eos = true;
    core.submit(2, r, s, Instant::now()).unwrap();
    run_to_end(&mut core);
    let t = finish(&log).timings;
    assert!(!t.floor_remeasured, "{t:?}");
    let e = t.roofline_efficiency().expect("a floor and a TPOT");
    assert!(e > 0.0 && e < 1.0, "{e}");
    assert_eq!(gauge.remeasures(), 1);
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

#[test]
fn without_a_probe_the_floor_rises_to_what_requests_prove() {
    let fx = fixture(256);
    let mut core = fx.core(EngineConfig {
        bandwidth_gbs: Some(1e-6),
        ..Default::default()
    });
    let gauge = core.floor().expect("a floor").clone();
    let (s, log) = sink();
    let mut r = Request::greedy(vec![1, 2, 3], 6);
    r.ignore_eos = true;
    core.submit(1, r, s, Instant::now()).unwrap();
    run_to_end(&mut core);
    let t = finish(&log).timings;
    assert!(t.floor_remeasured);
    assert_eq!(t.roofline_efficiency(), Some(1.0));
    assert!(gauge.gbs() > 1e-6);
    assert!(!gauge.probing());
}
