#!/usr/bin/env python3
"""Replicas of ridge behind SGLang's gateway, measured (issue #33, item 5).

Usage: python3 scripts/cluster-bench.py [--parts cache,kill,throughput,plan] [--repeat 2]
           [--model smollm2-135m] [--seed 0] [--system-prompts 6] [--questions 8]
           [--system-words 380] [--max-tokens 16] [--concurrency 4] [--json FILE]

Starts clusters with `scripts/cluster` (its `Cluster` class): 2 replicas × 1 thread unless a
part says otherwise. The workload is generated from `--seed`: `--system-prompts` system
prompts, each an excerpt of `tests/data/prose.txt` of `--system-words` words starting at a
seeded offset, each followed by `--questions` short seeded questions about a word of its
excerpt; the requests are shuffled with the seed and sent by `--concurrency` closed-loop
clients as streaming chat completions (`max_tokens` exact: `ignore_eos`).

Parts:
- `cache`: the same requests under `--policy cache_aware` and `round_robin` (alternating,
  `--repeat` times each). Every replica is reset with `POST /flush_cache` first; counters are
  read as deltas of each replica's own `/metrics`: requests per replica
  (`ridge:request_success_total`) and the prefix-cache hit rate
  (`ridge:prefix_cache_hits_total` / `ridge:prefix_cache_queries_total`, tokens), against
  the ideal — the hit rate if every request landed on a replica already holding every earlier
  request's blocks, i.e. each request reuses its longest common token prefix with any request
  sent before it (whole 16-token blocks, at most all but its last token, as ridge's prefix
  cache attaches them): only the first request of each system prompt misses its system
  prompt. TTFT is the client's (request sent → first content chunk).
- `kill`: under cache-aware routing, non-streaming and streaming requests at once; one
  replica gets `kill -9` while it runs requests. Every non-streaming request must complete
  (the gateway retries); streams cut off must end with an error the client sees, not a hang
  (client timeouts detect hangs). The replica is then restarted on its port and must rejoin
  (the gateway's health checks) and serve requests again.
- `throughput`: the same workload (cache-aware) on 2 replicas × 1 thread and on 1 replica × 2
  threads behind the same gateway: requests/s and output tokens/s over the run.
- `plan`: `ridge bench serve` (random prompts, no shared prefix, `--input-len 128
  --output-len 32`) through the gateway of 1 replica × 2 threads and 2 replicas × 1 thread:
  throughput with every request at once (saturation) and TTFT/TPOT at one Poisson rate
  (`--plan-rate`, the same in all for both) — the figures `ridge roofline plan` is checked
  against.

Before each run the load average and running rustc processes are recorded (other agents'
compiles disturb the numbers; `--wait-quiet S` waits up to S seconds for no rustc).
"""

import argparse
import concurrent.futures as cf
import http.client
import importlib.machinery
import importlib.util
import json
import os
import random
import re
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BLOCK = 16  # ridge's KV block: the prefix cache reuses whole blocks.
SERVED = ["smollm2-135m"]  # the served model name, read from a replica's /v1/models


