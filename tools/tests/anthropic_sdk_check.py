"""The official `anthropic` SDK, unchanged, against a running `ridge serve` (Messages API).

Usage: python3 tools/tests/anthropic_sdk_check.py BASE_URL MODEL

Checks a plain answer, the exact event sequence of a stream, a stop sequence and a length
stop, count_tokens against the usage of the same prompt, a forced tool call (non-streaming and
streamed as input_json_delta) and the tool_result loop, structured output through
output_config, and Anthropic error objects. Prints a JSON summary; exits non-zero on failure.
"""

import json
import sys

import anthropic

base, model = sys.argv[1], sys.argv[2]
c = anthropic.Anthropic(base_url=base, api_key="unused")
greedy = {"temperature": 0}
summary = {}

# A plain answer.
m = c.messages.create(
    model=model,
    max_tokens=40,
    system="Answer with one number.",
    messages=[{"role": "user", "content": "What is 2 + 2?"}],
    extra_body=greedy,
)
assert m.type == "message" and m.role == "assistant", m
assert m.id.startswith("msg_"), m.id
assert [b.type for b in m.content] == ["text"], m.content
assert "4" in m.content[0].text, m.content
assert m.stop_reason == "end_turn" and m.stop_sequence is None, m
n = c.messages.count_tokens(
    model=model,
    system="Answer with one number.",
    messages=[{"role": "user", "content": "What is 2 + 2?"}],
)
assert m.usage.input_tokens + m.usage.cache_read_input_tokens == n.input_tokens, (m.usage, n)
assert m.usage.output_tokens >= 1
summary["answer"] = m.content[0].text

# A stream: the exact event order, and the text equal to the deltas.
kinds, text = [], ""
with c.messages.stream(
    model=model,
    max_tokens=30,
    messages=[{"role": "user", "content": "Say hello in three words."}],
    extra_body=greedy,
) as s:
    for ev in s:
        kinds.append(ev.type)
        if ev.type == "content_block_delta":
            assert ev.delta.type == "text_delta", ev
            text += ev.delta.text
    final = s.get_final_message()
# The SDK yields Anthropic's events (it drops `ping`) plus its own `text` helper events.
raw = [k for k in kinds if k not in ("text", "ping")]
assert raw[0] == "message_start", raw
assert raw[1] == "content_block_start", raw
assert raw[-3:] == ["content_block_stop", "message_delta", "message_stop"], raw
assert set(raw[2:-3]) == {"content_block_delta"}, raw
assert final.content[0].text == text and text, (final, text)
assert final.stop_reason in ("end_turn", "max_tokens"), final
summary["stream_events"] = len(raw)

# A stop sequence: named in the answer, not part of the text.
m = c.messages.create(
    model=model,
    max_tokens=60,
    messages=[{"role": "user", "content": "Write the digits from 1 to 9 separated by commas, nothing else."}],
    stop_sequences=["5"],
    extra_body=greedy,
)
assert m.stop_reason == "stop_sequence" and m.stop_sequence == "5", m
assert "5" not in m.content[0].text and "4" in m.content[0].text, m.content

# A length stop.
m = c.messages.create(
    model=model,
    max_tokens=3,
    messages=[{"role": "user", "content": "Tell me a long story."}],
    extra_body=greedy,
)
assert m.stop_reason == "max_tokens" and m.usage.output_tokens == 3, m

# Tools: a forced call, its result, the answer.
tools = [
    {
        "name": "get_weather",
        "description": "Current weather for a city",
        "input_schema": {
            "type": "object",
            "properties": {
                "city": {"type": "string"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city", "unit"],
        },
    }
]
question = {"role": "user", "content": "What is the weather in Paris, in celsius?"}
m = c.messages.create(
    model=model, max_tokens=100, tools=tools, tool_choice={"type": "any"},
    messages=[question], extra_body=greedy,
)
calls = [b for b in m.content if b.type == "tool_use"]
assert m.stop_reason == "tool_use" and len(calls) >= 1, m
call = calls[0]
assert call.name == "get_weather" and call.id.startswith("toolu_"), call
assert call.input["unit"] in ("celsius", "fahrenheit") and isinstance(call.input["city"], str), call
assert "paris" in call.input["city"].lower(), call
m2 = c.messages.create(
    model=model, max_tokens=60, tools=tools,
    messages=[
        question,
        {"role": "assistant", "content": m.content},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "18 degrees and sunny"}]},
    ],
    extra_body=greedy,
)
assert m2.stop_reason in ("end_turn", "tool_use", "max_tokens"), m2
assert m2.usage.input_tokens + m2.usage.cache_read_input_tokens > m.usage.input_tokens, (m.usage, m2.usage)
summary["tool_loop"] = m2.stop_reason

# A named tool, streamed: the arguments arrive as input_json_delta, in pieces as they are
# written (not one piece once the call is complete).
partial, starts, pieces = "", [], 0
with c.messages.stream(
    model=model, max_tokens=100, tools=tools,
    tool_choice={"type": "tool", "name": "get_weather"},
    messages=[{"role": "user", "content": "Weather in Rome?"}],
) as s:
    for ev in s:
        if ev.type == "content_block_start":
            starts.append(ev.content_block.type)
        if ev.type == "content_block_delta" and ev.delta.type == "input_json_delta":
            partial += ev.delta.partial_json
            pieces += 1
    final = s.get_final_message()
assert "tool_use" in starts, starts
assert pieces >= 2, (pieces, partial)
use = [b for b in final.content if b.type == "tool_use"][0]
assert json.loads(partial) == use.input and "city" in use.input, (partial, use)
assert final.stop_reason == "tool_use", final

# Structured output through output_config.
schema = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "year": {"type": "integer"}},
    "required": ["name", "year"],
    "additionalProperties": False,
}
m = c.messages.create(
    model=model, max_tokens=60,
    messages=[{"role": "user", "content": "Name a famous scientist and their birth year as JSON."}],
    extra_body={"output_config": {"format": {"type": "json_schema", "schema": schema}}},
)
v = json.loads(m.content[0].text)
assert set(v) == {"name", "year"} and isinstance(v["year"], int), v

# Errors: Anthropic error objects with their statuses.
try:
    c.messages.create(model=model, max_tokens=0, messages=[{"role": "user", "content": "hi"}])
    raise AssertionError("max_tokens 0 accepted")
except anthropic.BadRequestError as e:
    assert e.body["type"] == "error" and e.body["error"]["type"] == "invalid_request_error", e.body
# Any model name (Claude Code asks for claude-…): a one-model server answers with its model and
# says so in its headers.
raw = c.messages.with_raw_response.create(
    model="claude-sonnet-4-5", max_tokens=3, messages=[{"role": "user", "content": "hi"}])
assert raw.headers.get("x-ridge-requested-model") == "claude-sonnet-4-5", dict(raw.headers)
assert raw.parse().model == model, raw.parse().model

print(json.dumps(summary))
