#!/usr/bin/env bash
# End-to-end check: real Claude Code and Codex CLIs against a real `ridge serve`.
#
# Starts ridge on a free port with a small local model, puts a recording pass-through
# proxy in front of it (stdlib Python; every request body, response status and raw
# response stream is saved), then runs one agent turn per client in a fresh empty
# working directory and a fresh HOME:
#   Claude Code (its default claude-… model names, Anthropic Messages):
#     claude -p "Create a file named hello.txt containing the single word hi. Use the Write tool." \
#       --permission-mode acceptEdits
#   Codex (custom provider `ridge`, wire_api = "responses", model "qwen"):
#     codex exec --skip-git-repo-check "Run ls in this directory and tell me what files are there."
# and prints a summary. Whether the small model does the task well is reported, not judged:
# the exit status is non-zero only when ridge answered a client with a 4xx/5xx, a stream
# ended without its terminal event, or a client reported an API/stream error.
#
# Environment (all optional):
#   AGENTS_DIR  npm prefix of the clients (default ~/.cache/ridge-agents; installed there,
#               pinned, when missing or at another version). AGENTS_DIR=/tmp/agents reuses one.
#   RIDGE       ridge binary (default target/release/ridge)
#   MODEL       model name or GGUF path for `ridge serve -m` (default qwen2.5-coder-1.5b)
#   OUT         where logs, client outputs, homes and work dirs go (default: a new temp dir)
#   TIMEOUT     seconds per client run (default 1500: prefill of Claude Code's ~19k-token
#               prompt takes minutes on a small CPU)
#   CLIENTS     which clients to run, in order (default "claude codex")
#   PROXY       1 (default): record through the proxy; 0: clients talk to ridge directly
#   CLIENT_DEBUG  1 (default): claude --debug-file, codex RUST_LOG=$CODEX_RUST_LOG (default debug)
#   RIDGE_ARGS  extra arguments for `ridge serve`
# Other variables reach the clients unchanged, e.g. CLAUDE_STREAM_IDLE_TIMEOUT_MS=3000000 to
# lift Claude Code's 300 s stream watchdog (it does not count Anthropic `ping` events).
set -euo pipefail

repo=$(cd "$(dirname "$0")/../.." && pwd)
CLAUDE_VERSION=2.1.197
CODEX_VERSION=0.171.0
agents_dir=${AGENTS_DIR:-$HOME/.cache/ridge-agents}
ridge=${RIDGE:-$repo/target/release/ridge}
model=${MODEL:-qwen2.5-coder-1.5b}
out=${OUT:-$(mktemp -d /tmp/ridge-agents-run.XXXXXX)}
timeout_s=${TIMEOUT:-1500}
clients=${CLIENTS:-claude codex}
use_proxy=${PROXY:-1}
client_debug=${CLIENT_DEBUG:-1}
codex_rust_log=${CODEX_RUST_LOG:-debug}
claude_prompt="Create a file named hello.txt containing the single word hi. Use the Write tool."
codex_prompt="Run ls in this directory and tell me what files are there."

