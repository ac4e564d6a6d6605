//! KV-cache events: vLLM's event stream, published as blocks enter and leave ridge's prefix
//! cache, so a KV-aware router (llm-d's precise prefix-cache scorer, NVIDIA Dynamo's KV router)
//! can route on what each replica really holds.
//!
//! # Wire format (what those routers decode)
//!
//! A ZeroMQ PUB socket sends one multipart message per engine step that changed the index:
//! `[topic, sequence number (8 bytes, big-endian, from 0), msgpack(batch)]`. The batch is
//! msgspec's `array_like` encoding of vLLM's `KVEventBatch`: `[ts, [event…], dp_rank]`, with
//! each event a tagged array:
//!
//! - `["BlockStored", [hash…], parent_hash | nil, [token…], block_size, lora_id, medium,
//!   lora_name]` — consecutive blocks of one chain share an event (the parent is the first
//!   block's; `token…` are every block's tokens in order);
//! - `["BlockRemoved", [hash…], medium]`;
//! - `["AllBlocksCleared"]` — the engine stopped (its model was unloaded) or rebuilt its cache.
//!
//! `lora_id` and `lora_name` are nil (ridge serves no adapters); `medium` is `"CPU"` (where
//! ridge keeps K/V). Hashes are ridge's own chained 64-bit block hashes (a block's hash covers
//! its whole prefix, as vLLM's do); routers that key on token ids recompute their own from
//! `token…`. A subscriber that missed sequence numbers asks the ROUTER replay socket for them:
//! it sends `[start (8 bytes, big-endian)]` (a REQ or DEALER socket's empty delimiter frame
//! first is accepted and echoed) and gets `[seq, payload]` for every buffered batch from
//! `start` on, then `[-1 as 8 bytes, ""]`.
//!
//! # Why events are built in the block pool and sent from here
//!
//! The pool records a change exactly where its index changes (`ridge-model`'s `block_pool.rs`),
//! so an event is never published for a block that was not stored and no removal is missed;
//! the engine thread hands each step's changes to a sink (a channel send, never blocking the
//! step); this module alone knows ZeroMQ and msgpack. One publisher serves every model of the
//! server; each model's events go under its own topic (`--kv-events-topic` with `{model}`).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use ridge_engine::{KvEvent, KvEventSink, KV_BLOCK_SIZE};
use rmp::encode;
use tokio::sync::mpsc;
use zeromq::{Socket, SocketRecv, SocketSend, ZmqMessage};

/// The `medium` ridge's events name: K/V lives in main memory.
pub const MEDIUM: &str = "CPU";

/// Batches kept for replay by default (vLLM's default too).
pub const DEFAULT_REPLAY_BUFFER: usize = 10_000;

/// Where and how to publish.
#[derive(Clone, Debug)]
pub struct KvEventsConfig {
    /// PUB socket address, `tcp://HOST:PORT` (`*` binds every interface).
    pub endpoint: String,
    /// ROUTER socket address for replay requests, if any.
    pub replay_endpoint: Option<String>,
    /// Batches kept for replay.
    pub replay_buffer: usize,
}

/// A failed msgpack write (into a `Vec`, so in practice never).
type EncodeError = Box<dyn std::error::Error + Send + Sync>;

/// One step's changes of one model.
struct Batch {
    topic: Bytes,
    ts: f64,
    events: Vec<KvEvent>,
}

/// The running publisher: cheap to clone, hands out one sink per engine.
#[derive(Clone)]
pub struct KvEventPublisher {
    tx: mpsc::UnboundedSender<Batch>,
    /// The addresses bound (ports resolved).
    pub bound: String,
}

