#!/usr/bin/env bash
# Regenerate tests/data/qwen2_prose_ids.json and tests/data/qwen2_<SIZE>_reference.json for one
# of the Qwen2.5 Coder models: llama.cpp's token ids, the float64 reference's perplexity
# (llama-perplexity's protocol, ctx 512, CHUNKS chunks, running values), its top logits and
# greedy tokens after a chat prompt, and llama.cpp's own perplexity for comparison.
# About 5 minutes for the 0.5B and 20 for the 1.5B on 2 cores (the reference keeps the
# dequantized weights as float32, ~7 GB for the 1.5B, and computes in float64).
#
# Usage (repo root): BIN=/path/to/llama.cpp/build/bin SIZE=0.5b|1.5b [M=model.gguf] [CHUNKS=4] \
#   bash tools/reference/make_qwen2_fixtures.sh
set -euo pipefail
SIZE=${SIZE:?set SIZE to 0.5b or 1.5b}
case $SIZE in
  0.5b) DEF=$HOME/.cache/ridge/qwen2.5-coder-0.5b-instruct-q5_0.gguf ;;
  1.5b) DEF=$HOME/.cache/ridge/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf ;;
  *) echo "SIZE must be 0.5b or 1.5b" >&2; exit 1 ;;
esac
M=${M:-$DEF}
CHUNKS=${CHUNKS:-4}
GREEDY=${GREEDY:-16}
BIN=${BIN:?set BIN to llama.cpp build/bin}
export LD_LIBRARY_PATH=$BIN${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
REF="python3 tools/reference/qwen2_ref.py --model $M"
# The chat prompt: Qwen's template with its default system prompt (as jinja2 renders it; see
# crates/ridge-tokenizer/tests/data/qwen2_chat_renders.json) around one user message.
QUESTION="Write a Python function fib(n) that returns the n-th Fibonacci number."
PROMPT=$'<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n<|im_start|>user\n'"$QUESTION"$'<|im_end|>\n<|im_start|>assistant\n'
TMP=$(mktemp -d); trap 'rm -rf "$TMP"' EXIT

"$BIN/llama-tokenize" -m "$M" -f tests/data/prose.txt --ids --log-disable > "$TMP/prose.json"
printf '%s' "$PROMPT" > "$TMP/prompt.txt"
"$BIN/llama-tokenize" -m "$M" -f "$TMP/prompt.txt" --ids --no-escape --log-disable > "$TMP/prompt.json"
P=$(python3 -c 'import json,sys; print(",".join(map(str, json.load(open(sys.argv[1])))))' "$TMP/prompt.json")

$REF --ids "$P" --top 10 > "$TMP/top.json"
$REF --ids "$P" --greedy "$GREEDY" --stop 151645,151643 > "$TMP/greedy.json"
$REF --perplexity "$TMP/prose.json" --ctx 512 --chunks "$CHUNKS" > "$TMP/ppl.json"
"$BIN/llama-perplexity" -m "$M" -f tests/data/prose.txt -c 512 --chunks "$CHUNKS" -t 2 > "$TMP/lcpp.log" 2>&1

python3 - "$M" "$TMP" "$QUESTION" "$SIZE" <<'PY'
import hashlib, json, os, re, sys
sys.path.insert(0, "tools/reference")
from qwen2_ref import Qwen2Ref  # noqa: F401  (decode below needs only the vocabulary)
from gguf import GGUFReader
m, tmp, question, size = sys.argv[1:5]
ld = lambda n: json.load(open(os.path.join(tmp, n)))
h = hashlib.sha256()
with open(m, "rb") as f:
    for b in iter(lambda: f.read(1 << 20), b""):
        h.update(b)
prose = ld("prose.json")
old = "tests/data/qwen2_prose_ids.json"
if os.path.exists(old) and json.load(open(old)) != prose:
    sys.exit(f"{m}: prose ids differ from {old}: the two models' vocabularies should be one")
with open(old, "w") as f:
    json.dump(prose, f)
    f.write("\n")
ppl = ld("ppl.json")
log = open(os.path.join(tmp, "lcpp.log")).read()
est = re.findall(r"Final estimate: PPL = ([0-9.]+)", log)
running = [float(x) for x in re.findall(r"\[\d+\]([0-9.]+),", log)]
toks = GGUFReader(m).fields["tokenizer.ggml.tokens"].contents()
bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
cs, n = bs[:], 0
for b in range(256):
    if b not in bs:
        bs.append(b); cs.append(256 + n); n += 1
unmap = {chr(c): b for b, c in zip(bs, cs)}
text = lambda ids: b"".join(bytes(unmap[ch] for ch in toks[i]) if not toks[i].startswith("<|") else b"" for i in ids).decode("utf-8", "replace")
greedy = ld("greedy.json")["greedy"]
out = {
    "model": os.path.basename(m),
    "sha256": h.hexdigest(),
    "ctx": 512,
    "chunks": ppl["chunks"],
    "perplexity_f64": ppl["perplexity"],
    "perplexity_f64_running": ppl["running"],
    "tokens_scored": ppl["tokens_scored"],
    "perplexity_llama_cpp": float(est[-1]) if est else None,
    "perplexity_llama_cpp_running": running,
    "chat_question": question,
    "chat_prompt_ids": ld("prompt.json"),
    "last_logits_top10": ld("top.json")["last_top"],
    "greedy": greedy,
    "greedy_text": text(greedy),
}
with open(f"tests/data/qwen2_{size}_reference.json", "w") as f:
    json.dump(out, f, indent=1)
    f.write("\n")
print(json.dumps(out, indent=1))
PY
