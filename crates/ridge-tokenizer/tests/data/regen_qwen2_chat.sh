#!/usr/bin/env bash
# Regenerates qwen2_chat_renders.json: Qwen2.5 Coder's chat templates (the 0.5B's and the 1.5B's
# differ by one literal in the tools branch) rendered by Python's jinja2 the way the model's
# authors' tooling renders them (a sandboxed environment with trim_blocks and lstrip_blocks, and
# `tojson` as json.dumps(ensure_ascii=False)), for conversations with and without a system
# message, with tools, and over several turns; plus llama.cpp's `llama-tokenize` ids of each
# render (special tokens parsed, no BOS). These are the ground truth the Rust tests compare
# against; they must never be produced by ridge itself.
#
# Usage: regen_qwen2_chat.sh [MODEL_0.5B.gguf] [MODEL_1.5B.gguf] [LLAMA_CPP_BIN_DIR]
#   defaults: ~/.cache/ridge/qwen2.5-coder-{0.5b-instruct-q5_0,1.5b-instruct-q4_k_m}.gguf (what
#   `ridge pull` writes), $LLAMA_CPP_BIN or ~/.cache/ridge-peers/llama.cpp-0.3.36/build/bin.
# Needs the `gguf` and `jinja2` Python packages.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
m05="${1:-$HOME/.cache/ridge/qwen2.5-coder-0.5b-instruct-q5_0.gguf}"
m15="${2:-$HOME/.cache/ridge/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf}"
bin="${3:-${LLAMA_CPP_BIN:-$HOME/.cache/ridge-peers/llama.cpp-0.3.36/build/bin}}"
M05="$m05" M15="$m15" BIN="$bin" HERE="$here" python3 - <<'PY'
import json, os, subprocess, tempfile
import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment
from gguf import GGUFReader

bin_dir, here = os.environ["BIN"], os.environ["HERE"]
env_vars = dict(os.environ, LD_LIBRARY_PATH=bin_dir + ":" + os.environ.get("LD_LIBRARY_PATH", ""))

def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

def compile(src):
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    return env.from_string(src)

def tokenize(model, text):
    with tempfile.NamedTemporaryFile("wb", suffix=".txt") as f:
        f.write(text.encode("utf-8")); f.flush()
        r = subprocess.run([os.path.join(bin_dir, "llama-tokenize"), "-m", model, "-f", f.name,
                            "--ids", "--no-escape", "--log-disable"],
                           env=env_vars, capture_output=True, text=True, check=True)
    return json.loads([l for l in r.stdout.splitlines() if l.startswith("[")][-1])

weather = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city, in °C.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "City name, e.g. Zürich"}},
                   "required": ["city"]}}}
clock = {"type": "function", "function": {"name": "now", "description": "The time.",
                                          "parameters": {"type": "object", "properties": {}}}}
conversations = [
    ("user_only", [{"role": "user", "content": "Write a Python function fib(n) that returns the n-th Fibonacci number."}], None, True),
    ("user_only_no_generation_prompt", [{"role": "user", "content": "What is 2+2?"}], None, False),
    ("system_and_user", [{"role": "system", "content": "You are a terse senior engineer."},
                         {"role": "user", "content": "Explain RoPE in one line."}], None, True),
    ("multi_turn", [{"role": "system", "content": "Answer in French."},
                    {"role": "user", "content": "Hello!"},
                    {"role": "assistant", "content": "Bonjour !"},
                    {"role": "user", "content": "Quel temps fait-il ?\n(短く)"}], None, True),
    ("tools_default_system", [{"role": "user", "content": "Weather in Paris?"}], [weather, clock], True),
    ("tools_with_system", [{"role": "system", "content": "Use tools when they help."},
                           {"role": "user", "content": "What time is it?"}], [clock], True),
    ("tool_response_turns", [{"role": "user", "content": "Weather in Paris?"},
                             {"role": "assistant", "content": "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>"},
                             {"role": "tool", "content": "{\"temp\": 21}"},
                             {"role": "tool", "content": "{\"wind\": 3}"}], [weather], True),
]
out = {"source": "jinja2 " + jinja2.__version__ + " (trim_blocks, lstrip_blocks, tojson = json.dumps(ensure_ascii=False)); ids from llama-tokenize -f FILE --ids --no-escape",
       "models": []}
for path in [os.environ["M05"], os.environ["M15"]]:
    src = GGUFReader(path).fields["tokenizer.chat_template"].contents()
    t = compile(src)
    cases = []
    for name, msgs, tools, gen in conversations:
        ctx = {"messages": msgs, "add_generation_prompt": gen, "bos_token": "<|endoftext|>", "eos_token": "<|im_end|>"}
        if tools is not None:
            ctx["tools"] = tools
        text = t.render(**ctx)
        cases.append({"name": name, "messages": msgs, "tools": tools, "add_generation_prompt": gen,
                      "rendered": text, "ids": tokenize(path, text)})
        print(f"{os.path.basename(path)} {name:32} {len(text):5} chars")
    out["models"].append({"model": os.path.basename(path), "cases": cases})
with open(os.path.join(here, "qwen2_chat_renders.json"), "w", encoding="utf-8") as f:
    json.dump(out, f, ensure_ascii=False, indent=1)
    f.write("\n")
PY