log() { printf '[run_agents %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }

# --- 1. clients -------------------------------------------------------------------------
bin="$agents_dir/node_modules/.bin"
have_versions() {
  [[ -x $bin/claude && -x $bin/codex ]] || return 1
  [[ $("$bin/claude" --version 2>/dev/null) == "$CLAUDE_VERSION "* ]] || return 1
  [[ $("$bin/codex" --version 2>/dev/null) == "codex-cli $CODEX_VERSION" ]] || return 1
}
if ! have_versions; then
  log "installing @anthropic-ai/claude-code@$CLAUDE_VERSION @openai/codex@$CODEX_VERSION into $agents_dir"
  mkdir -p "$agents_dir"
  npm install --prefix "$agents_dir" --no-audit --no-fund --save-exact \
    "@anthropic-ai/claude-code@$CLAUDE_VERSION" "@openai/codex@$CODEX_VERSION" >&2
  have_versions || { log "clients not at the pinned versions after npm install"; exit 2; }
fi
log "clients: $("$bin/claude" --version), $("$bin/codex" --version)"

[[ -x $ridge ]] || { log "no ridge binary at $ridge (set RIDGE)"; exit 2; }
mkdir -p "$out"
rm -rf "$out/claude" "$out/codex" "$out/proxy"
rm -f "$out/ridge.log" "$out/proxy.log" "$out/summary.txt"
log "output in $out"

pids=()
cleanup() {
  local p
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
}
trap cleanup EXIT
trap 'exit 143' TERM
trap 'exit 130' INT

# wait_listen LOG PATTERN PID: the first match of PATTERN (sed -E, one group) in LOG
wait_listen() {
  local file=$1 pat=$2 pid=$3 v i
  for ((i = 0; i < 600; i++)); do
    v=$(sed -nE "s|$pat|\\1|p" "$file" 2>/dev/null | head -n1)
    if [[ -n $v ]]; then echo "$v"; return 0; fi
    kill -0 "$pid" 2>/dev/null || { log "process $pid exited:"; cat "$file" >&2; return 1; }
    sleep 1
  done
  log "timed out waiting for $file"; return 1
}

# --- 2. ridge -----------------------------------------------------------------------------
# shellcheck disable=SC2086  # RIDGE_ARGS is split on purpose
"$ridge" serve -m "$model" --port 0 --log-format text ${RIDGE_ARGS:-} 2>"$out/ridge.log" &
pids+=($!)
ridge_addr=$(wait_listen "$out/ridge.log" '.* on http://([^ ]+) .*' "${pids[-1]}")
log "ridge listening on $ridge_addr"

# --- recording proxy ------------------------------------------------------------------------
base=http://$ridge_addr
if [[ $use_proxy == 1 ]]; then
  mkdir -p "$out/proxy"
  cat >"$out/proxy.py" <<'PY'
# Pass-through HTTP proxy that records each exchange: NNN.req.json (method, path, headers,
# body) before forwarding, NNN.resp.json (status, headers, timings, whether the client went
# away) and NNN.resp.body (raw response bytes, streamed through as they arrive).
# A client that hangs up mid-request (a client-side timeout) makes the proxy drop its
# upstream connection too, so ridge sees the disconnect as it would without the proxy.
import http.client, itertools, json, os, select, socket, sys, threading, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

up_host, up_port = sys.argv[1].rsplit(":", 1)
out = sys.argv[2]
counter, lock = itertools.count(1), threading.Lock()
HOP = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "trailer",
       "upgrade", "content-length", "host"}

