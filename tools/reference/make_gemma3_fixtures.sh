#!/usr/bin/env bash
# Regenerate tests/data/gemma3_prose_ids.json and tests/data/gemma3_reference.json (about 10
# minutes on 2 cores: the float64 reference dequantizes the 262144-row embedding table).
# Usage (repo root): BIN=/path/to/llama.cpp/build/bin [M=model.gguf] bash tools/reference/make_gemma3_fixtures.sh
set -euo pipefail
M=${M:-$HOME/.cache/ridge/gemma-3-270m-q4_k_m.gguf}
BIN=${BIN:?set BIN to llama.cpp build/bin}
export LD_LIBRARY_PATH=$BIN${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
REF="python3 tools/reference/gemma3_ref.py --model $M"
PROMPT=$'Q: What is the capital of France?\nA:'
TMP=$(mktemp -d); trap 'rm -rf "$TMP"' EXIT

"$BIN/llama-tokenize" -m "$M" -f tests/data/prose.txt --ids --log-disable > tests/data/gemma3_prose_ids.json
"$BIN/llama-tokenize" -m "$M" -p "$PROMPT" --ids --log-disable > "$TMP/prompt.json"
P=$(python3 -c 'import json,sys; print(",".join(map(str, json.load(open(sys.argv[1])))))' "$TMP/prompt.json")

$REF --ids "$P" --top 10 > "$TMP/top.json"
$REF --ids "$P" --greedy 8 > "$TMP/greedy.json"
$REF --perplexity tests/data/gemma3_prose_ids.json --ctx 512 --chunks 4 > "$TMP/ppl.json"
"$BIN/llama-perplexity" -m "$M" -f tests/data/prose.txt -c 512 --chunks 4 -t 2 > "$TMP/lcpp.log" 2>&1

python3 - "$M" "$TMP" "$PROMPT" <<'PY'
import hashlib, json, os, re, sys
from gguf import GGUFReader
m, tmp, prompt = sys.argv[1], sys.argv[2], sys.argv[3]
ld = lambda n: json.load(open(os.path.join(tmp, n)))
h = hashlib.sha256()
with open(m, "rb") as f:
    for b in iter(lambda: f.read(1 << 20), b""):
        h.update(b)
ppl = ld("ppl.json")
log = open(os.path.join(tmp, "lcpp.log")).read()
est = re.findall(r"Final estimate: PPL = ([0-9.]+)", log)
running = [float(x) for x in re.findall(r"\[\d+\]([0-9.]+),", log)]
toks = GGUFReader(m).fields["tokenizer.ggml.tokens"]
piece = lambda i: bytes(toks.parts[toks.data[i]]).decode().replace("\u2581", " ")
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
    "prompt": prompt,
    "prompt_ids": ld("prompt.json"),
    "last_logits_top10": ld("top.json")["last_top"],
    "greedy_8": greedy,
    "greedy_8_text": "".join(piece(i) for i in greedy),
}
with open("tests/data/gemma3_reference.json", "w") as f:
    json.dump(out, f, indent=1)
    f.write("\n")
print(json.dumps(out, indent=1))
PY
