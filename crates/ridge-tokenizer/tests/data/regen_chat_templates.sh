#!/usr/bin/env bash
# Regenerates chat_template_renders.json: the published chat templates of Qwen3 (Qwen3-0.6B's,
# shared by the Qwen3 family, with <think> reasoning and tool calls), Qwen3-Coder and gpt-oss
# (the harmony format), rendered by Python's jinja2 set up as Hugging Face transformers'
# apply_chat_template sets it up, over conversations with and without system/developer
# messages, generation prompts, reasoning, tools, tool calls and tool results; plus the
# conversations each template rejects, with jinja2's error. These are the ground truth
# tests/chat_templates.rs compares ridge against; they must never be produced by ridge itself.
# The conversations and the environment are in render_chat_templates.py.
#
# Usage: regen_chat_templates.sh [LLAMA_CPP_DIR]
#   With LLAMA_CPP_DIR (a llama.cpp checkout, e.g. ~/.cache/ridge-peers/llama.cpp-0.3.36), the
#   fixtures in templates/ are first refreshed from its models/templates/.
# Needs python3 with the `jinja2` package (3.1.x).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
if [ $# -ge 1 ]; then
    for t in Qwen-Qwen3-0.6B.jinja Qwen3-Coder.jinja openai-gpt-oss-120b.jinja Qwen3.5-4B.jinja \
        ibm-granite-granite-4.0.jinja LFM2.5-Instruct.jinja NVIDIA-Nemotron-Nano-v2.jinja \
        HuggingFaceTB-SmolLM3-3B.jinja ibm-granite-granite-3.3-2B-Instruct.jinja \
        mistralai-Ministral-3-14B-Reasoning-2512.jinja Mistral-Small-3.2-24B-Instruct-2506.jinja \
        microsoft-Phi-3.5-mini-instruct.jinja GLM-4.6.jinja GLM-4.7-Flash.jinja \
        google-gemma-4-31B-it.jinja google-gemma-4-31B-it-interleaved.jinja \
        deepseek-ai-DeepSeek-V3.1.jinja moonshotai-Kimi-K2.jinja; do
        cp "$1/models/templates/$t" "$here/templates/$t"
    done
fi
python3 "$here/render_chat_templates.py"
