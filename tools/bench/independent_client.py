#!/usr/bin/env python3
"""An independent streaming client for checking `ridge bench serve` against any
OpenAI-compatible server.

It shares no code with ridge: Python standard library only (http.client, threads), its own
prompt builder and its own SSE reading. It measures the way vLLM defines the metrics:

- TTFT: request sent -> first streamed chunk whose text is non-empty;
- TPOT per request: (E2EL - TTFT) / (output_tokens - 1), with output_tokens from the final
  `usage` chunk; then the median / mean across requests;
- ITL: every gap between consecutive text chunks, pooled;
- E2EL: request sent -> last text chunk.

Load: NUM_PROMPTS requests, all submitted at once, at most CONCURRENCY in flight, each asking
for exactly OUTPUT_LEN tokens (`ignore_eos`), with a prompt of INPUT_LEN tokens as the server's
`/tokenize` counts them (llama-server's `{"content": ...}` body).

Usage:
    python3 tools/bench/independent_client.py --url http://127.0.0.1:8091 \
        --num-prompts 16 --input-len 128 --output-len 64 --concurrency 4 [--seed 1]

Prints one JSON line.
"""

import argparse
import http.client
import json
import random
import statistics
import threading
import time
import urllib.parse

WORDS = (
    "apple river stone cloud green music paper light window garden silver morning table "
    "horse winter bridge forest market summer yellow ocean mountain orange letter castle "
    "island doctor engine planet rabbit school spring teacher village yellow thunder"
).split()


def post_json(host, port, path, body):
    conn = http.client.HTTPConnection(host, port, timeout=600)
    conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    resp = conn.getresponse()
    data = resp.read()
    conn.close()
    if resp.status != 200:
        raise RuntimeError(f"{path}: HTTP {resp.status}: {data[:200]!r}")
    return json.loads(data)


def count_tokens(host, port, text):
    return len(post_json(host, port, "/tokenize", {"content": text})["tokens"])


def make_prompt(host, port, rng, n_tokens):
    """Random words, corrected until the server counts exactly n_tokens."""
    words = [rng.choice(WORDS) for _ in range(n_tokens)]
    for _ in range(50):
        n = count_tokens(host, port, " ".join(words))
        if n == n_tokens:
            return " ".join(words)
        if n > n_tokens:
            del words[max(1, len(words) - (n - n_tokens)):]
        else:
            words += [rng.choice(WORDS) for _ in range(n_tokens - n)]
    raise RuntimeError(f"no prompt of exactly {n_tokens} tokens")


def one_request(host, port, prompt, output_len):
    body = {
        "prompt": prompt,
        "max_tokens": output_len,
        "stream": True,
        "ignore_eos": True,
        "temperature": 0.0,
        "stream_options": {"include_usage": True},
    }
    conn = http.client.HTTPConnection(host, port, timeout=600)
    st = time.perf_counter()
    conn.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
    resp = conn.getresponse()
    if resp.status != 200:
        raise RuntimeError(f"HTTP {resp.status}: {resp.read()[:200]!r}")
    text_times = []
    usage_tokens = None
    # http.client undoes the chunked transfer encoding; SSE events are "data: ..." lines.
    while True:
        line = resp.readline()
        if not line:
            break
        now = time.perf_counter()
        line = line.strip()
        if not line.startswith(b"data:"):
            continue
        payload = line[5:].strip()
        if payload == b"[DONE]":
            break
        event = json.loads(payload)
        choices = event.get("choices") or []
        if choices and choices[0].get("text"):
            text_times.append(now)
        usage = event.get("usage")
        if usage and usage.get("completion_tokens") is not None:
            usage_tokens = usage["completion_tokens"]
    conn.close()
    ttft = text_times[0] - st
    e2el = text_times[-1] - st
    itl = [b - a for a, b in zip(text_times, text_times[1:])]
    n = usage_tokens if usage_tokens is not None else len(text_times)
    tpot = (e2el - ttft) / (n - 1) if n > 1 else None
    return {"ttft": ttft, "e2el": e2el, "itl": itl, "tpot": tpot, "output_tokens": n}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", required=True)
    ap.add_argument("--num-prompts", type=int, default=16)
    ap.add_argument("--input-len", type=int, default=128)
    ap.add_argument("--output-len", type=int, default=64)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    u = urllib.parse.urlparse(a.url)
    host, port = u.hostname, u.port or 80
    rng = random.Random(a.seed)
    prompts = [make_prompt(host, port, rng, a.input_len) for _ in range(a.num_prompts)]

    results = [None] * len(prompts)
    sem = threading.Semaphore(a.concurrency)

    def worker(i):
        with sem:
            results[i] = one_request(host, port, prompts[i], a.output_len)

    t0 = time.perf_counter()
    threads = [threading.Thread(target=worker, args=(i,)) for i in range(len(prompts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    duration = time.perf_counter() - t0

    ms = lambda xs: [x * 1e3 for x in xs]
    tpot = ms([r["tpot"] for r in results if r["tpot"] is not None])
    ttft = ms([r["ttft"] for r in results])
    itl = ms([g for r in results for g in r["itl"]])
    out_tokens = sum(r["output_tokens"] for r in results)
    print(json.dumps({
        "client": "independent (python stdlib)",
        "completed": len(results),
        "duration_s": duration,
        "total_output_tokens": out_tokens,
        "output_throughput": out_tokens / duration,
        "tpot_ms": {"median": statistics.median(tpot), "mean": statistics.mean(tpot)},
        "ttft_ms": {"median": statistics.median(ttft), "mean": statistics.mean(ttft)},
        "itl_ms": {"median": statistics.median(itl), "mean": statistics.mean(itl)},
    }))


if __name__ == "__main__":
    main()
