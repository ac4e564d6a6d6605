#!/usr/bin/env bash
# Serving throughput at C concurrent clients: `ridge serve` vs llama.cpp's llama-server with the
# same model, threads and request mix, both driven by `ridge bench serve`, alternating (issue #5's
# bar). Prints one line per server and round with output tok/s, median TTFT and TPOT.
#
#   scripts/serve-vs-llama-cpp.sh [MODEL] [ROUNDS]
#   env: THREADS (2), CONCURRENCY (16), NUM_PROMPTS (32), INPUT_LEN (128), OUTPUT_LEN (64),
#        DATASET (random; `file:PATH` for one prompt per line, e.g. for a synthetic model's byte
#        vocabulary, where a line of N ASCII characters is N tokens)
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${1:-$HOME/.cache/ridge/SmolLM2-135M-Instruct.Q4_1.gguf}
ROUNDS=${2:-2}
THREADS=${THREADS:-2}; C=${CONCURRENCY:-16}; N=${NUM_PROMPTS:-32}
IN=${INPUT_LEN:-128}; OUT=${OUTPUT_LEN:-64}; DATASET=${DATASET:-random}
BIN=$(bash ../shared/peers/llama-cpp.sh | tail -1)
RIDGE=target/release/ridge
[ -x "$RIDGE" ] || cargo build --release -q
wait_up() { for _ in $(seq 120); do curl -sf "$1/health" >/dev/null && return 0; sleep 0.5; done; return 1; }
drive() {
  "$RIDGE" bench serve --url "$1" --num-prompts "$N" --input-len "$IN" --output-len "$OUT" \
    --max-concurrency "$C" --seed 7 --dataset "$DATASET" --json \
  | python3 -c 'import json,sys; v=json.load(sys.stdin); print("%s round %s: %.1f tok/s, TTFT median %.0f ms, TPOT median %.1f ms, %d/%d tokens" % (sys.argv[1], sys.argv[2], v["output_throughput"], v["ttft_ms"]["median"], v["tpot_ms"]["median"], v["total_output_tokens"], v["total_requested_output_tokens"]))' "$2" "$3"
}
echo "date $(date -u +%FT%TZ) cpu $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs) load $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq "$ROUNDS"); do
  "$RIDGE" --threads "$THREADS" serve --model "$MODEL" --port 8301 --max-seqs "$C" >/dev/null 2>&1 &
  rp=$!
  wait_up http://127.0.0.1:8301 && drive http://127.0.0.1:8301 "ridge serve " "$r"
  kill -INT "$rp"; wait "$rp" || true
  LD_LIBRARY_PATH=$BIN "$BIN/llama-server" -m "$MODEL" -t "$THREADS" --port 8302 -np "$C" \
    -c $(( C * 512 )) >/dev/null 2>&1 &
  lp=$!
  wait_up http://127.0.0.1:8302 && drive http://127.0.0.1:8302 "llama-server" "$r"
  kill "$lp"; wait "$lp" || true
done
