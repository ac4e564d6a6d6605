#!/usr/bin/env bash
# Regenerate crates/ridge-engine/tests/data/llama_cpp_rerank.json: llama.cpp's own rerank scores
# (llama-embedding --pooling rank, not normalised) of a few (query, document) pairs on the
# synthetic qwen3 reranker of ridge_model::synthetic::synthetic_reranker (f32 weights,
# Qwen3-Reranker's head layout: cls.output.weight with labels yes/no, a rerank template), with
# llama.cpp's token ids of each formed prompt. No real reranker is on this machine, so llama.cpp
# on the same file is the yardstick; the suite cannot run llama.cpp and compares ridge against
# this file (crates/ridge-engine/tests/rerank.rs). A few seconds.
#
# Usage (repo root): BIN=/path/to/llama.cpp/build/bin bash tools/reference/make_rerank_fixtures.sh
#   (BIN: llama.cpp's build/bin with llama-embedding and llama-tokenize built:
#    cmake --build <llama.cpp>/build --target llama-embedding llama-tokenize)
set -euo pipefail
BIN=${BIN:?set BIN to llama.cpp build/bin}
export LD_LIBRARY_PATH=$BIN${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
OUT=crates/ridge-engine/tests/data/llama_cpp_rerank.json
TMP=$(mktemp -d); trap 'rm -rf "$TMP"' EXIT
M=$TMP/reranker.gguf
cargo run --release -q -p ridge-model --example write_reranker -- "$M" > /dev/null

# One pair a line, query and document split by a tab (llama-embedding's --cls-separator);
# llama-embedding forms each prompt from the file's rerank template, as llama-server does.
printf '%s\t%s\n' \
  "what is a fox?" "The quick brown fox jumps over the lazy dog." \
  "what is a fox?" "Paris is the capital and largest city of France." \
  "what is a fox?" "A fox is a small omnivorous mammal of the dog family, with a pointed snout and a bushy tail." \
  "capital of France" "Paris" \
  "capital of France" "fn main() { println!(\"hello, world\"); }" \
  "history of Rome" "The history of the Roman Empire spans more than a thousand years, from the founding of the city in the eighth century before the common era, through the Republic and the reign of the emperors, to the fall of Constantinople in 1453, and its institutions, laws and languages shaped much of Europe." \
  > "$TMP/pairs.txt"

# The template, as the file holds it: the prompts' token ids, from llama.cpp's tokenizer.
TEMPLATE='<|endoftext|>query: {query} | document: {document}<|endoftext|>'
while IFS=$'\t' read -r q d; do
  p=${TEMPLATE/\{query\}/$q}; p=${p/\{document\}/$d}
  "$BIN/llama-tokenize" -m "$M" -p "$p" --ids --log-disable < /dev/null
done < "$TMP/pairs.txt" > "$TMP/ids.txt"

# One pair per run: each in a batch of its own, within the file's context of 512.
i=0
while IFS= read -r line; do
  printf '%s\n' "$line" > "$TMP/pair.txt"
  "$BIN/llama-embedding" -m "$M" -t 2 -c 512 --pooling rank --embd-normalize -1 \
    --embd-output-format json -f "$TMP/pair.txt" < /dev/null >> "$TMP/rank.json" 2> "$TMP/rank$i.log" \
    || { cat "$TMP/rank$i.log" >&2; exit 1; }
  i=$((i + 1))
done < "$TMP/pairs.txt"

python3 - "$TMP" "$M" "$OUT" <<'PY'
import ast, hashlib, json, re, sys
tmp, model, out = sys.argv[1:]
pairs = [l.split("\t") for l in open(f"{tmp}/pairs.txt").read().splitlines()]
ids = [ast.literal_eval(l) for l in open(f"{tmp}/ids.txt").read().splitlines()]
assert len(ids) == len(pairs)
# llama-embedding prints n_embd values per row but only the first n_cls_out (2) are the
# head's outputs; the rest of the row is not written by it, so only those two are read.
text = open(f"{tmp}/rank.json").read()
rows = re.findall(r'"embedding": \[([-0-9.e]+),([-0-9.e]+),', text)
assert len(rows) == len(pairs), text[:2000]
scores = [[float(a), float(b)] for a, b in rows]
for s in scores:
    assert abs(s[0] + s[1] - 1) < 1e-5, s  # qwen3's softmax over (yes, no)
fixture = {
    "about": "llama.cpp's llama-embedding --pooling rank --embd-normalize -1 (outputs yes, no; "
             "the score is the first); regenerate with tools/reference/make_rerank_fixtures.sh",
    "sha256": hashlib.sha256(open(model, "rb").read()).hexdigest(),
    "pairs": [{"query": q, "document": d} for q, d in pairs],
    "token_ids": ids,
    "outputs": scores,
}
with open(out, "w") as f:
    json.dump(fixture, f, indent=1)
    f.write("\n")
print(f"wrote {out}: {len(pairs)} pairs, scores {[s[0] for s in scores]}")
PY
