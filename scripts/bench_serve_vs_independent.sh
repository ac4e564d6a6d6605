#!/usr/bin/env bash
# Runs `ridge bench serve` and the independent Python client (tools/bench/independent_client.py)
# against the same OpenAI-compatible server, alternately, with the same load, and prints each
# run's median TPOT / TTFT and output token counts — the check behind BENCHMARKS-history.md's
# "bench serve vs an independent client" section.
#
# usage: scripts/bench_serve_vs_independent.sh URL [ROUNDS]
#   env: NUM_PROMPTS (16), INPUT_LEN (128), OUTPUT_LEN (64), CONCURRENCY (4), RIDGE (ridge binary)
set -euo pipefail
URL=${1:?usage: $0 URL [ROUNDS]}
ROUNDS=${2:-2}
N=${NUM_PROMPTS:-16}; IN=${INPUT_LEN:-128}; OUT=${OUTPUT_LEN:-64}; C=${CONCURRENCY:-4}
RIDGE=${RIDGE:-target/release/ridge}
here=$(cd "$(dirname "$0")/.." && pwd)
for r in $(seq 1 "$ROUNDS"); do
  "$RIDGE" bench serve --url "$URL" --num-prompts "$N" --input-len "$IN" --output-len "$OUT" \
    --max-concurrency "$C" --seed "$r" --json \
  | python3 -c 'import json,sys; v=json.load(sys.stdin); print("ridge bench serve  round %s: TPOT median %.2f ms, TTFT median %.1f ms, output tokens %d/%d, %.2f tok/s" % (sys.argv[1], v["tpot_ms"]["median"], v["ttft_ms"]["median"], v["total_output_tokens"], v["total_requested_output_tokens"], v["output_throughput"]))' "$r"
  python3 "$here/tools/bench/independent_client.py" --url "$URL" --num-prompts "$N" \
    --input-len "$IN" --output-len "$OUT" --concurrency "$C" --seed "$r" \
  | python3 -c 'import json,sys; v=json.load(sys.stdin); print("independent client round %s: TPOT median %.2f ms, TTFT median %.1f ms, output tokens %d, %.2f tok/s" % (sys.argv[1], v["tpot_ms"]["median"], v["ttft_ms"]["median"], v["total_output_tokens"], v["output_throughput"]))' "$r"
done
