"""TTFT of a short chat request sent while a long prompt is being prefilled, and of the long one.

Usage: python3 scripts/short-behind-long-ttft.py RIDGE_BINARY [MODEL]

Starts `ridge serve --model MODEL` (default qwen2.5-coder-0.5b), streams a ~12k-token prompt,
sends a ~400-token one 3 s later, and prints each one's time to its first content token (s).
Before the scheduler shared the step budget (session 33) the short one waited for the long
prefill to end.
"""
import json, subprocess, sys, time, threading, urllib.request
binary = sys.argv[1]
model = sys.argv[2] if len(sys.argv) > 2 else "qwen2.5-coder-0.5b"
p = subprocess.Popen([binary, "serve", "--model", model, "--port", "0"], stderr=subprocess.PIPE, text=True)
for line in p.stderr:
    if "on http://" in line:
        base = "http://" + line.split("on http://", 1)[1].split()[0]; break
threading.Thread(target=lambda: [None for _ in p.stderr], daemon=True).start()
def ttft(prompt, out, key):
    body = {"messages": [{"role": "user", "content": prompt}], "max_tokens": 4, "stream": True, "temperature": 0}
    r = urllib.request.Request(base + "/v1/chat/completions", json.dumps(body).encode(), {"Content-Type": "application/json"})
    t0 = time.perf_counter()
    with urllib.request.urlopen(r, timeout=3000) as resp:
        for raw in resp:
            l = raw.decode().strip()
            if l.startswith("data:") and l != "data: [DONE]":
                d = json.loads(l[5:])
                if d["choices"] and d["choices"][0]["delta"].get("content"):
                    out[key] = time.perf_counter() - t0; break
out = {}
long = " ".join(f"word{i % 97} is number {i}." for i in range(1000))
short = "Summarize in one line: " + " ".join(f"item {i}" for i in range(120))
t = threading.Thread(target=ttft, args=(long, out, "long")); t.start()
time.sleep(3)
ttft(short, out, "short"); t.join()
print(json.dumps(out))
p.terminate(); p.wait()
