#!/usr/bin/env bash
# Regenerate crates/ridge-model/tests/data/moe_float64.json: the float64 reference's running
# perplexity (tools/reference/moe_ref.py, after every chunk, llama-perplexity's protocol) on the
# quantized synthetic files of crates/ridge-model/tests/common/llama_cpp.rs (and three f32 files,
# where llama.cpp must agree with it: the reference's own check), over
# tests/data/prose.txt. On quantized files llama.cpp rounds its activations to 8-bit blocks, so
# it is no yardstick for ridge's exact (f32) activations there; this is. About a minute.
#
# Usage (repo root): PYTHON=/path/to/python-with-gguf-and-numpy bash tools/reference/make_moe_float64_fixtures.sh
set -euo pipefail
PYTHON=${PYTHON:-python3}
OUT=crates/ridge-model/tests/data/moe_float64.json
NAMES="qwen3moe_e8_k2 qwen2moe_e16_k4_shared gpt_oss_e8_k2 qwen3_q4_0_dense qwen3moe_q4_0_e32_k4 qwen2moe_q8_0_e16_k2_shared gpt_oss_mxfp4_e32_k4 gpt_oss_mxfp4_e128_k8"
TMP=$(mktemp -d); trap 'rm -rf "$TMP"' EXIT

cargo run --release -q -p ridge-model --example write_synthetic -- "$TMP" > "$TMP/list.txt"
read -r CTX CHUNKS < "$TMP/list.txt"
"$PYTHON" -c 'import json,sys; print(json.dumps(list(open("tests/data/prose.txt","rb").read())))' > "$TMP/ids.json"
for NAME in $NAMES; do
  "$PYTHON" tools/reference/moe_ref.py --model "$TMP/$NAME.gguf" --perplexity "$TMP/ids.json" \
    --ctx "$CTX" --chunks "$CHUNKS" 2>/dev/null > "$TMP/$NAME.json"
done
"$PYTHON" - "$TMP" "$CTX" "$CHUNKS" "$OUT" $NAMES <<'PY'
import hashlib, json, sys
tmp, ctx, chunks, out, names = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5:]
models = {}
for name in names:
    r = json.load(open(f"{tmp}/{name}.json"))
    assert len(r["perplexity_running"]) == chunks
    models[name] = {
        "sha256": hashlib.sha256(open(f"{tmp}/{name}.gguf", "rb").read()).hexdigest(),
        "perplexity_float64_running": r["perplexity_running"],
    }
json.dump({"ctx": ctx, "chunks": chunks, "text": "tests/data/prose.txt", "models": models},
          open(out, "w"), indent=1)
open(out, "a").write("\n")
PY
echo "wrote $OUT"
