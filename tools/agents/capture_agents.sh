#!/usr/bin/env bash
# Re-capture the agent request fixtures in crates/ridge-server/tests/data/agents/.
#
# Runs the real Claude Code and Codex CLIs against tools/agents/capture_server.py
# (a loopback fake of the Anthropic Messages and OpenAI Responses APIs), then
# copies the captured request bodies and headers into the fixture directory.
#
# Needs the clients installed outside the repo, e.g.
#   mkdir -p /tmp/agents && cd /tmp/agents && npm install @anthropic-ai/claude-code @openai/codex
# Usage: tools/agents/capture_agents.sh [BIN_DIR] [SCRATCH_DIR]
#   BIN_DIR      where `claude` and `codex` live (default /tmp/agents/node_modules/.bin)
#   SCRATCH_DIR  capture/home/work directories (default /tmp/agents/run)
set -euo pipefail

repo=$(cd "$(dirname "$0")/../.." && pwd)
bin=${1:-/tmp/agents/node_modules/.bin}
scratch=${2:-/tmp/agents/run}
server="$repo/tools/agents/capture_server.py"
out="$repo/crates/ridge-server/tests/data/agents"
rm -rf "$scratch"
mkdir -p "$scratch" "$out"

pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT

# start_server NAME PORT FLAGS...: capture into $scratch/cap/NAME
start_server() {
  local name=$1 port=$2; shift 2
  mkdir -p "$scratch/cap/$name"
  python3 "$server" --port "$port" --out "$scratch/cap/$name" "$@" \
    >"$scratch/cap/$name.log" 2>&1 &
  pids+=($!)
  sleep 1
}

# claude_run NAME PORT ENV...: one `claude -p` turn in an empty directory
claude_run() {
  local name=$1 port=$2; shift 2
  mkdir -p "$scratch/home-$name" "$scratch/work-$name"
  (cd "$scratch/work-$name" && env ANTHROPIC_BASE_URL="http://127.0.0.1:$port" \
     ANTHROPIC_API_KEY=dummy HOME="$scratch/home-$name" "$@" \
     timeout 120 "$bin/claude" -p "Create a file hello.txt containing the word hi" \
     --permission-mode acceptEdits </dev/null) || echo "claude $name exited $?"
}

# codex_run NAME PORT ARGS...: one `codex exec` turn in an empty directory
codex_run() {
  local name=$1 port=$2; shift 2
  local home="$scratch/home-$name"
  mkdir -p "$home/home" "$scratch/work-$name"
  cat >"$home/config.toml" <<TOML
model_provider = "ridge"
model = "qwen"

[model_providers.ridge]
name = "ridge"
base_url = "http://127.0.0.1:$port/v1"
wire_api = "responses"
env_key = "RIDGE_API_KEY"
TOML
  (cd "$scratch/work-$name" && env HOME="$home/home" CODEX_HOME="$home" RIDGE_API_KEY=dummy \
     timeout 120 "$bin/codex" exec --skip-git-repo-check "$@" \
     "list the files in this directory" </dev/null) || echo "codex $name exited $?"
}

# Claude Code at its defaults (model claude-opus-4-8): title request, main turn,
# and a second turn after the fake server's thinking + text + Write + Bash answer.
start_server claude 18801 --tool-call --reasoning
claude_run claude 18801
# Claude Code with ANTHROPIC_MODEL=qwen (what a ridge user would set).
start_server claude_qwen 18802 --tool-call --reasoning
claude_run claude_qwen 18802 ANTHROPIC_MODEL=qwen
# Codex with an unknown model name (fallback model metadata).
start_server codex 18803 --tool-call --reasoning
codex_run codex 18803
# Codex with a model from its bundled catalog (freeform apply_patch, text.verbosity).
start_server codex_gpt55 18804 --tool-call --reasoning
codex_run codex_gpt55 18804 -m gpt-5.5
cleanup

python3 - "$scratch/cap" "$out" <<'EOF'
import glob, json, os, sys
cap, out = sys.argv[1], sys.argv[2]

def reqs(name):
    return [json.load(open(f)) for f in sorted(glob.glob(f"{cap}/{name}/*.json"))]

def main_reqs(name, suffix):
    return [r for r in reqs(name) if r["method"] == "POST" and r["path"].split("?")[0].endswith(suffix)]

fixtures, headers = {}, {}

def keep(fname, r):
    fixtures[fname] = r["body"]
    h = {k: ("REDACTED" if k.lower() in ("authorization", "x-api-key") else v)
         for k, v in r["headers"].items()}
    headers[fname.removesuffix(".json")] = {"method": r["method"], "path": r["path"], "headers": h}

for r in reqs("claude"):
    if r["method"] == "HEAD":
        headers["claude_code_preflight"] = {"method": r["method"], "path": r["path"],
                                            "headers": r["headers"]}
msgs = main_reqs("claude", "/messages")
small = [r for r in msgs if not r["body"].get("tools")]
big = [r for r in msgs if r["body"].get("tools")]
if small:
    keep("claude_code_messages_small.json", small[0])
keep("claude_code_messages.json", big[0])
if len(big) > 1:
    keep("claude_code_messages_turn2.json", big[1])
qsmall = [r for r in main_reqs("claude_qwen", "/messages") if not r["body"].get("tools")]
if qsmall:
    keep("claude_code_messages_small_model_qwen.json", qsmall[0])
for name in ("claude", "claude_qwen"):
    ct = main_reqs(name, "/count_tokens")
    if ct:
        keep("claude_code_count_tokens.json" if name == "claude" else
             "claude_code_count_tokens_model_qwen.json", ct[0])
for name, stem in (("codex", "codex_responses"), ("codex_gpt55", "codex_responses_gpt55")):
    rs = main_reqs(name, "/responses")
    keep(f"{stem}.json", rs[0])
    if len(rs) > 1:
        keep(f"{stem}_turn2.json", rs[1])
others = sorted({f"{r['method']} {r['path']}" for n in ("claude", "claude_qwen", "codex", "codex_gpt55")
                 for r in reqs(n)})
print("all requests seen:", *others, sep="\n  ")

for fname, body in fixtures.items():
    with open(os.path.join(out, fname), "w", encoding="utf-8") as f:
        json.dump(body, f, indent=1, ensure_ascii=False)
        f.write("\n")
with open(os.path.join(out, "headers.json"), "w", encoding="utf-8") as f:
    json.dump(headers, f, indent=1, ensure_ascii=False)
    f.write("\n")
for fname in sorted(list(fixtures) + ["headers.json"]):
    print(f"{os.path.getsize(os.path.join(out, fname)):>8}  {fname}")
EOF
