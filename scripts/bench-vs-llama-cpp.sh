#!/usr/bin/env bash
# Side-by-side decode/prefill benchmark: ridge vs llama.cpp on the same model, same machine, same
# run, alternating, medians. Prints one table and a JSON line (for BENCHMARKS.md).
#
#   scripts/bench-vs-llama-cpp.sh [MODEL] [ROUNDS] [THREADS]
#   MODEL=gemma3-270m scripts/bench-vs-llama-cpp.sh   # the model may also come from the environment
#   ACTIVATIONS=int8 scripts/bench-vs-llama-cpp.sh     # ridge's --activations policy (default mixed)
#
# MODEL is a path or a registry name (`ridge pull --list`), default smollm2-135m, pulled into
# the cache if needed; llama.cpp's tools come from
# ../shared/peers/llama-cpp.sh (built once, ~8 minutes).
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${2:-3}
THREADS=${3:-2}
ACTIVATIONS=${ACTIVATIONS:-mixed}
cargo build --release -q -p ridge-cli
RIDGE=target/release/ridge
MODEL=${MODEL:-${1:-smollm2-135m}}
[ -f "$MODEL" ] || MODEL=$($RIDGE pull "$MODEL")
BIN=$(bash ../shared/peers/llama-cpp.sh)
export LD_LIBRARY_PATH=$BIN
OUT=$(mktemp -d)
BW=$($RIDGE probe --json --threads "$THREADS" | python3 -c 'import json,sys; print(json.load(sys.stdin)["read_bandwidth_gbs"])')
for r in $(seq "$ROUNDS"); do
  "$BIN/llama-bench" -m "$MODEL" -t "$THREADS" -p 512 -n 128 -r 1 -o json > "$OUT/llama.$r.json" 2>/dev/null
  # Like llama-bench: pp512 is a 512-token prompt; tg128 is 128 tokens decoded from an
  # (almost) empty context, so the two are measured separately.
  $RIDGE --threads "$THREADS" --activations "$ACTIVATIONS" bench --model "$MODEL" --prompt 512 --gen 2 \
    --batch 1 --reps 1 --bandwidth-gbs "$BW" --json > "$OUT/ridge_pp.$r.json"
  $RIDGE --threads "$THREADS" --activations "$ACTIVATIONS" bench --model "$MODEL" --prompt 1 --gen 129 \
    --batch 1 --reps 1 --bandwidth-gbs "$BW" --json > "$OUT/ridge_tg.$r.json"
done
python3 - "$OUT" "$ROUNDS" "$BW" "$THREADS" "$ACTIVATIONS" <<'PY'
import json, statistics, sys
out, rounds, bw, threads, act = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4], sys.argv[5]
lp, lt, rp, rt, eff, floor, pfloor = [], [], [], [], [], [], []
for r in range(1, rounds + 1):
    for t in json.load(open(f"{out}/llama.{r}.json")):
        (lp if t["n_prompt"] > 0 else lt).append(t["avg_ts"])
    pp = json.loads(open(f"{out}/ridge_pp.{r}.json").readline())
    rp.append(pp["prefill_tok_s"])
    # The prefill's floor (the larger of memory and compute, ridge's probe of this round);
    # absent on the scalar path, which has no compute roof.
    if pp.get("prefill_floor_ms") is not None:
        pfloor.append(pp["prefill_floor_ms"])
    j = json.loads(open(f"{out}/ridge_tg.{r}.json").readline())
    rt.append(j["decode_tok_s"])
    eff.append(j["roofline_efficiency"]); floor.append(j["roofline_tpot_ms"])
m = statistics.median
res = {
    "threads": int(threads), "activations": act, "read_bandwidth_gbs": bw, "rounds": rounds,
    "llama_cpp_pp512_tok_s": m(lp), "ridge_prefill512_tok_s": m(rp), "prefill_ratio": m(rp) / m(lp),
    "llama_cpp_tg128_tok_s": m(lt), "ridge_decode128_tok_s": m(rt), "decode_ratio": m(rt) / m(lt),
    "roofline_tpot_ms": m(floor), "ridge_roofline_efficiency": m(eff),
    "llama_cpp_roofline_efficiency": m(floor) * m(lt) / 1000.0,
}
if pfloor:
    # Both engines against the same floor: 512 tokens in floor ms at their median rates.
    res["prefill_floor_ms"] = m(pfloor)
    res["ridge_prefill_floor_fraction"] = m(pfloor) * m(rp) / 512000.0
    res["llama_cpp_prefill_floor_fraction"] = m(pfloor) * m(lp) / 512000.0
print(f"{'':24}{'llama.cpp':>12}{'ridge':>12}{'ratio':>8}")
print(f"{'prefill 512 (tok/s)':24}{m(lp):12.1f}{m(rp):12.1f}{m(rp)/m(lp):8.2f}")
print(f"{'decode 128 (tok/s)':24}{m(lt):12.1f}{m(rt):12.1f}{m(rt)/m(lt):8.2f}")
print(f"roofline floor {m(floor):.2f} ms/token at {bw:.1f} GB/s: ridge {100*m(eff):.0f}%, llama.cpp {100*res['llama_cpp_roofline_efficiency']:.0f}%")
if pfloor:
    print(f"prefill floor {m(pfloor):.0f} ms for 512 tokens: ridge {100*res['ridge_prefill_floor_fraction']:.0f}%, llama.cpp {100*res['llama_cpp_prefill_floor_fraction']:.0f}%")
print(json.dumps(res))
PY
