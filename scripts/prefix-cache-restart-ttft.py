"""TTFT of Claude Code's real first request, cold and after a server restart that kept the
prefix cache on disk (`--prefix-cache-dir`).

Usage: python3 scripts/prefix-cache-restart-ttft.py RIDGE_BINARY MODEL [BODY_JSON] [TOOLS]

Starts `ridge serve --model MODEL --prefix-cache-dir <fresh temp folder>`, sends the captured
Claude Code request (crates/ridge-server/tests/data/agents/claude_code_messages.json: its
system prompt, a system turn inside `messages`, 25 tools; streamed) and times the first text,
stops the server, starts a new one on the same folder and sends the request again. Prints the
two TTFTs (request sent -> first `text_delta`, as the client sees it), the cached tokens the
second reports, and the ratio. Issue #53's bar: the restarted TTFT <= 10% of the cold one.
"""

import json
import pathlib
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = pathlib.Path(__file__).resolve().parent.parent


def start(binary, model, folder):
    p = subprocess.Popen(
        [binary, "serve", "--model", model, "--port", "0", "--prefix-cache-dir", folder],
        stderr=subprocess.PIPE, text=True)
    for line in p.stderr:
        if "on http://" in line:
            addr = line.split("on http://", 1)[1].split()[0]
            return p, f"http://{addr}"
    raise SystemExit("the server did not start")


def first_text(base, body):
    req = urllib.request.Request(f"{base}/v1/messages", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    t0 = time.perf_counter()
    ttft = None
    with urllib.request.urlopen(req, timeout=3600) as r:
        event = None
        for raw in r:
            line = raw.decode().strip()
            if line.startswith("event: "):
                event = line[7:]
            elif line.startswith("data: "):
                d = json.loads(line[6:])
                # The first text (empty deltas are keep-alives during a long prefill).
                delta = d.get("delta", {})
                if event == "content_block_delta" and (delta.get("text") or delta.get(
                        "partial_json") or delta.get("thinking")):
                    ttft = (time.perf_counter() - t0) * 1e3
                    break
    return ttft


def main():
    binary, model = sys.argv[1], sys.argv[2]
    path = sys.argv[3] if len(sys.argv) > 3 else \
        ROOT / "crates/ridge-server/tests/data/agents/claude_code_messages.json"
    body = json.loads(pathlib.Path(path).read_text())
    body["max_tokens"] = 8
    if len(sys.argv) > 4:
        # Keep the first TOOLS tools: a shorter prompt of the same shape.
        body["tools"] = body["tools"][:int(sys.argv[4])]
    with tempfile.TemporaryDirectory() as folder:
        p, base = start(binary, model, folder)
        count = urllib.request.urlopen(urllib.request.Request(
            f"{base}/v1/messages/count_tokens", json.dumps(body).encode(),
            {"Content-Type": "application/json"})).read()
        tokens = json.loads(count)["input_tokens"]
        cold = first_text(base, body)
        p.terminate()
        p.wait()
        p, base = start(binary, model, folder)
        warm = first_text(base, body)
        state = json.loads(urllib.request.urlopen(f"{base}/state").read())
        p.terminate()
        p.wait()
        size = sum(f.stat().st_size for f in pathlib.Path(folder).rglob("*.kvb"))
    print(json.dumps({
        "prompt_tokens": tokens, "cold_ttft_ms": round(cold, 1),
        "restarted_ttft_ms": round(warm, 1), "ratio": round(warm / cold, 4),
        "disk_hits_blocks": state.get("kv_disk_hits"), "disk_bytes": size,
    }))


if __name__ == "__main__":
    main()