class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        sys.stderr.write("proxy: " + (fmt % args) + "\n")

    def _body(self):
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            data = b""
            while True:
                n = int(self.rfile.readline().split(b";")[0], 16)
                if n == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return data
                data += self.rfile.read(n)
                self.rfile.readline()
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n else b""

    def _do(self):
        with lock:
            n = next(counter)
        stem = os.path.join(out, f"{n:03d}")
        body = self._body()
        try:
            parsed = json.loads(body) if body else None
        except ValueError:
            parsed = body.decode("utf-8", "replace")
        t0 = time.time()
        with open(stem + ".req.json", "w") as f:
            json.dump({"method": self.command, "path": self.path, "time": t0,
                       "headers": dict(self.headers.items()), "body": parsed}, f, indent=1)
        headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP}
        headers["Host"] = f"{up_host}:{up_port}"
        rec = {"method": self.command, "path": self.path}
        conn = http.client.HTTPConnection(up_host, int(up_port), timeout=7200)
        done, gone = threading.Event(), []

        def watch():  # the client hanging up closes the upstream connection
            while not done.is_set():
                if not select.select([self.connection], [], [], 0.5)[0]:
                    continue
                try:
                    peek = self.connection.recv(1, socket.MSG_PEEK)
                except OSError:
                    peek = b""
                if not peek and not done.is_set():
                    gone.append(time.time() - t0)
                    try:
                        conn.sock.shutdown(socket.SHUT_RDWR)
                    except Exception:  # noqa: BLE001
                        pass
                return

        try:
            conn.request(self.command, self.path, body=body if body else None, headers=headers)
            threading.Thread(target=watch, daemon=True).start()
            resp = conn.getresponse()
        except Exception as e:  # noqa: BLE001
            done.set()
            rec.update(status=None, t_end=time.time() - t0)
            if gone:
                rec["client_gone"] = f"client hung up after {gone[0]:.1f}s, before response headers"
            else:
                rec["upstream_error"] = repr(e)
            json.dump(rec, open(stem + ".resp.json", "w"), indent=1)
            self.close_connection = True
            try:
                self.send_error(502, "upstream: " + repr(e))
            except OSError:
                pass
            return
        rec.update(status=resp.status, headers=resp.getheaders(), t_headers=time.time() - t0)
        length = resp.getheader("Content-Length")
        self.send_response_only(resp.status, resp.reason)
        for k, v in resp.getheaders():
            if k.lower() not in HOP:
                self.send_header(k, v)
        chunked = self.command != "HEAD" and length is None
        if chunked:
            self.send_header("Transfer-Encoding", "chunked")
        elif length is not None:
            self.send_header("Content-Length", length)
        self.end_headers()
        first, total, client_gone = None, 0, None
        with open(stem + ".resp.body", "wb") as f:
            try:
                while self.command != "HEAD":
                    data = resp.read1(65536)
                    if not data:
                        break
                    if first is None:
                        first = time.time() - t0
                    total += len(data)
                    f.write(data)
                    f.flush()
                    if chunked:
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                    else:
                        self.wfile.write(data)
                    self.wfile.flush()
                if chunked:
                    self.wfile.write(b"0\r\n\r\n")
                    self.wfile.flush()
            except (BrokenPipeError, ConnectionResetError) as e:
                client_gone = repr(e)
                self.close_connection = True
            except Exception as e:  # noqa: BLE001 - upstream broke mid-stream
                if not gone:
                    rec["upstream_error"] = repr(e)
                self.close_connection = True
        done.set()
        if gone and not client_gone:
            client_gone = f"client hung up after {gone[0]:.1f}s"
        conn.close()
        rec.update(t_first_byte=first, t_end=time.time() - t0, bytes=total, client_gone=client_gone)
        json.dump(rec, open(stem + ".resp.json", "w"), indent=1)

    do_GET = do_POST = do_HEAD = do_PUT = do_DELETE = do_OPTIONS = do_PATCH = _do

srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
srv.daemon_threads = True
sys.stderr.write(f"proxy: listening on 127.0.0.1:{srv.server_address[1]} -> {up_host}:{up_port}\n")
sys.stderr.flush()
srv.serve_forever()
PY
  python3 -u "$out/proxy.py" "$ridge_addr" "$out/proxy" 2>"$out/proxy.log" &
  pids+=($!)
  proxy_addr=$(wait_listen "$out/proxy.log" '.*listening on ([^ ]+) .*' "${pids[-1]}")
  base=http://$proxy_addr
  log "recording proxy on $proxy_addr"
fi

# Environment of a client run: no inherited API settings, no proxies for loopback.
clean_env=(env -u ANTHROPIC_MODEL -u ANTHROPIC_AUTH_TOKEN -u ANTHROPIC_SMALL_FAST_MODEL
  -u ANTHROPIC_DEFAULT_OPUS_MODEL -u ANTHROPIC_DEFAULT_SONNET_MODEL -u ANTHROPIC_DEFAULT_HAIKU_MODEL
  -u OPENAI_API_KEY -u OPENAI_BASE_URL -u CODEX_HOME -u RUST_LOG
  -u HTTP_PROXY -u HTTPS_PROXY -u http_proxy -u https_proxy -u ALL_PROXY -u all_proxy
  NO_PROXY=127.0.0.1,localhost no_proxy=127.0.0.1,localhost)

