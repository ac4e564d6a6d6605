"""TTFT of a request that shares a long prefix with an earlier one, through `ridge serve`.

Usage: python3 scripts/prefix-cache-ttft.py BASE_URL [PREFIX_CHARS]

Sends a ~1500-token prompt (the start of tests/data/prose.txt plus a question), then a second
prompt with the same prefix and a different question, streaming both, and prints each TTFT as
the client sees it (request sent → first chunk with text), the cached tokens the server reports,
and the ratio. Issue #4's bar: the second TTFT ≤ 30% of the first.
"""

import json
import pathlib
import sys
import time
import urllib.request


def stream(base, prompt):
    body = json.dumps({
        "prompt": prompt, "max_tokens": 4, "temperature": 0, "stream": True,
        "stream_options": {"include_usage": True},
    }).encode()
    req = urllib.request.Request(f"{base}/v1/completions", body, {"Content-Type": "application/json"})
    t0 = time.perf_counter()
    ttft, usage = None, None
    with urllib.request.urlopen(req) as r:
        for raw in r:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            d = json.loads(line[6:])
            if ttft is None and d["choices"] and d["choices"][0]["text"]:
                ttft = (time.perf_counter() - t0) * 1e3
            if d.get("usage"):
                usage = d["usage"]
    return ttft, usage


def main():
    base = sys.argv[1].rstrip("/")
    chars = int(sys.argv[2]) if len(sys.argv) > 2 else 6200
    text = (pathlib.Path(__file__).parent.parent / "tests/data/prose.txt").read_text()
    prefix = text[:chars]
    a, ua = stream(base, prefix + "\n\nQuestion one: what is this text about?")
    b, ub = stream(base, prefix + "\n\nQuestion two: who wrote it?")
    print(json.dumps({
        "prompt_tokens": ua["prompt_tokens"],
        "first_ttft_ms": round(a, 1),
        "second_ttft_ms": round(b, 1),
        "second_cached_tokens": ub["prompt_tokens_details"]["cached_tokens"],
        "ratio": round(b / a, 3),
    }))


if __name__ == "__main__":
    main()
