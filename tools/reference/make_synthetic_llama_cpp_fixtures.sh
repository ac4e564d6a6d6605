#!/usr/bin/env bash
# Regenerate crates/ridge-model/tests/data/llama_cpp_synthetic.json: llama.cpp's own perplexity
# (llama-perplexity, running value after every chunk) on the tiny synthetic GGUF files of
# crates/ridge-model/tests/common/llama_cpp.rs (qwen3; llama with Llama 3's `rope_freqs.weight`;
# qwen2 as a control), over tests/data/prose.txt. These architectures have no real weights on
# this machine, so llama.cpp on the same files is the yardstick. A few seconds.
#
# Usage (repo root): BIN=/path/to/llama.cpp/build/bin bash tools/reference/make_synthetic_llama_cpp_fixtures.sh
#   (BIN: the folder `bash shared/peers/llama-cpp.sh` prints)
# KEEP=1 keeps the temporary folder (files and llama.cpp logs) and prints its path.
# SET=hybrid: the hybrid models (qwen35, lfm2: llama_cpp::hybrid_specs) into llama_cpp_hybrid.json,
#   against llama.cpp b11434 (the first that reads them).
# SET=families: smollm3, granite, granitemoe, mistral3, phi3 (llama_cpp::family_specs) into
#   llama_cpp_families.json, against llama.cpp b11434.
# SET=gemma4: the Gemma 4 layouts (llama_cpp::gemma4_specs) into llama_cpp_gemma4.json, against
#   llama.cpp b11434.
set -euo pipefail
BIN=${BIN:?set BIN to llama.cpp build/bin}
export LD_LIBRARY_PATH=$BIN${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
SET=${SET:-}
OUT=crates/ridge-model/tests/data/llama_cpp_synthetic.json
[[ $SET == hybrid ]] && OUT=crates/ridge-model/tests/data/llama_cpp_hybrid.json
[[ $SET == families ]] && OUT=crates/ridge-model/tests/data/llama_cpp_families.json
[[ $SET == gemma4 ]] && OUT=crates/ridge-model/tests/data/llama_cpp_gemma4.json
TMP=$(mktemp -d); [[ -n ${KEEP:-} ]] || trap 'rm -rf "$TMP"' EXIT; echo "TMP=$TMP" >&2

cargo run --release -q -p ridge-model --example write_synthetic -- "$TMP" $SET > "$TMP/list.txt"
read -r CTX CHUNKS < "$TMP/list.txt"
tail -n +2 "$TMP/list.txt" | while read -r NAME M; do
  # The synthetic vocabulary is one token per byte: check llama.cpp agrees on this text.
  "$BIN/llama-tokenize" -m "$M" -f tests/data/prose.txt --ids --log-disable > "$TMP/$NAME.ids"
  "$BIN/llama-perplexity" -m "$M" -f tests/data/prose.txt -c "$CTX" --chunks "$CHUNKS" -t 2 \
    > "$TMP/$NAME.log" 2>&1 || { cat "$TMP/$NAME.log" >&2; exit 1; }
done

python3 - "$TMP" "$CTX" "$CHUNKS" "$OUT" <<'PY'
import ast, hashlib, json, re, sys
tmp, ctx, chunks, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
text = open("tests/data/prose.txt", "rb").read()
models = {}
for line in open(f"{tmp}/list.txt").read().splitlines()[1:]:
    name, path = line.split(" ", 1)
    ids = ast.literal_eval(open(f"{tmp}/{name}.ids").read().strip())
    assert ids == list(text), f"{name}: llama.cpp does not tokenize prose.txt to its bytes"
    log = open(f"{tmp}/{name}.log").read()
    running = [float(x) for x in re.findall(r"\[\d+\]([0-9.]+),", log)]
    final = float(re.search(r"Final estimate: PPL = ([0-9.]+)", log).group(1))
    assert len(running) == chunks and running[-1] == final, log[-2000:]
    models[name] = {
        "sha256": hashlib.sha256(open(path, "rb").read()).hexdigest(),
        "perplexity_llama_cpp_running": running,
        "perplexity_llama_cpp": final,
    }
json.dump({"ctx": ctx, "chunks": chunks, "text": "tests/data/prose.txt",
           "tokens_scored": chunks * (ctx - 1 - ctx // 2), "models": models},
          open(out, "w"), indent=1)
open(out, "a").write("\n")
print(json.dumps(models, indent=1))
PY