# --- 3. Claude Code -------------------------------------------------------------------------
run_claude() {
  local d=$out/claude rc=0 t0 dbg=()
  mkdir -p "$d/home" "$d/work"
  [[ $client_debug == 1 ]] && dbg=(--debug-file "$d/debug.log")
  log "claude: running (timeout ${timeout_s}s)"
  t0=$(date +%s)
  (cd "$d/work" && "${clean_env[@]}" HOME="$d/home" ANTHROPIC_BASE_URL="$base" \
     ANTHROPIC_API_KEY=dummy \
     timeout -k 10 "$timeout_s" "$bin/claude" -p "$claude_prompt" \
     --permission-mode acceptEdits "${dbg[@]}" </dev/null >"$d/stdout" 2>"$d/stderr") || rc=$?
  echo "$rc" >"$d/rc"
  echo $(($(date +%s) - t0)) >"$d/seconds"
  log "claude: exit $rc after $(cat "$d/seconds")s"
}

# --- 4. Codex -------------------------------------------------------------------------------
run_codex() {
  local d=$out/codex rc=0 t0 rl=()
  mkdir -p "$d/codex_home" "$d/home" "$d/work"
  cat >"$d/codex_home/config.toml" <<TOML
model_provider = "ridge"
model = "qwen"

[model_providers.ridge]
name = "ridge"
base_url = "$base/v1"
wire_api = "responses"
env_key = "RIDGE_API_KEY"
TOML
  [[ $client_debug == 1 ]] && rl=(RUST_LOG="$codex_rust_log")
  log "codex: running (timeout ${timeout_s}s)"
  t0=$(date +%s)
  (cd "$d/work" && "${clean_env[@]}" HOME="$d/home" CODEX_HOME="$d/codex_home" \
     RIDGE_API_KEY=dummy "${rl[@]}" \
     timeout -k 10 "$timeout_s" "$bin/codex" exec --skip-git-repo-check "$codex_prompt" \
     </dev/null >"$d/stdout" 2>"$d/stderr") || rc=$?
  echo "$rc" >"$d/rc"
  echo $(($(date +%s) - t0)) >"$d/seconds"
  log "codex: exit $rc after $(cat "$d/seconds")s"
}

for c in $clients; do
  case $c in
    claude) run_claude ;;
    codex) run_codex ;;
    *) log "unknown client $c"; exit 2 ;;
  esac
done

# Let the last log lines land, then stop ridge and the proxy.
sleep 2
cleanup
pids=()

# --- 5. summary ------------------------------------------------------------------------------
rc=0
python3 - "$out" "$clients" <<'PY' | tee "$out/summary.txt" || rc=$?
import glob, json, os, re, sys

out, clients = sys.argv[1], sys.argv[2].split()
bad = []  # protocol-level problems: these make the exit status non-zero
warn = []

def read(p, default=""):
    try:
        return open(p, encoding="utf-8", errors="replace").read()
    except OSError:
        return default

ridge_log = read(os.path.join(out, "ridge.log")).splitlines()
req_lines = [l for l in ridge_log if re.match(r"ridge serve: [A-Z]+ \S+ \d{3} ", l)]

# Proxy records, in order.
ex = []
for q in sorted(glob.glob(os.path.join(out, "proxy", "*.req.json"))):
    stem = q[: -len(".req.json")]
    r = json.load(open(q))
    r["resp"] = json.loads(read(stem + ".resp.json", "null"))
    r["raw"] = read(stem + ".resp.body")
    r["n"] = os.path.basename(stem)
    ex.append(r)

def sse_events(raw):
    evs = []
    for block in re.split(r"\r?\n\r?\n", raw):
        data = "\n".join(l[5:].lstrip() for l in block.splitlines() if l.startswith("data:"))
        if not data:
            continue
        try:
            evs.append(json.loads(data))
        except ValueError:
            evs.append({"type": "<unparsable>", "data": data[:200]})
    return evs

