#!/usr/bin/env bash
# Regenerates qwen2_llama_cpp_ids.json: the token ids llama.cpp's `llama-tokenize` gives with
# the Qwen2 vocabulary (byte-level BPE, pre-tokenizer "qwen2", 151 936 tokens, no BOS) of
# Qwen2.5 Coder 0.5B Instruct for every text in corpus.json (the corpus shared with SmolLM2),
# qwen2_extra_corpus.json (Qwen's chat, tool, FIM and repository tokens, CJK, emoji, digit
# runs, whitespace runs, code) and the
# repository's tests/data/prose.txt. These ids are the ground truth the Rust tests compare
# against; they must never be produced by ridge itself.
#
# Usage: regen_qwen2.sh [MODEL.gguf] [LLAMA_CPP_BIN_DIR]
#   MODEL defaults to $RIDGE_TEST_QWEN2, else ~/.cache/ridge/qwen2.5-coder-0.5b-instruct-q5_0.gguf
#   (what `ridge pull qwen2.5-coder-0.5b` writes; the 1.5B has the same vocabulary); BIN to $LLAMA_CPP_BIN or
#   ~/.cache/ridge-peers/llama.cpp-0.3.36/build/bin.
#
# Each text is written to a file byte for byte and passed with -f (llama-tokenize reads it
# verbatim), with --no-escape so backslashes stay literal. By default llama-tokenize adds BOS/EOS
# as the metadata says and parses special tokens: encode(text, add_special = true,
# parse_special = true; Qwen2 adds neither BOS nor EOS). A case with "parse_special": false adds
# --no-parse-special.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
model="${1:-${RIDGE_TEST_QWEN2:-$HOME/.cache/ridge/qwen2.5-coder-0.5b-instruct-q5_0.gguf}}"
bin="${2:-${LLAMA_CPP_BIN:-$HOME/.cache/ridge-peers/llama.cpp-0.3.36/build/bin}}"
[ -f "$model" ] || { echo "model not found: '$model'" >&2; exit 1; }
[ -x "$bin/llama-tokenize" ] || { echo "llama-tokenize not found in $bin" >&2; exit 1; }

MODEL="$model" BIN="$bin" HERE="$here" python3 - <<'PY'
import json, os, subprocess, tempfile

model, bin_dir, here = os.environ["MODEL"], os.environ["BIN"], os.environ["HERE"]
env = dict(os.environ, LD_LIBRARY_PATH=bin_dir + ":" + os.environ.get("LD_LIBRARY_PATH", ""))
load = lambda n: json.load(open(os.path.join(here, n), encoding="utf-8"))
corpus = load("corpus.json") + load("qwen2_extra_corpus.json")
prose_rel = "tests/data/prose.txt"  # relative to the repository root
prose = os.path.join(here, "../../../..", prose_rel)

version = subprocess.run([os.path.join(bin_dir, "llama-tokenize"), "--version"], env=env,
                         capture_output=True, text=True)
out = {
    "source": "llama.cpp llama-tokenize -f FILE --ids --no-escape --log-disable [--no-bos] [--no-parse-special]",
    "llama_cpp_bin": bin_dir.replace(os.path.expanduser("~"), "~"),
    "llama_cpp_version": (version.stdout + version.stderr).strip().splitlines()[0:2],
    "model": os.path.basename(model),
}

def tokenize(path, add_special=True, parse_special=True):
    args = [os.path.join(bin_dir, "llama-tokenize"), "-m", model, "-f", path,
            "--ids", "--no-escape", "--log-disable"]
    if not add_special:
        args.append("--no-bos")
    if not parse_special:
        args.append("--no-parse-special")
    r = subprocess.run(args, env=env, capture_output=True, text=True, check=True)
    line = [l for l in r.stdout.splitlines() if l.startswith("[")][-1]
    return json.loads(line)

cases = []
with tempfile.TemporaryDirectory() as tmp:
    path = os.path.join(tmp, "prompt.txt")
    for case in corpus:
        with open(path, "wb") as f:
            f.write(case["text"].encode("utf-8"))
        flags = {k: case[k] for k in ("add_special", "parse_special") if k in case}
        ids = tokenize(path, **flags)
        cases.append({"name": case["name"], "text": case["text"], **flags, "ids": ids})
        print(f"{case['name']:28} {len(ids):5} tokens")
prose_ids = tokenize(prose)
print(f"{'prose':28} {len(prose_ids):5} tokens")

# One case per line: diffs of a regeneration stay readable.
text = json.dumps(out, ensure_ascii=False, indent=1)[:-2]
text += ',\n "prose": ' + json.dumps({"file": prose_rel, "ids": prose_ids})
text += ',\n "cases": [\n' + ",\n".join("  " + json.dumps(c, ensure_ascii=False) for c in cases)
text += "\n ]\n}\n"
json.loads(text)
with open(os.path.join(here, "qwen2_llama_cpp_ids.json"), "w", encoding="utf-8") as f:
    f.write(text)
PY
