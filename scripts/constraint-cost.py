"""The cost of constrained decoding: TPOT of JSON-schema requests vs the same requests without
the schema, against a running ridge (or any server taking `response_format`).

Usage: python3 scripts/constraint-cost.py URL CONCURRENCY REQUESTS [SCHEMA_FILE]

Each mode sends REQUESTS chat requests, CONCURRENCY at a time, and reports the median of the
server's per-request `timings.tpot_ms` (and tokens per answer). Standard library only.
"""

import json
import statistics
import sys
import threading
import time
import urllib.request

url, conc, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
schema = json.load(open(sys.argv[4])) if len(sys.argv) > 4 else {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 40},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "hobbies": {"type": "array", "items": {"type": "string", "maxLength": 30}, "maxItems": 5},
        "address": {"type": "object", "properties": {"city": {"type": "string"}, "zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
                    "required": ["city", "zip"], "additionalProperties": False},
    },
    "required": ["name", "age", "hobbies", "address"], "additionalProperties": False,
}


def one(i, constrained, out):
    body = {"messages": [{"role": "user", "content": f"Invent person number {i} and describe them as JSON with name, age, hobbies and address."}],
            "max_tokens": 128, "temperature": 0.8, "seed": i}
    if constrained:
        body["response_format"] = {"type": "json_schema", "json_schema": {"name": "person", "schema": schema}}
    req = urllib.request.Request(url + "/v1/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    t = json.load(urllib.request.urlopen(req, timeout=600))["timings"]
    out.append((t["tpot_ms"], t["predicted_n"], t.get("grammar_compile_ms")))


def run(constrained):
    out, sem = [], threading.Semaphore(conc)

    def worker(i):
        with sem:
            one(i, constrained, out)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(n)]
    t0 = time.time()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.time() - t0
    tpots = [o[0] for o in out if o[0] is not None]
    return {"tpot_ms_median": statistics.median(tpots), "tokens_mean": statistics.mean(o[1] for o in out),
            "compile_ms_median": statistics.median(o[2] for o in out) if constrained else None,
            "output_tok_s": sum(o[1] for o in out) / wall}


plain = run(False)
constrained = run(True)
print(json.dumps({"concurrency": conc, "requests": n, "plain": plain, "json_schema": constrained,
                  "tpot_ratio": constrained["tpot_ms_median"] / plain["tpot_ms_median"]}, indent=1))