def describe(r):
    """One line on what the answer held: stop reason, tool calls, text."""
    evs = sse_events(r["raw"])
    path = r["path"].split("?")[0]
    if path.endswith("/messages"):
        tools, text, stop = [], "", None
        for e in evs:
            t = e.get("type")
            if t == "content_block_start" and e["content_block"].get("type") == "tool_use":
                tools.append(e["content_block"]["name"])
            elif t == "content_block_delta" and e["delta"].get("type") == "text_delta":
                text += e["delta"]["text"]
            elif t == "message_delta":
                stop = e.get("delta", {}).get("stop_reason")
        done = any(e.get("type") == "message_stop" for e in evs)
        return done, f"stop_reason={stop} tool_use={tools} text={text[:160]!r}"
    if path.endswith("/responses"):
        items, done = [], False
        for e in evs:
            if e.get("type") == "response.output_item.done":
                it = e["item"]
                if it.get("type") == "function_call":
                    items.append(f"function_call {it.get('name')}({it.get('arguments')})")
                elif it.get("type") == "message":
                    txt = "".join(c.get("text", "") for c in it.get("content", []))
                    items.append(f"message {txt[:160]!r}")
                else:
                    items.append(it.get("type"))
            if e.get("type") in ("response.completed", "response.incomplete", "response.failed"):
                done = e["type"]
        return done, f"end={done} output={items}"
    return True, ""

def terminal_ok(r):
    path = r["path"].split("?")[0]
    if r["method"] != "POST" or not (path.endswith("/messages") or path.endswith("/responses")):
        return True
    body = r["body"] if isinstance(r["body"], dict) else {}
    if not body.get("stream"):
        return True
    done, _ = describe(r)
    return done in (True, "response.completed", "response.incomplete")

print("=" * 78)
print("ridge request log (every `ridge serve:` request line):")
for l in req_lines:
    print("  " + l)
for l in req_lines:
    m = re.match(r"ridge serve: ([A-Z]+) (\S+) (\d{3}) ", l)
    if int(m.group(3)) >= 400:
        bad.append(f"ridge answered {m.group(1)} {m.group(2)} with {m.group(3)}: {l}")
other = [l for l in ridge_log if l not in req_lines and not l.startswith("ridge serve: ")]
if other:
    print("ridge stderr, other lines (first 20):")
    for l in other[:20]:
        print("  " + l)

if ex:
    print("-" * 78)
    print("proxied exchanges:")
    for r in ex:
        s = r["resp"] or {}
        body = r["body"] if isinstance(r["body"], dict) else {}
        extra = ""
        if body:
            extra = f" model={body.get('model')!r} tools={len(body.get('tools') or [])}"
        _, what = describe(r)
        sec = lambda k: "-" if s.get(k) is None else f"{s[k]:.1f}s"
        print(f"  {r['n']} {r['method']} {r['path']} -> {s.get('status')}"
              f"{extra} first_byte={sec('t_first_byte')} end={sec('t_end')} {what}")
        if s.get("client_gone"):
            print(f"      client closed the connection: {s['client_gone']}")
            warn.append(f"{r['n']} {r['path']}: client closed the connection mid-response")
        if s.get("upstream_error"):
            bad.append(f"{r['n']} {r['path']}: upstream error {s['upstream_error']}")
        if s.get("status") and s["status"] >= 400:
            bad.append(f"{r['n']} {r['method']} {r['path']} -> {s['status']}: {r['raw'][:600]}")
        if s.get("status") == 200 and not s.get("client_gone") and not terminal_ok(r):
            bad.append(f"{r['n']} {r['path']}: stream ended without its terminal event")
        if any(e.get("type") == "<unparsable>" for e in sse_events(r["raw"])):
            bad.append(f"{r['n']} {r['path']}: unparsable SSE data line")
        if any(e.get("type") in ("error", "response.failed") for e in sse_events(r["raw"])):
            bad.append(f"{r['n']} {r['path']}: error event in stream")

# Client lines that point at the server or the protocol (fatal), client-side timeouts
# (reported, not fatal: slow prefill on a small CPU), and lines worth showing.
TIMEOUT = {
    "claude": r"Streaming idle (timeout|warning)|Request timed out|falling back to non-streaming",
    "codex": r"idle timeout waiting for SSE|timed out|Reconnecting",
}
FATAL = {
    "claude": r"API Error|ECONNRESET|socket hang up",
    "codex": r"stream disconnected|unexpected status|error decoding response|^ERROR: ",
}
SHOW = {
    "claude": r"\[ERROR\]|Error:|error:",
    "codex": r"\bERROR\b|error:",
}
# Expected offline noise (telemetry, plugin and bootstrap fetches to the vendors' hosts).
NOISE = r"ENOTFOUND|Could not resolve host|error sending request for url|api\.anthropic\.com|chatgpt\.com"

