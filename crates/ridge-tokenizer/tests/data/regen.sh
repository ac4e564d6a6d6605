#!/usr/bin/env bash
# Regenerates smollm2_llama_cpp_ids.json: the token ids llama.cpp's `llama-tokenize` gives for
# every text in corpus.json, using SmolLM2-135M-Instruct. These ids are the ground truth the
# Rust tests compare against; they must never be produced by ridge itself.
#
# Usage: regen.sh [MODEL.gguf] [LLAMA_CPP_BIN_DIR]
#   MODEL defaults to $RIDGE_TEST_SMOLLM2, BIN to $LLAMA_CPP_BIN or
#   ~/.cache/ridge-peers/llama.cpp-b11434/build/bin. (The ids of the byte-level and
#   SentencePiece vocabularies are the same with llama.cpp 0.3.36, which made them first.)
#
# It also writes vocabs_llama_cpp_ids.json: the same corpus (minus the long case) through the
# vocabulary-only GGUFs llama.cpp ships in its models/ directory (one per pre-tokenizer family:
# gpt-2, llama-bpe, qwen2, falcon, ...; the SentencePiece llama-spm, phi-3, baichuan; and
# gemma-4, tokenizer.ggml.model = "gemma4", which needs a llama.cpp that knows it), found in
# $LLAMA_CPP_MODELS or BIN/../../models.
#
# Each text is written to a file byte for byte and passed with -f (llama-tokenize reads it
# verbatim), with --no-escape so backslashes stay literal. llama-tokenize adds BOS/EOS as the
# model's metadata says and parses special tokens by default, i.e. it corresponds to
# encode(text, add_special = true, parse_special = true).
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
model="${1:-${RIDGE_TEST_SMOLLM2:-}}"
bin="${2:-${LLAMA_CPP_BIN:-$HOME/.cache/ridge-peers/llama.cpp-b11434/build/bin}}"
[ -n "$model" ] && [ -f "$model" ] || { echo "model not found: '$model'" >&2; exit 1; }
[ -x "$bin/llama-tokenize" ] || { echo "llama-tokenize not found in $bin" >&2; exit 1; }

models_dir="${LLAMA_CPP_MODELS:-$bin/../../models}"

MODEL="$model" BIN="$bin" HERE="$here" MODELS_DIR="$models_dir" python3 - <<'PY'
import json, os, subprocess, tempfile

model, bin_dir, here = os.environ["MODEL"], os.environ["BIN"], os.environ["HERE"]
models_dir = os.environ["MODELS_DIR"]
env = dict(os.environ, LD_LIBRARY_PATH=bin_dir + ":" + os.environ.get("LD_LIBRARY_PATH", ""))
corpus = json.load(open(os.path.join(here, "corpus.json"), encoding="utf-8"))

version = subprocess.run([os.path.join(bin_dir, "llama-tokenize"), "--version"], env=env,
                         capture_output=True, text=True)
out = {
    "source": "llama.cpp llama-tokenize -f FILE --ids --no-escape --log-disable",
    "llama_cpp_bin": bin_dir.replace(os.path.expanduser("~"), "~"),
    "llama_cpp_version": (version.stdout + version.stderr).strip().splitlines()[0:2],
    "model": os.path.basename(model),
    "cases": [],
}
def tokenize(model_path, text, tmp):
    path = os.path.join(tmp, "prompt.txt")
    with open(path, "wb") as f:
        f.write(text.encode("utf-8"))
    r = subprocess.run(
        [os.path.join(bin_dir, "llama-tokenize"), "-m", model_path, "-f", path,
         "--ids", "--no-escape", "--log-disable"],
        env=env, capture_output=True, text=True, check=True)
    line = [l for l in r.stdout.splitlines() if l.startswith("[")][-1]
    return json.loads(line)

with tempfile.TemporaryDirectory() as tmp:
    for case in corpus:
        ids = tokenize(model, case["text"], tmp)
        out["cases"].append({"name": case["name"], "text": case["text"], "ids": ids})
        print(f"{case['name']:24} {len(ids):5} tokens")

    # Vocabulary-only GGUFs from llama.cpp's repository: byte-level BPE ones, then the
    # SentencePiece ones (tokenizer.ggml.model = "llama", add_space_prefix left at its default),
    # then Gemma 4's (tokenizer.ggml.model = "gemma4").
    vocabs = ["gpt-2", "llama-bpe", "qwen2", "falcon", "mpt", "starcoder", "refact",
              "command-r", "gpt-neox", "aquila", "llama-spm", "phi-3", "baichuan", "gemma-4"]
    voc = {"source": out["source"], "models_dir": "llama.cpp/models", "vocabs": {}}
    for name in vocabs:
        path = os.path.join(models_dir, f"ggml-vocab-{name}.gguf")
        if not os.path.exists(path):
            print(f"missing {path}, skipped")
            continue
        voc["vocabs"][name] = {
            c["name"]: tokenize(path, c["text"], tmp) for c in corpus if c["name"] != "long_mixed"
        }
        print(f"vocab {name}: {sum(map(len, voc['vocabs'][name].values()))} tokens")
    lines = []
    for name, cases in voc["vocabs"].items():
        body = ",\n".join(f"   {json.dumps(k)}: {json.dumps(v)}" for k, v in cases.items())
        lines.append(f"  {json.dumps(name)}: {{\n{body}\n  }}")
    text = (json.dumps({"source": voc["source"], "models_dir": voc["models_dir"]}, indent=1)[:-2]
            + ',\n "vocabs": {\n' + ",\n".join(lines) + "\n }\n}\n")
    json.loads(text)
    with open(os.path.join(here, "vocabs_llama_cpp_ids.json"), "w", encoding="utf-8") as f:
        f.write(text)

# One case per line: diffs of a regeneration stay readable.
cases = out.pop("cases")
text = json.dumps(out, ensure_ascii=False, indent=1)[:-2] + ',\n "cases": [\n'
text += ",\n".join("  " + json.dumps(c, ensure_ascii=False) for c in cases)
text += "\n ]\n}\n"
json.loads(text)
with open(os.path.join(here, "smollm2_llama_cpp_ids.json"), "w", encoding="utf-8") as f:
    f.write(text)
PY
