#!/usr/bin/env bash
# Regenerate crates/ridge-engine/tests/data/llama_embedding_{smollm2,gemma3}.json: llama.cpp's
# own embeddings (llama-embedding, L2-normalised) of a few texts on SmolLM2-135M and Gemma 3
# 270M, with mean and with last pooling, plus llama.cpp's token ids of each text, and the same
# poolings of the float64 reference forward passes (embedding_ref.py over llama_ref.py /
# gemma3_ref.py). The suite cannot run llama.cpp; the engine's test
# (crates/ridge-engine/tests/embeddings.rs) compares ridge against these files. About a minute.
#
# Usage (repo root): BIN=/path/to/llama.cpp/build/bin PY=/path/to/python-with-numpy-and-gguf \
#   bash tools/reference/make_embedding_fixtures.sh
#   (BIN: llama.cpp's build/bin with llama-embedding built:
#    cmake --build <llama.cpp>/build --target llama-embedding llama-tokenize;
#    the models: the files `ridge pull smollm2-135m` / `ridge pull gemma3-270m` cache, in
#    RIDGE_HOME, by default ~/.cache/ridge/)
set -euo pipefail
BIN=${BIN:?set BIN to llama.cpp build/bin}
PY=${PY:-python3}
HOME_DIR=${RIDGE_HOME:-$HOME/.cache/ridge}
export LD_LIBRARY_PATH=$BIN${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
TMP=$(mktemp -d); trap 'rm -rf "$TMP"' EXIT

# One text per line (llama-embedding splits its prompt on newlines).
cat > "$TMP/texts.txt" <<'TXT'
The quick brown fox jumps over the lazy dog.
Hello
What is the capital of France? Paris is the capital and largest city of France.
Embeddings map text to vectors so that similar meanings lie close together.
fn main() { println!("hello, world"); }
The history of the Roman Empire spans more than a thousand years, from the founding of the city in the eighth century before the common era, through the Republic and the reign of the emperors, to the fall of Constantinople in 1453, and its institutions, laws and languages shaped much of Europe, the Mediterranean and the Near East for centuries after its end.
TXT

one() {
NAME=$1 M=$2
OUT=crates/ridge-engine/tests/data/llama_embedding_$NAME.json
while IFS= read -r line; do
  "$BIN/llama-tokenize" -m "$M" -p "$line" --ids --log-disable
done < "$TMP/texts.txt" > "$TMP/ids.txt"
for P in mean last; do
  "$BIN/llama-embedding" -m "$M" -t 2 -c 512 --pooling "$P" --embd-normalize 2 \
    --embd-output-format json -f "$TMP/texts.txt" > "$TMP/$P.json" 2> "$TMP/$P.log" \
    || { cat "$TMP/$P.log" >&2; exit 1; }
done

python3 - "$TMP" "$M" "$OUT" <<'PY'
import ast, hashlib, json, os, sys
tmp, model, out = sys.argv[1:]
texts = open(f"{tmp}/texts.txt").read().splitlines()
ids = [ast.literal_eval(l) for l in open(f"{tmp}/ids.txt").read().splitlines()]
assert len(ids) == len(texts)
fixture = {
    "about": "llama.cpp's llama-embedding (--embd-normalize 2); "
             "regenerate with tools/reference/make_embedding_fixtures.sh",
    "model": os.path.basename(model),
    "sha256": hashlib.sha256(open(model, "rb").read()).hexdigest(),
    "texts": texts,
    "token_ids": ids,
}
for p in ("mean", "last"):
    data = json.load(open(f"{tmp}/{p}.json"))["data"]
    assert [d["index"] for d in data] == list(range(len(texts)))
    fixture[p] = [d["embedding"] for d in data]
with open(out, "w") as f:
    json.dump(fixture, f, separators=(",", ":"))
    f.write("\n")
print(f"wrote {out}: {len(texts)} texts, width {len(fixture['mean'][0])}")
PY
}

one smollm2 "$HOME_DIR/SmolLM2-135M-Instruct.Q4_1.gguf"
one gemma3 "$HOME_DIR/gemma-3-270m-q4_k_m.gguf"
"$PY" tools/reference/embedding_ref.py llama "$HOME_DIR/SmolLM2-135M-Instruct.Q4_1.gguf" \
  crates/ridge-engine/tests/data/llama_embedding_smollm2.json
"$PY" tools/reference/embedding_ref.py gemma3 "$HOME_DIR/gemma-3-270m-q4_k_m.gguf" \
  crates/ridge-engine/tests/data/llama_embedding_gemma3.json