def client_errors(name, text, pats):
    return [l for l in text.splitlines() if re.search(pats[name], l) and not re.search(NOISE, l)
            and (pats is TIMEOUT or not re.search(TIMEOUT[name], l))]

def tail(l, n=400):
    return l if len(l) <= n else "…" + l[-n:]

for name in clients:
    d = os.path.join(out, name)
    if not os.path.isdir(d):
        continue
    print("-" * 78)
    crc = read(os.path.join(d, "rc")).strip()
    secs = read(os.path.join(d, "seconds")).strip()
    stdout = read(os.path.join(d, "stdout"))
    stderr = read(os.path.join(d, "stderr"))
    print(f"{name}: exit {crc} after {secs}s")
    print(f"  stdout ({len(stdout)} bytes, last 800):")
    for l in stdout[-800:].splitlines():
        print("    | " + l)
    mine = [r for r in ex if (r["path"].split("?")[0].endswith("/messages") if name == "claude"
                              else r["path"].split("?")[0].endswith("/responses"))]
    if name == "claude":
        p = os.path.join(d, "work", "hello.txt")
        exists = os.path.exists(p)
        content = read(p) if exists else None
        results = [r for r in mine if any(
            isinstance(m.get("content"), list) and any(b.get("type") == "tool_result" for b in m["content"])
            for m in (r["body"] or {}).get("messages", []))]
        print(f"  hello.txt exists: {exists}, content: {content!r}")
        print(f"  work dir: {sorted(os.listdir(os.path.join(d, 'work')))}")
        print(f"  /v1/messages requests: {len(mine)}, carrying tool_result: {len(results)}")
        print(f"  tool loop completed (hello.txt written): {'yes' if exists else 'no'}")
    else:
        fco = [r for r in mine if any(isinstance(i, dict) and i.get("type") == "function_call_output"
                                      for i in (r["body"] or {}).get("input", []))]
        n_log = sum(1 for l in req_lines if " /v1/responses " in l and l.startswith("ridge serve: POST"))
        print(f"  /v1/responses requests: proxied {len(mine)}, in ridge log {n_log};"
              f" carrying function_call_output: {len(fco)}")
        for r in fco:
            for i in r["body"]["input"]:
                if i.get("type") == "function_call_output":
                    print(f"    function_call_output ({r['n']}): {str(i.get('output'))[:300]!r}")
        loop = bool(fco) or (not ex and n_log >= 2)
        print(f"  tool loop completed (a command ran, its output went back): {'yes' if loop else 'no'}")
    text = stdout + "\n" + stderr + "\n" + read(os.path.join(d, "debug.log"))
    shown = client_errors(name, text, SHOW)
    if shown:
        print(f"  client error/warning lines ({len(shown)}, first 15; full output in {d}):")
        for l in shown[:15]:
            print("    ~ " + tail(l))
    tmo = client_errors(name, text, TIMEOUT)
    if tmo:
        print(f"  client-side timeouts ({len(tmo)}, first 15):")
        for l in tmo[:15]:
            print("    T " + tail(l))
        warn.append(f"{name}: {len(tmo)} client-side timeout lines, e.g. {tail(tmo[0], 200)}")
    fatal = client_errors(name, text, FATAL)
    if fatal:
        print(f"  client API/stream errors ({len(fatal)}, first 15):")
        for l in fatal[:15]:
            print("    ! " + tail(l))
        bad.append(f"{name}: client reported an API/stream error: {fatal[0][:300]}")
    if crc == "124" or crc == "137":
        warn.append(f"{name}: timed out")
    elif crc not in ("0", ""):
        warn.append(f"{name}: exit {crc}")

print("=" * 78)
for w in warn:
    print("WARNING: " + w)
for b in bad:
    print("PROTOCOL FAILURE: " + b)
print("result: " + ("FAIL (protocol)" if bad else "OK (protocol)"))
sys.exit(1 if bad else 0)
PY
log "summary in $out/summary.txt"
exit "$rc"
