#!/usr/bin/env python3
"""Peak resident memory of `ridge serve` with several models (plain completions: not every model has a chat template) under `--max-memory`, while
clients cycle through more models than fit (#32 item 5).

Starts `ridge serve` with the given models, a memory budget and a fixed KV size per model,
then runs ROUNDS rounds in which CLIENTS concurrent clients each ask a different model (in a
rotating order) for a short chat answer. It samples the server's VmRSS every 20 ms and reads
VmHWM (the kernel's peak) at the end, and prints JSON: budget, peak, overhead over the budget,
loads and unloads seen in /v1/models.

Usage: multi-model-rss.py RIDGE_BINARY BUDGET_GIB MODEL... [--rounds N] [--clients C]
"""
import argparse
import json
import subprocess
import threading
import time
import urllib.request


def rss(pid, key):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    return 0


def post(base, body):
    req = urllib.request.Request(base + "/v1/completions", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.load(r)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("ridge")
    ap.add_argument("budget_gib", type=float)
    ap.add_argument("models", nargs="+")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--clients", type=int, default=2)
    ap.add_argument("--kv-mib", type=int, default=64)
    ap.add_argument("--port", type=int, default=18931)
    a = ap.parse_args()
    cmd = [a.ridge, "serve", "--port", str(a.port), "--max-memory", str(a.budget_gib),
           "--kv-cache-mem", str(a.kv_mib), "--models-max", str(len(a.models)), "--max-seqs", "4"]
    for m in a.models:
        cmd += ["--model", m]
    srv = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
    base = f"http://127.0.0.1:{a.port}"
    for line in srv.stderr:
        if "on http://" in line:
            break
    threading.Thread(target=lambda: [None for _ in srv.stderr], daemon=True).start()
    peak_sampled, stop = [0], [False]

    def sample():
        while not stop[0]:
            peak_sampled[0] = max(peak_sampled[0], rss(srv.pid, "VmRSS"))
            time.sleep(0.02)

    threading.Thread(target=sample, daemon=True).start()
    with urllib.request.urlopen(base + "/v1/models") as r:
        ids = [m["id"] for m in json.load(r)["data"]]
    statuses, t0 = [], time.time()
    for rnd in range(a.rounds):
        for k in range(len(ids)):
            picks = [ids[(k + c) % len(ids)] for c in range(a.clients)]
            threads = [threading.Thread(target=post, args=(base, {
                "model": m, "max_tokens": 16, "prompt": "The colours of the rainbow are"}))
                for m in picks]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            with urllib.request.urlopen(base + "/v1/models") as r:
                data = json.load(r)["data"]
            loaded = [(m["id"], m.get("memory_bytes")) for m in data
                      if m["status"]["value"] == "loaded"]
            statuses.append({"asked": picks, "loaded": loaded,
                             "loaded_bytes": sum(b or 0 for _, b in loaded)})
    stop[0] = True
    hwm = rss(srv.pid, "VmHWM")
    srv.terminate()
    srv.wait()
    budget = int(a.budget_gib * (1 << 30))
    print(json.dumps({
        "budget_bytes": budget, "peak_rss_bytes": hwm, "peak_rss_sampled_bytes": peak_sampled[0],
        "overhead_bytes": hwm - budget,
        "max_loaded_bytes": max(s["loaded_bytes"] for s in statuses),
        "requests": a.rounds * len(ids) * a.clients, "seconds": round(time.time() - t0, 1),
        "steps": statuses}, indent=1))


if __name__ == "__main__":
    main()