/// ZeroMQ wants an address to bind; `*` (vLLM's spelling for every interface) is `0.0.0.0`.
fn bind_address(endpoint: &str) -> Result<String, String> {
    let rest = endpoint
        .strip_prefix("tcp://")
        .ok_or_else(|| format!("{endpoint:?}: expected tcp://HOST:PORT"))?;
    let (host, port) = rest
        .rsplit_once(':')
        .ok_or_else(|| format!("{endpoint:?}: expected tcp://HOST:PORT"))?;
    port.parse::<u16>()
        .map_err(|_| format!("{endpoint:?}: {port:?} is not a port number"))?;
    let host = if host == "*" { "0.0.0.0" } else { host };
    Ok(format!("tcp://{host}:{port}"))
}

impl KvEventPublisher {
    /// Binds the PUB (and replay) sockets and starts the tasks that serve them. Must run
    /// inside a Tokio runtime.
    pub async fn bind(cfg: &KvEventsConfig) -> Result<Self, String> {
        let mut publisher = zeromq::PubSocket::new();
        let at = bind_address(&cfg.endpoint)?;
        let bound = publisher
            .bind(&at)
            .await
            .map_err(|e| format!("cannot bind the KV event socket {}: {e}", cfg.endpoint))?;
        let mut bound = bound.to_string();
        let buffer = Arc::new(Mutex::new(VecDeque::with_capacity(
            cfg.replay_buffer.min(1024),
        )));
        if let Some(r) = &cfg.replay_endpoint {
            let mut router = zeromq::RouterSocket::new();
            let at = bind_address(r)?;
            let b = router
                .bind(&at)
                .await
                .map_err(|e| format!("cannot bind the KV event replay socket {r}: {e}"))?;
            bound = format!("{bound} (replay {b})");
            tokio::spawn(serve_replay(router, buffer.clone()));
        }
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(publish(publisher, rx, buffer, cfg.replay_buffer.max(1)));
        Ok(KvEventPublisher { tx, bound })
    }

    /// A sink for one engine: its events go out under `topic`.
    pub fn sink(&self, topic: &str) -> KvEventSink {
        let tx = self.tx.clone();
        let topic = Bytes::copy_from_slice(topic.as_bytes());
        Box::new(move |events| {
            let ts = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64());
            // The publisher outlives the engines; if it is gone the server is stopping.
            let _ = tx.send(Batch {
                topic: topic.clone(),
                ts,
                events,
            });
        })
    }
}

/// Sends each batch with the next sequence number and keeps it for replay.
async fn publish(
    mut socket: zeromq::PubSocket,
    mut rx: mpsc::UnboundedReceiver<Batch>,
    buffer: Arc<Mutex<VecDeque<(u64, Bytes)>>>,
    keep: usize,
) {
    let mut seq = 0u64;
    while let Some(b) = rx.recv().await {
        let payload = match encode_batch(b.ts, &b.events) {
            Ok(p) => Bytes::from(p),
            Err(e) => {
                tracing::warn!("KV events: cannot encode a batch: {e}");
                continue;
            }
        };
        if let Ok(mut buf) = buffer.lock() {
            if buf.len() == keep {
                buf.pop_front();
            }
            buf.push_back((seq, payload.clone()));
        }
        let frames = vec![b.topic, Bytes::copy_from_slice(&seq.to_be_bytes()), payload];
        if let Ok(msg) = ZmqMessage::try_from(frames) {
            if let Err(e) = socket.send(msg).await {
                tracing::warn!("KV events: send failed: {e}");
            }
        }
        seq += 1;
    }
}

