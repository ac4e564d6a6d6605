//! `ridge ps`: what a running server has loaded — each model's memory, requests in flight,
//! idle time and when its keep-alive unloads it — read from the server's `/v1/models`.

use std::time::Duration;

use anyhow::{bail, Context, Result};
use serde_json::Value;

/// Arguments of `ps`.
#[derive(clap::Args)]
pub struct Args {
    /// The server's address.
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    url: String,
    /// The server's API key, if it needs one.
    #[arg(long)]
    api_key: Option<String>,
    /// List every model the server serves, not only the loaded ones.
    #[arg(long, short)]
    all: bool,
    /// Print the server's answer as JSON.
    #[arg(long)]
    json: bool,
}

fn gib(b: f64) -> String {
    if b >= (1u64 << 30) as f64 {
        format!("{:.2} GiB", b / (1u64 << 30) as f64)
    } else {
        format!("{:.0} MiB", b / (1u64 << 20) as f64)
    }
}

fn seconds(v: &Value) -> String {
    match v.as_f64() {
        None => "-".into(),
        Some(s) if s < 60.0 => format!("{s:.0} s"),
        Some(s) if s < 3600.0 => format!("{:.1} min", s / 60.0),
        Some(s) => format!("{:.1} h", s / 3600.0),
    }
}

/// Runs `ps`.
pub fn main(a: Args) -> Result<()> {
    let url = format!("{}/v1/models", a.url.trim_end_matches('/'));
    let client = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .context("cannot build an HTTP client")?;
    let mut req = client.get(&url);
    if let Some(k) = &a.api_key {
        req = req.bearer_auth(k);
    }
    let r = req
        .send()
        .map_err(|e| anyhow::anyhow!("cannot reach a ridge server at {}: {e}", a.url))?;
    let status = r.status();
    let body: Value = r
        .json()
        .map_err(|e| anyhow::anyhow!("{url} did not answer JSON: {e}"))?;
    if !status.is_success() {
        let msg = body["error"]["message"].as_str().unwrap_or("no message");
        bail!("{url} answered {status}: {msg}");
    }
    let Some(models) = body["data"].as_array() else {
        bail!("{url} answered without a `data` list (is it a ridge server?)");
    };
    if a.json {
        println!("{}", serde_json::to_string_pretty(&body)?);
        return Ok(());
    }
    println!(
        "{:<32} {:<9} {:>10} {:>9} {:>9} {:>10}",
        "NAME", "STATUS", "MEMORY", "IN FLIGHT", "IDLE", "UNLOADS IN"
    );
    for m in models {
        let status = m["status"]["value"].as_str().unwrap_or("?");
        if !a.all && status != "loaded" {
            continue;
        }
        let memory = m["memory_bytes"].as_f64().map_or("-".into(), gib);
        let in_flight = m["in_flight"]
            .as_u64()
            .map_or("-".into(), |n| n.to_string());
        let until = if status == "loaded" && m["keep_alive_seconds"].is_null() {
            "forever".to_string()
        } else {
            seconds(&m["expires_in_seconds"])
        };
        println!(
            "{:<32} {:<9} {:>10} {:>9} {:>9} {:>10}",
            m["id"].as_str().unwrap_or("?"),
            status,
            memory,
            in_flight,
            seconds(&m["idle_seconds"]),
            until
        );
    }
    Ok(())
}
