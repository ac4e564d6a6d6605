#!/usr/bin/env bash
# Regenerates gemma4_llama_cpp_ids.json: what llama.cpp's `llama-tokenize` gives for every text
# of gemma4_corpus.json (with its add_special / parse_special flags) on
#   * the synthetic Gemma 4 vocabulary of tests/synthetic_gemma4.rs (ids, and each token's
#     piece as hex bytes), written by that test file's ignored `write_vocab_for_regen`;
#   * llama.cpp's vocabulary-only models/ggml-vocab-gemma-4.gguf (ids), when present.
# These are the ground truth the Rust tests compare against; they must never be produced by
# ridge itself. The file's size and FNV-1a hash are recorded, so that a change to the synthetic
# vocabulary without a regeneration fails the test.
#
# Usage: regen_gemma4.sh [LLAMA_CPP_BIN_DIR]
#   BIN defaults to $LLAMA_CPP_BIN or ~/.cache/ridge-peers/llama.cpp-b11434/build/bin (a
#   llama.cpp that knows tokenizer.ggml.model = "gemma4"); the models directory to
#   $LLAMA_CPP_MODELS or BIN/../../models.
#
# Each text is written to a file byte for byte and passed with -f and --no-escape;
# add_special = false is --no-bos (no BOS, no EOS), parse_special = false --no-parse-special.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../../../.." && pwd)"
bin="${1:-${LLAMA_CPP_BIN:-$HOME/.cache/ridge-peers/llama.cpp-b11434/build/bin}}"
[ -x "$bin/llama-tokenize" ] || { echo "llama-tokenize not found in $bin" >&2; exit 1; }
models_dir="${LLAMA_CPP_MODELS:-$bin/../../models}"

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
synthetic="$tmp/synthetic-gemma4.gguf"
(cd "$root" && RIDGE_GEMMA4_SYNTHETIC_OUT="$synthetic" cargo test --release -q \
    -p ridge-tokenizer --test synthetic_gemma4 -- --ignored --exact write_vocab_for_regen)
[ -f "$synthetic" ] || { echo "the synthetic vocabulary was not written" >&2; exit 1; }

SYNTHETIC="$synthetic" BIN="$bin" HERE="$here" MODELS_DIR="$models_dir" TMP="$tmp" python3 - <<'PY'
import json, os, subprocess

bin_dir, here, tmp = os.environ["BIN"], os.environ["HERE"], os.environ["TMP"]
synthetic = os.environ["SYNTHETIC"]
real = os.path.join(os.environ["MODELS_DIR"], "ggml-vocab-gemma-4.gguf")
env = dict(os.environ, LD_LIBRARY_PATH=bin_dir + ":" + os.environ.get("LD_LIBRARY_PATH", ""))
tokenize_bin = os.path.join(bin_dir, "llama-tokenize")
corpus = json.load(open(os.path.join(here, "gemma4_corpus.json"), encoding="utf-8"))

def run(model, case, ids):
    path = os.path.join(tmp, "prompt.txt")
    with open(path, "wb") as f:
        f.write(case["text"].encode("utf-8"))
    args = [tokenize_bin, "-m", model, "-f", path, "--no-escape", "--log-disable"]
    if ids:
        args.append("--ids")
    if not case["add_special"]:
        args.append("--no-bos")
    if not case["parse_special"]:
        args.append("--no-parse-special")
    return subprocess.run(args, env=env, capture_output=True, check=True).stdout

def token_ids(model, case):
    line = [l for l in run(model, case, True).decode().splitlines() if l.startswith("[")][-1]
    return json.loads(line)

def pieces(model, case, ids):
    # Without --ids, llama-tokenize prints "%6d -> '<piece>'\n" per token, the piece raw (it
    # may hold newlines or part of a UTF-8 character). The ids are known, so cut the output
    # at each expected header.
    out = run(model, case, False)
    heads = [f"{i:6d} -> '".encode() for i in ids]
    result, pos = [], 0
    for k, head in enumerate(heads):
        assert out.startswith(head, pos), (case["name"], k, out[pos:pos + 40])
        start = pos + len(head)
        tail = b"'\n" + heads[k + 1] if k + 1 < len(heads) else b"'\n"
        end = out.index(tail, start) if k + 1 < len(heads) else len(out) - 2
        assert out[end:end + 2] == b"'\n", (case["name"], k)
        result.append(out[start:end].hex())
        pos = end + 2
    assert pos == len(out), (case["name"], out[pos:])
    return result

data = open(synthetic, "rb").read()
h = 0xcbf29ce484222325
for b in data:
    h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
version = subprocess.run([tokenize_bin, "--version"], env=env, capture_output=True, text=True)
out = {
    "source": "llama.cpp llama-tokenize -f FILE --no-escape --log-disable [--ids] "
              "[--no-bos] [--no-parse-special]",
    "llama_cpp_version": (version.stdout + version.stderr).strip().splitlines()[0:2],
    "synthetic": {"bytes": len(data), "fnv1a64": f"{h:016x}"},
    "real_vocab": "llama.cpp/models/ggml-vocab-gemma-4.gguf" if os.path.exists(real) else None,
}
cases = []
for case in corpus:
    ids = token_ids(synthetic, case)
    c = dict(case, synthetic_ids=ids, synthetic_pieces=pieces(synthetic, case, ids))
    if os.path.exists(real):
        c["real_ids"] = token_ids(real, case)
    cases.append(c)
    print(f"{case['name']:28} {len(ids):4} tokens")

# One case per line: diffs of a regeneration stay readable.
text = json.dumps(out, ensure_ascii=False, indent=1)[:-2] + ',\n "cases": [\n'
text += ",\n".join("  " + json.dumps(c, ensure_ascii=False) for c in cases)
text += "\n ]\n}\n"
json.loads(text)
with open(os.path.join(here, "gemma4_llama_cpp_ids.json"), "w", encoding="utf-8") as f:
    f.write(text)
PY