/// Answers replay requests from the buffer, then the end marker.
async fn serve_replay(
    mut socket: zeromq::RouterSocket,
    buffer: Arc<Mutex<VecDeque<(u64, Bytes)>>>,
) {
    loop {
        let Ok(msg) = socket.recv().await else {
            // The socket waits for peers rather than failing; should it fail anyway, do not
            // spin on it.
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            continue;
        };
        let mut frames = msg.into_vecdeque();
        let Some(peer) = frames.pop_front() else {
            continue;
        };
        // A REQ socket (and a DEALER imitating one) sends an empty delimiter first.
        let delimited = frames.len() == 2 && frames.front().is_some_and(|f| f.is_empty());
        if delimited {
            frames.pop_front();
        }
        let start = frames
            .front()
            .and_then(|f| <[u8; 8]>::try_from(&f[..]).ok())
            .map(u64::from_be_bytes);
        let batches: Vec<(u64, Bytes)> = match (start, buffer.lock()) {
            (Some(s), Ok(buf)) => buf.iter().filter(|(q, _)| *q >= s).cloned().collect(),
            _ => Vec::new(),
        };
        let end = (-1i64).to_be_bytes();
        let replies = batches
            .into_iter()
            .map(|(q, p)| (Bytes::copy_from_slice(&q.to_be_bytes()), p))
            .chain([(Bytes::copy_from_slice(&end), Bytes::new())]);
        for (q, p) in replies {
            let mut out = vec![peer.clone()];
            if delimited {
                out.push(Bytes::new());
            }
            out.extend([q, p]);
            let Ok(m) = ZmqMessage::try_from(out) else {
                break;
            };
            if socket.send(m).await.is_err() {
                break;
            }
        }
    }
}

/// One wire event: runs of the pool's events folded together.
enum WireEvent {
    Stored {
        hashes: Vec<u64>,
        parent: Option<u64>,
        tokens: Vec<u32>,
    },
    Removed(Vec<u64>),
    Cleared,
}

/// Folds consecutive stores of one chain (each block's parent the block before) into one
/// `BlockStored`, and consecutive removals into one `BlockRemoved`, keeping the order.
fn fold(events: &[KvEvent]) -> Vec<WireEvent> {
    let mut out: Vec<WireEvent> = Vec::new();
    for e in events {
        match (e, out.last_mut()) {
            (
                KvEvent::Stored {
                    hash,
                    parent,
                    tokens,
                },
                Some(WireEvent::Stored {
                    hashes,
                    tokens: all,
                    ..
                }),
            ) if *parent == hashes.last().copied() => {
                hashes.push(*hash);
                all.extend_from_slice(tokens);
            }
            (KvEvent::Removed { hash }, Some(WireEvent::Removed(hashes))) => hashes.push(*hash),
            (
                KvEvent::Stored {
                    hash,
                    parent,
                    tokens,
                },
                _,
            ) => out.push(WireEvent::Stored {
                hashes: vec![*hash],
                parent: *parent,
                tokens: tokens.clone(),
            }),
            (KvEvent::Removed { hash }, _) => out.push(WireEvent::Removed(vec![*hash])),
            (KvEvent::Cleared, _) => out.push(WireEvent::Cleared),
        }
    }
    out
}

/// msgpack of one `KVEventBatch` (module docs).
pub fn encode_batch(ts: f64, events: &[KvEvent]) -> Result<Vec<u8>, EncodeError> {
    let wire = fold(events);
    let mut b = Vec::with_capacity(64 + 8 * events.len() * (KV_BLOCK_SIZE + 2));
    encode::write_array_len(&mut b, 3)?;
    encode::write_f64(&mut b, ts)?;
    encode::write_array_len(&mut b, wire.len() as u32)?;
    for w in &wire {
        match w {
            WireEvent::Stored {
                hashes,
                parent,
                tokens,
            } => {
                encode::write_array_len(&mut b, 8)?;
                encode::write_str(&mut b, "BlockStored")?;
                write_u64s(&mut b, hashes)?;
                match parent {
                    Some(p) => {
                        encode::write_uint(&mut b, *p)?;
                    }
                    None => encode::write_nil(&mut b)?,
                }
                encode::write_array_len(&mut b, tokens.len() as u32)?;
                for &t in tokens {
                    encode::write_uint(&mut b, u64::from(t))?;
                }
                encode::write_uint(&mut b, KV_BLOCK_SIZE as u64)?;
                encode::write_nil(&mut b)?; // lora_id
                encode::write_str(&mut b, MEDIUM)?;
                encode::write_nil(&mut b)?; // lora_name
            }
            WireEvent::Removed(hashes) => {
                encode::write_array_len(&mut b, 3)?;
                encode::write_str(&mut b, "BlockRemoved")?;
                write_u64s(&mut b, hashes)?;
                encode::write_str(&mut b, MEDIUM)?;
            }
            WireEvent::Cleared => {
                encode::write_array_len(&mut b, 1)?;
                encode::write_str(&mut b, "AllBlocksCleared")?;
            }
        }
    }
    encode::write_uint(&mut b, 0)?; // data_parallel_rank
    Ok(b)
}

