#!/usr/bin/env bash
# Aggregate decode throughput at B concurrent sequences: ridge (through its scheduler) vs
# llama.cpp's llama-batched-bench, alternating in one run on this machine (issue #4's bar).
#
#   scripts/batched-vs-llama-cpp.sh [MODEL] [BATCHES] [ROUNDS]
#   defaults: the SmolLM2 cache file, "16 64", 2 rounds; PROMPT/GEN env (default 128/128).
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${1:-$HOME/.cache/ridge/SmolLM2-135M-Instruct.Q4_1.gguf}
BATCHES=${2:-"16 64"}
ROUNDS=${3:-2}
PROMPT=${PROMPT:-128}
GEN=${GEN:-128}
THREADS=${THREADS:-2}
BIN=$(bash ../shared/peers/llama-cpp.sh | tail -1)
RIDGE=target/release/ridge
[ -x "$RIDGE" ] || cargo build --release -q
echo "date $(date -u +%FT%TZ) cpu $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs) load $(cut -d' ' -f1-3 /proc/loadavg)"
for b in $BATCHES; do
  for r in $(seq "$ROUNDS"); do
    ctx=$(( b * (PROMPT + GEN) + 256 ))
    l=$(LD_LIBRARY_PATH=$BIN "$BIN/llama-batched-bench" -m "$MODEL" -c "$ctx" -b 2048 -ub 512 \
        -npp "$PROMPT" -ntg "$GEN" -npl "$b" -t "$THREADS" 2>/dev/null | awk -F'|' '/^\|[ ]+[0-9]/ {gsub(/ /,"",$9); print $9}')
    g=$("$RIDGE" --threads "$THREADS" bench --model "$MODEL" --prompt "$PROMPT" --gen "$GEN" --batch "$b" \
        --reps 1 --bandwidth-gbs 20 --json | python3 -c 'import json,sys; print(round(json.loads(sys.stdin.readline())["decode_tok_s"],1))')
    echo "B=$b round $r: llama-batched-bench S_TG $l tok/s, ridge decode $g tok/s, ratio $(python3 -c "print(round($g/$l,2))")"
  done
done
