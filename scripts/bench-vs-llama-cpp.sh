#!/usr/bin/env bash
# Side-by-side decode/prefill benchmark: ridge vs llama.cpp on the same model, same machine, same
# run, alternating, medians. Prints one table and a JSON line (for BENCHMARKS.md).
#
#   scripts/bench-vs-llama-cpp.sh [MODEL] [ROUNDS] [THREADS]
#
# MODEL defaults to the cached smollm2-135m; llama.cpp's tools come from
# ../shared/peers/llama-cpp.sh (built once, ~8 minutes).
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${2:-3}
THREADS=${3:-2}
cargo build --release -q -p ridge-cli
RIDGE=target/release/ridge
MODEL=${1:-$($RIDGE pull smollm2-135m)}
BIN=$(bash ../shared/peers/llama-cpp.sh)
export LD_LIBRARY_PATH=$BIN
OUT=$(mktemp -d)
BW=$($RIDGE probe --json --threads "$THREADS" | python3 -c 'import json,sys; print(json.load(sys.stdin)["read_bandwidth_gbs"])')
for r in $(seq "$ROUNDS"); do
  "$BIN/llama-bench" -m "$MODEL" -t "$THREADS" -p 512 -n 128 -r 1 -o json > "$OUT/llama.$r.json" 2>/dev/null
  $RIDGE --threads "$THREADS" bench --model "$MODEL" --prompt 512 --gen 128 --batch 1 --reps 1 \
    --bandwidth-gbs "$BW" --json > "$OUT/ridge.$r.json"
done
python3 - "$OUT" "$ROUNDS" "$BW" "$THREADS" <<'PY'
import json, statistics, sys
out, rounds, bw, threads = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
lp, lt, rp, rt, eff, floor = [], [], [], [], [], []
for r in range(1, rounds + 1):
    for t in json.load(open(f"{out}/llama.{r}.json")):
        (lp if t["n_prompt"] > 0 else lt).append(t["avg_ts"])
    j = json.loads(open(f"{out}/ridge.{r}.json").readline())
    rp.append(j["prefill_tok_s"]); rt.append(j["decode_tok_s"])
    eff.append(j["roofline_efficiency"]); floor.append(j["roofline_tpot_ms"])
m = statistics.median
res = {
    "threads": int(threads), "read_bandwidth_gbs": bw, "rounds": rounds,
    "llama_cpp_pp512_tok_s": m(lp), "ridge_prefill512_tok_s": m(rp), "prefill_ratio": m(rp) / m(lp),
    "llama_cpp_tg128_tok_s": m(lt), "ridge_decode128_tok_s": m(rt), "decode_ratio": m(rt) / m(lt),
    "roofline_tpot_ms": m(floor), "ridge_roofline_efficiency": m(eff),
    "llama_cpp_roofline_efficiency": m(floor) * m(lt) / 1000.0,
}
print(f"{'':24}{'llama.cpp':>12}{'ridge':>12}{'ratio':>8}")
print(f"{'prefill 512 (tok/s)':24}{m(lp):12.1f}{m(rp):12.1f}{m(rp)/m(lp):8.2f}")
print(f"{'decode 128 (tok/s)':24}{m(lt):12.1f}{m(rt):12.1f}{m(rt)/m(lt):8.2f}")
print(f"roofline floor {m(floor):.2f} ms/token at {bw:.1f} GB/s: ridge {100*m(eff):.0f}%, llama.cpp {100*res['llama_cpp_roofline_efficiency']:.0f}%")
print(json.dumps(res))
PY