fn write_u64s(b: &mut Vec<u8>, v: &[u64]) -> Result<(), EncodeError> {
    encode::write_array_len(b, v.len() as u32)?;
    for &h in v {
        encode::write_uint(b, h)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stored(hash: u64, parent: Option<u64>, t0: u32) -> KvEvent {
        KvEvent::Stored {
            hash,
            parent,
            tokens: (t0..t0 + KV_BLOCK_SIZE as u32).collect(),
        }
    }

    #[test]
    fn chains_fold_into_one_stored_event_and_order_is_kept() {
        let ev = [
            stored(1, None, 0),
            stored(2, Some(1), 16),
            stored(9, None, 100), // another chain starts
            KvEvent::Removed { hash: 5 },
            KvEvent::Removed { hash: 6 },
            stored(3, Some(2), 32), // after a removal: its own event
            KvEvent::Cleared,
        ];
        let w = fold(&ev);
        assert_eq!(w.len(), 5);
        match &w[0] {
            WireEvent::Stored {
                hashes,
                parent,
                tokens,
            } => {
                assert_eq!((hashes.as_slice(), *parent), (&[1u64, 2][..], None));
                assert_eq!(tokens.len(), 2 * KV_BLOCK_SIZE);
                assert_eq!(tokens[KV_BLOCK_SIZE], 16);
            }
            _ => panic!("expected a store"),
        }
        assert!(matches!(&w[1], WireEvent::Stored { hashes, .. } if hashes == &[9]));
        assert!(matches!(&w[2], WireEvent::Removed(h) if h == &[5, 6]));
        assert!(
            matches!(&w[3], WireEvent::Stored { hashes, parent: Some(2), .. } if hashes == &[3])
        );
        assert!(matches!(w[4], WireEvent::Cleared));
    }

    #[test]
    fn batch_bytes_are_msgspec_array_like() {
        // A removal of one block whose hash needs all 64 bits, at ts 1.5: the exact bytes.
        let b = encode_batch(1.5, &[KvEvent::Removed { hash: u64::MAX }]).unwrap();
        let mut want = vec![0x93, 0xcb];
        want.extend_from_slice(&1.5f64.to_be_bytes());
        want.push(0x91); // one event
        want.push(0x93); // of three fields
        want.push(0xa0 | 12);
        want.extend_from_slice(b"BlockRemoved");
        want.extend_from_slice(&[0x91, 0xcf]);
        want.extend_from_slice(&u64::MAX.to_be_bytes());
        want.push(0xa3);
        want.extend_from_slice(b"CPU");
        want.push(0x00); // data_parallel_rank
        assert_eq!(b, want);
    }

    #[test]
    fn endpoints_parse_with_vllm_spelling() {
        assert_eq!(bind_address("tcp://*:5557").unwrap(), "tcp://0.0.0.0:5557");
        assert_eq!(
            bind_address("tcp://127.0.0.1:0").unwrap(),
            "tcp://127.0.0.1:0"
        );
        for bad in ["5557", "tcp://host", "tcp://h:port", "ipc:///tmp/x"] {
            assert!(bind_address(bad).is_err(), "{bad}");
        }
    }
}