def load_cluster_module():
    loader = importlib.machinery.SourceFileLoader("ridge_cluster", str(REPO / "scripts" / "cluster"))
    spec = importlib.util.spec_from_loader("ridge_cluster", loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


cluster = load_cluster_module()

# -- the workload ---------------------------------------------------------------------------


def workload(seed, n_sys, n_q, sys_words):
    """[(system index, messages)] in send order, all from `seed`."""
    rng = random.Random(seed)
    words = (REPO / "tests" / "data" / "prose.txt").read_text().split()
    systems = []
    for k in range(n_sys):
        start = rng.randrange(0, max(1, len(words) - sys_words))
        excerpt = " ".join(words[start:start + sys_words])
        systems.append((f"You answer questions about the following text, briefly and only from "
                        f"it.\n\n{excerpt}", [w.strip(".,;:!?\"'()") for w in
                                              words[start:start + sys_words]]))
    forms = ["What does the text say about {w}?", "Where in the text does {w} appear?",
             "In one sentence: why is {w} mentioned?", "Who or what is connected to {w}?",
             "Summarise the part about {w}.", "Is {w} important in the text?"]
    reqs = []
    for k, (system, vocab) in enumerate(systems):
        vocab = [w for w in vocab if len(w) > 3] or ["it"]
        for q in range(n_q):
            question = rng.choice(forms).format(w=rng.choice(vocab))
            reqs.append((k, [{"role": "system", "content": system},
                             {"role": "user", "content": question}]))
    rng.shuffle(reqs)
    return reqs


def tokens_of(url, messages):
    code, text = cluster.http("POST", url + "/tokenize", {"messages": messages}, timeout=30)
    if code != 200:
        raise RuntimeError(f"/tokenize answered {code}: {text[:200]}")
    return json.loads(text)["tokens"]


def ideal_hit_rate(url, reqs):
    """(ideal hits, prompt tokens): each request reuses its longest common prefix with any
    earlier one, in whole blocks, at most all but its last token."""
    seen, hits, total = [], 0, 0
    for _, messages in reqs:
        toks = tokens_of(url, messages)
        lcp = 0
        for s in seen:
            n = 0
            for a, b in zip(s, toks):
                if a != b:
                    break
                n += 1
            lcp = max(lcp, n)
        hits += min(lcp, len(toks) - 1) // BLOCK * BLOCK
        total += len(toks)
        seen.append(toks)
    return hits, total


# -- clients --------------------------------------------------------------------------------


def chat(base, messages, max_tokens, stream, timeout=120.0):
    """One chat completion; a dict with ok, kind (done / error / hang), ttft_s, e2e_s, tokens."""
    # The gateway fills a missing `model` with "unknown", which ridge refuses: name it.
    body = {"model": SERVED[0], "messages": messages, "max_tokens": max_tokens, "temperature": 0,
            "ignore_eos": True, "stream": stream}
    if stream:
        body["stream_options"] = {"include_usage": True}
    req = urllib.request.Request(base + "/v1/chat/completions", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    t0 = time.perf_counter()
    out = {"ok": False, "kind": "error", "ttft_s": None, "e2e_s": None, "tokens": 0,
           "error": None, "stream": stream}
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            if not stream:
                d = json.loads(r.read())
                out["tokens"] = d.get("usage", {}).get("completion_tokens", 0)
                out["ok"] = bool(d.get("choices")) and out["tokens"] == max_tokens
                out["kind"] = "done" if out["ok"] else "error"
                if not out["ok"]:
                    out["error"] = f"incomplete answer: {json.dumps(d)[:200]}"
            else:
                done = False
                for raw in r:
                    line = raw.decode("utf-8", "replace").strip()
                    if not line.startswith("data: "):
                        continue
                    if line == "data: [DONE]":
                        done = True
                        break
                    d = json.loads(line[6:])
                    if "error" in d:
                        out["error"] = f"error event: {json.dumps(d['error'])[:200]}"
                        break
                    ch = d.get("choices") or []
                    if ch and (ch[0].get("delta") or {}).get("content"):
                        if out["ttft_s"] is None:
                            out["ttft_s"] = time.perf_counter() - t0
                    if d.get("usage"):
                        out["tokens"] = d["usage"].get("completion_tokens", 0)
                if done and out["error"] is None:
                    out["ok"] = out["tokens"] == max_tokens
                    out["kind"] = "done" if out["ok"] else "error"
                    if not out["ok"]:
                        out["error"] = f"stream ended after {out['tokens']} tokens"
                elif out["error"] is None:
                    out["error"] = "stream closed without [DONE]"
    except (socket.timeout, TimeoutError) as e:
        out["kind"], out["error"] = "hang", f"no progress in {timeout} s ({e})"
    except urllib.error.HTTPError as e:
        out["error"] = f"HTTP {e.code}: {e.read()[:200]!r}"
    except (OSError, ValueError, http.client.HTTPException) as e:
        out["error"] = f"{type(e).__name__}: {e}"
    out["e2e_s"] = time.perf_counter() - t0
    return out


def closed_loop(base, reqs, concurrency, max_tokens, stream=True, timeout=300.0):
    """Sends every request with `concurrency` clients; (results in send order, wall seconds)."""
    t0 = time.perf_counter()
    with cf.ThreadPoolExecutor(concurrency) as ex:
        futs = [ex.submit(chat, base, m, max_tokens, stream, timeout) for _, m in reqs]
        results = [f.result() for f in futs]
    return results, time.perf_counter() - t0


# -- replica counters -----------------------------------------------------------------------

METRIC = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(\{[^}]*\})?\s+(\S+)")


def counters(url):
    """Sums of the counters the bench reads from one replica's /metrics."""
    code, text = cluster.http("GET", url + "/metrics", timeout=10)
    if code != 200:
        raise RuntimeError(f"{url}/metrics answered {code}")
    want = {"ridge:request_success_total": "requests", "ridge:prefix_cache_hits_total": "hits",
            "ridge:prefix_cache_queries_total": "queries",
            "ridge:generation_tokens_total": "gen_tokens",
            "ridge:prompt_tokens_total": "prompt_tokens"}
    out = dict.fromkeys(want.values(), 0.0)
    for line in text.splitlines():
        m = METRIC.match(line)
        if m and m.group(1) in want:
            out[want[m.group(1)]] += float(m.group(3))
    return out


def delta(after, before):
    return {k: after[k] - before[k] for k in after}


def pct(xs, p):
    xs = sorted(x for x in xs if x is not None)
    if not xs:
        return None
    k = (len(xs) - 1) * p / 100
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def machine_load():
    rustc = subprocess.run(["pgrep", "-fc", "rustc"], capture_output=True, text=True).stdout.strip()
    return {"loadavg_1m": round(os.getloadavg()[0], 2), "rustc_procs": int(rustc or 0)}


def wait_quiet(limit):
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline and machine_load()["rustc_procs"] > 0:
        time.sleep(5)


# -- parts ----------------------------------------------------------------------------------


def make(args, replicas, threads, policy):
    c = cluster.Cluster(replicas=replicas, threads=threads, model=args.model, port=0,
                        policy=policy, ridge=args.ridge, router=args.router,
                        log_dir=args.log_dir, serve_args=["--bandwidth-gbs", "20"]).start()
    code, text = cluster.http("GET", c.replicas[0].url + "/v1/models")
    if code == 200:
        SERVED[0] = json.loads(text)["data"][0]["id"]
    return c


def run_workload(args, c, reqs, stream=True):
    """Flushes every replica, sends `reqs` through the gateway; the run's figures."""
    for r in c.replicas:
        code, text = cluster.http("POST", r.url + "/flush_cache", {}, timeout=30)
        if code != 200:
            raise RuntimeError(f"{r.url}/flush_cache answered {code}: {text[:200]}")
    before = [counters(r.url) for r in c.replicas]
    load = machine_load()
    results, wall = closed_loop(c.url, reqs, args.concurrency, args.max_tokens, stream)
    after = [counters(r.url) for r in c.replicas]
    d = [delta(a, b) for a, b in zip(after, before)]
    hits, queries = sum(x["hits"] for x in d), sum(x["queries"] for x in d)
    ok = [x for x in results if x["ok"]]
    ttft = [x["ttft_s"] for x in ok]
    return {
        "policy": c.policy, "replicas": len(c.replicas),
        "threads": int(c.replicas[0].argv[2]), **load,
        "requests": len(results), "ok": len(ok),
        "errors": [x["error"] for x in results if not x["ok"]][:5],
        "per_replica_requests": [int(x["requests"]) for x in d],
        "hits": int(hits), "queries": int(queries),
        "hit_rate": hits / queries if queries else 0.0,
        "ttft_p50_ms": 1e3 * pct(ttft, 50) if ttft else None,
        "ttft_p90_ms": 1e3 * pct(ttft, 90) if ttft else None,
        "wall_s": wall, "req_per_s": len(ok) / wall,
        "out_tok_per_s": sum(x["tokens"] for x in ok) / wall,
        "load_after": machine_load()["loadavg_1m"],
    }


def part_cache(args, reqs, ideal):
    runs = []
    for rep in range(args.repeat):
        for policy in ("cache_aware", "round_robin"):
            wait_quiet(args.wait_quiet)
            c = make(args, 2, 1, policy)
            try:
                r = run_workload(args, c, reqs)
            finally:
                c.stop()
            r["repeat"] = rep
            r["ideal_hit_rate"] = ideal
            r["of_ideal"] = r["hit_rate"] / ideal if ideal else None
            runs.append(r)
            log(f"cache: {policy:12} rep {rep}: hit {100 * r['hit_rate']:.1f}% "
                f"({100 * r['of_ideal']:.1f}% of ideal {100 * ideal:.1f}%), "
                f"TTFT p50 {r['ttft_p50_ms']:.0f} ms, per replica {r['per_replica_requests']}, "
                f"{r['ok']}/{r['requests']} ok, load {r['loadavg_1m']}")
    return runs


def part_kill(args, reqs):
    wait_quiet(args.wait_quiet)
    c = make(args, 2, 1, "cache_aware")
    out = {}
    try:
        # Warm both replicas' caches and the gateway's tree with one request per prompt.
        firsts = {}
        for k, m in reqs:
            firsts.setdefault(k, m)
        closed_loop(c.url, [(k, m) for k, m in firsts.items()], 2, 2, stream=False)
        victim = 1
        plain = [m for _, m in reqs[: args.kill_requests]]
        streams = [m for _, m in reqs[args.kill_requests: args.kill_requests + args.kill_streams]]
        results = {}
        load = machine_load()
        with cf.ThreadPoolExecutor(len(plain) + len(streams)) as ex:
            futs = [(False, ex.submit(chat, c.url, m, args.kill_max_tokens, False, args.client_timeout))
                    for m in plain]
            futs += [(True, ex.submit(chat, c.url, m, args.kill_max_tokens, True, args.client_timeout))
                     for m in streams]
            # Kill the victim once it is running requests (its own /get_load says so).
            running, deadline = 0, time.monotonic() + 60
            while time.monotonic() < deadline:
                code, text = cluster.http("GET", c.replicas[victim].url + "/get_load", timeout=2)
                if code == 200:
                    running = sum(x.get("num_reqs", 0) + x.get("num_waiting_reqs", 0)
                                  for x in json.loads(text))
                    if running >= 2:
                        break
                time.sleep(0.05)
            time.sleep(0.5)
            t_kill = time.perf_counter()
            c.kill(victim)
            killed_at = time.time()
            for stream, f in futs:
                results.setdefault(stream, []).append(f.result())
        after_kill = time.perf_counter() - t_kill
        survivor = counters(c.replicas[1 - victim].url)
        t0 = time.perf_counter()
        re_added = c.restart(victim)
        rejoin_s = time.perf_counter() - t0
        # Traffic again: requests until the restarted replica has served one (the gateway's
        # circuit breaker for it half-opens after a timeout), at most `--rejoin-timeout` s.
        # Fresh system prompts: cache-aware routing rightly keeps the old ones on the
        # survivor, which holds them all now; a new prefix goes to the emptier replica.
        before = counters(c.replicas[victim].url)
        again, t0, served = [], time.perf_counter(), 0
        fresh = workload(args.seed + 1, 64, 1, args.system_words)
        while time.perf_counter() - t0 < args.rejoin_timeout and fresh:
            batch, _ = closed_loop(c.url, fresh[: args.concurrency], args.concurrency, 4,
                                   stream=False)
            fresh = fresh[args.concurrency:]
            again += batch
            served = delta(counters(c.replicas[victim].url), before)["requests"]
            if served > 0:
                break
            time.sleep(0.5)
        traffic_s = rejoin_s + time.perf_counter() - t0
        p, s = results.get(False, []), results.get(True, [])
        out = {
            **load, "victim_running_at_kill": running, "killed_at_unix": killed_at,
            "plain": len(p), "plain_ok": sum(x["ok"] for x in p),
            "plain_errors": [x["error"] for x in p if not x["ok"]][:5],
            "streams": len(s), "streams_ok": sum(x["ok"] for x in s),
            "streams_error": sum(x["kind"] == "error" for x in s),
            "streams_hang": sum(x["kind"] == "hang" for x in s),
            "stream_errors": sorted({x["error"] for x in s if x["error"]})[:5],
            "drain_after_kill_s": after_kill,
            "survivor_requests_total": int(survivor["requests"]),
            "rejoin_s": rejoin_s, "re_added_via_api": re_added,
            "after_requests": len(again), "after_ok": sum(x["ok"] for x in again),
            "restarted_replica_served": int(served), "traffic_again_s": traffic_s,
        }
        log(f"kill: {out['plain_ok']}/{out['plain']} non-streaming ok; streams "
            f"{out['streams_ok']} ok, {out['streams_error']} error, {out['streams_hang']} hang; "
            f"healthy in {rejoin_s:.1f} s (re-added: {re_added}), served again "
            f"{traffic_s:.1f} s after the restart ({out['restarted_replica_served']} of "
            f"{len(again)} requests)")
    finally:
        c.stop()
    return out


def part_throughput(args, reqs):
    runs = []
    for rep in range(args.repeat):
        for replicas, threads in ((2, 1), (1, 2)):
            wait_quiet(args.wait_quiet)
            c = make(args, replicas, threads, "cache_aware")
            try:
                r = run_workload(args, c, reqs)
            finally:
                c.stop()
            r["repeat"] = rep
            runs.append(r)
            log(f"throughput: {replicas} x {threads} thread(s) rep {rep}: "
                f"{r['req_per_s']:.3f} req/s, {r['out_tok_per_s']:.1f} out tok/s, "
                f"TTFT p50 {r['ttft_p50_ms']:.0f} ms, hit {100 * r['hit_rate']:.1f}%, "
                f"{r['ok']}/{r['requests']} ok, load {r['loadavg_1m']}")
    return runs


def bench_serve(args, url, extra):
    cmd = [args.ridge or str(REPO / "target/release/ridge"), "bench", "serve", "--url", url,
           "--model", args.model, "--input-len", str(args.plan_input), "--output-len",
           str(args.plan_output), "--json", *extra]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if p.returncode != 0:
        raise RuntimeError(f"ridge bench serve failed: {p.stderr.strip()[-400:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def part_plan(args):
    runs = []
    for rep in range(args.repeat):
        for replicas, threads in ((1, 2), (2, 1)):
            wait_quiet(args.wait_quiet)
            c = make(args, replicas, threads, "round_robin")
            try:
                load = machine_load()
                sat = bench_serve(args, c.url, ["--num-prompts", str(args.plan_prompts),
                                                "--seed", str(rep)])
                rate = bench_serve(args, c.url, ["--num-prompts", str(args.plan_prompts),
                                                 "--request-rate", str(args.plan_rate),
                                                 "--seed", str(rep + 100)])
            finally:
                c.stop()
            r = {"replicas": replicas, "threads": threads, "repeat": rep, **load,
                 "saturation": sat, "at_rate": rate, "rate": args.plan_rate}
            runs.append(r)
            log(f"plan: {replicas} x {threads}: saturation {sat.get('request_throughput', 0):.3f} "
                f"req/s; at {args.plan_rate} req/s: TTFT mean "
                f"{rate['ttft_ms']['mean']:.0f} ms, TPOT mean {rate['tpot_ms']['mean']:.1f} ms")
    return runs


def log(msg):
    print(f"cluster-bench: {msg}", file=sys.stderr, flush=True)


def table(res):
    cpu = res["cpu"]
    print(f"\n{cpu}; model {res['model']}; seed {res['seed']}; {res['workload']}")
    if "cache" in res:
        print("\n| policy | rep | load | per replica | hit rate | of ideal | TTFT p50 | TTFT p90 | ok |")
        print("| --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: |")
        for r in res["cache"]:
            print(f"| {r['policy']} | {r['repeat']} | {r['loadavg_1m']} | "
                  f"{' / '.join(map(str, r['per_replica_requests']))} | "
                  f"{100 * r['hit_rate']:.1f}% | {100 * r['of_ideal']:.1f}% | "
                  f"{r['ttft_p50_ms']:.0f} ms | {r['ttft_p90_ms']:.0f} ms | {r['ok']}/{r['requests']} |")
        print(f"\nideal hit rate {100 * res['ideal_hit_rate']:.1f}% "
              f"({res['ideal_hits']} of {res['prompt_tokens']} prompt tokens)")
    if "kill" in res and res["kill"]:
        k = res["kill"]
        print(f"\nkill -9 under load (load {k['loadavg_1m']}; victim had {k['victim_running_at_kill']} "
              f"requests): non-streaming {k['plain_ok']}/{k['plain']} completed; streams "
              f"{k['streams_ok']} completed, {k['streams_error']} ended with an error, "
              f"{k['streams_hang']} hung; the restarted replica was healthy in {k['rejoin_s']:.1f} s "
              f"(re-added through the API: {k['re_added_via_api']}) and served traffic again "
              f"{k['traffic_again_s']:.1f} s after the restart ({k['restarted_replica_served']} of "
              f"{k['after_requests']} requests)")
        if k["stream_errors"]:
            print(f"  the clients saw: {k['stream_errors']}")
    if "throughput" in res:
        print("\n| replicas x threads | rep | load | req/s | output tok/s | TTFT p50 | hit rate | ok |")
        print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
        for r in res["throughput"]:
            print(f"| {r['replicas']} x {r['threads']} | {r['repeat']} | {r['loadavg_1m']} | "
                  f"{r['req_per_s']:.3f} | {r['out_tok_per_s']:.1f} | {r['ttft_p50_ms']:.0f} ms | "
                  f"{100 * r['hit_rate']:.1f}% | {r['ok']}/{r['requests']} |")
    if "plan" in res:
        print("\n| replicas x threads | rep | load | saturation req/s | out tok/s | rate | TTFT mean | TTFT p50 | TPOT mean |")
        print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
        for r in res["plan"]:
            s, a = r["saturation"], r["at_rate"]
            print(f"| {r['replicas']} x {r['threads']} | {r['repeat']} | {r['loadavg_1m']} | "
                  f"{s.get('request_throughput', 0):.3f} | {s.get('output_throughput', 0):.1f} | "
                  f"{r['rate']} | {a['ttft_ms']['mean']:.0f} ms | "
                  f"{a['ttft_ms']['median']:.0f} ms | {a['tpot_ms']['mean']:.1f} ms |")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--parts", default="cache,kill,throughput,plan")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--system-prompts", type=int, default=6)
    ap.add_argument("--questions", type=int, default=8)
    ap.add_argument("--system-words", type=int, default=380)
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--kill-requests", type=int, default=12)
    ap.add_argument("--kill-streams", type=int, default=6)
    ap.add_argument("--kill-max-tokens", type=int, default=48)
    ap.add_argument("--rejoin-timeout", type=float, default=120.0)
    ap.add_argument("--client-timeout", type=float, default=120.0)
    ap.add_argument("--plan-input", type=int, default=128)
    ap.add_argument("--plan-output", type=int, default=32)
    ap.add_argument("--plan-prompts", type=int, default=48)
    ap.add_argument("--plan-rate", type=float, default=2.0,
                    help="Poisson rate of the `plan` part's second run, req/s in all")
    ap.add_argument("--wait-quiet", type=float, default=0.0)
    ap.add_argument("--ridge")
    ap.add_argument("--router")
    ap.add_argument("--log-dir")
    ap.add_argument("--json", help="write every figure to this file")
    args = ap.parse_args()
    parts = set(args.parts.split(","))
    unknown = parts - {"cache", "kill", "throughput", "plan"}
    if unknown:
        sys.exit(f"cluster-bench: unknown part(s) {sorted(unknown)}")
    cpu = next((l.split(":", 1)[1].strip() for l in
                subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines()
                if l.startswith("Model name")), "unknown CPU")
    reqs = workload(args.seed, args.system_prompts, args.questions, args.system_words)
    res = {"cpu": f"{cpu}, {os.cpu_count()} CPUs", "model": args.model, "seed": args.seed,
           "workload": f"{args.system_prompts} system prompts of {args.system_words} words x "
                       f"{args.questions} questions, {args.max_tokens} output tokens, "
                       f"{args.concurrency} clients", "args": vars(args)}
    if parts & {"cache", "throughput"}:
        # The ideal from one replica's tokenizer (the chat template as served).
        c = make(args, 1, 1, "round_robin")
        try:
            hits, total = ideal_hit_rate(c.replicas[0].url, reqs)
        finally:
            c.stop()
        res.update(ideal_hits=hits, prompt_tokens=total, ideal_hit_rate=hits / total)
        log(f"{len(reqs)} requests, {total} prompt tokens, ideal hit rate {100 * hits / total:.1f}%")
    if "cache" in parts:
        res["cache"] = part_cache(args, reqs, res["ideal_hit_rate"])
    if "kill" in parts:
        res["kill"] = part_kill(args, reqs)
    if "throughput" in parts:
        res["throughput"] = part_throughput(args, reqs)
    if "plan" in parts:
        res["plan"] = part_plan(args)
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1))
    table(res)


if __name__ == "__main__":
    main()
