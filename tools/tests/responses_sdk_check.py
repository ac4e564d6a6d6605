"""The official `openai` SDK's Responses API, unchanged, against a running `ridge serve`.

Usage: python3 tools/tests/responses_sdk_check.py BASE_URL MODEL

Checks `responses.create` (with `instructions`, `previous_response_id`, `store`),
`retrieve` and `delete`, `responses.stream` (typed events, increasing sequence numbers, text
equal to the deltas), `responses.parse` with a Pydantic model, a function-call loop through
`function_call_output`, and the 4xx error objects (an unknown previous response is a 404).
Prints a JSON summary; exits non-zero on failure.
"""

import json
import sys

import openai
from pydantic import BaseModel

base, model = sys.argv[1], sys.argv[2]
c = openai.OpenAI(base_url=base + "/v1", api_key="unused")
summary = {}

r = c.responses.create(
    model=model, instructions="Answer with one number.", input="What is 2 + 2?",
    max_output_tokens=20, temperature=0,
)
assert r.object == "response" and r.status == "completed" and r.id.startswith("resp_"), r
assert "4" in r.output_text, r.output_text
assert [o.type for o in r.output] == ["message"], r.output
assert r.usage.total_tokens == r.usage.input_tokens + r.usage.output_tokens, r.usage
assert r.instructions == "Answer with one number." and r.max_output_tokens == 20, r
summary["answer"] = r.output_text

# The stored conversation continues: the follow-up's prompt holds the first turn.
r2 = c.responses.create(model=model, input="Now add 1 to that.", previous_response_id=r.id,
                        max_output_tokens=20, temperature=0)
assert r2.previous_response_id == r.id, r2
assert r2.usage.input_tokens > r.usage.input_tokens + r.usage.output_tokens - 10, (r.usage, r2.usage)
assert c.responses.retrieve(r.id).output_text == r.output_text

# A response not stored cannot be continued.
r3 = c.responses.create(model=model, input="Hi", store=False, max_output_tokens=5)
try:
    c.responses.retrieve(r3.id)
    raise AssertionError("store=false response was stored")
except openai.NotFoundError:
    pass

# A length stop is an incomplete response.
r4 = c.responses.create(model=model, input="Tell me a long story.", max_output_tokens=3)
assert r4.status == "incomplete" and r4.incomplete_details.reason == "max_output_tokens", r4
assert r4.usage.output_tokens == 3, r4.usage

# A stream: typed events in order, sequence numbers 0, 1, 2, …
kinds, seqs, text = [], [], ""
with c.responses.stream(model=model, input="Say hello in three words.", max_output_tokens=20,
                        temperature=0) as s:
    for ev in s:
        kinds.append(ev.type)
        seqs.append(ev.sequence_number)
        if ev.type == "response.output_text.delta":
            text += ev.delta
    final = s.get_final_response()
assert seqs == list(range(len(seqs))), seqs
assert kinds[:4] == ["response.created", "response.in_progress", "response.output_item.added",
                     "response.content_part.added"], kinds
assert kinds[-4:] == ["response.output_text.done", "response.content_part.done",
                      "response.output_item.done", "response.completed"], kinds
assert final.output_text == text and text, (final.output_text, text)
summary["stream_events"] = len(kinds)

# responses.parse with a Pydantic model: the answer matches its schema.
class City(BaseModel):
    name: str
    population: int


p = c.responses.parse(model=model, input="Give Paris as JSON with its name and population.",
                      text_format=City, max_output_tokens=100, temperature=0)
assert isinstance(p.output_parsed, City) and p.output_parsed.population > 0, p.output_parsed
summary["parsed"] = p.output_parsed.model_dump()

# A function-call loop.
tools = [{
    "type": "function", "name": "get_weather", "description": "Current weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"], "additionalProperties": False},
}]
r = c.responses.create(model=model, input="What is the weather in Paris?", tools=tools,
                       tool_choice="required", temperature=0)
calls = [o for o in r.output if o.type == "function_call"]
assert calls and calls[0].name == "get_weather", r.output
args = json.loads(calls[0].arguments)
assert "paris" in args["city"].lower(), args
r5 = c.responses.create(
    model=model, previous_response_id=r.id, tools=tools, temperature=0, max_output_tokens=40,
    input=[{"type": "function_call_output", "call_id": calls[0].call_id, "output": "18C and sunny"}],
)
assert r5.status in ("completed", "incomplete"), r5
summary["tool_loop"] = r5.status

# Streamed function call: its arguments arrive as deltas, in pieces as they are written, that
# spell the final arguments exactly.
arg_text, pieces = "", 0
with c.responses.stream(model=model, input="Weather in Rome?", tools=tools,
                        tool_choice={"type": "function", "name": "get_weather"}) as s:
    for ev in s:
        if ev.type == "response.function_call_arguments.delta":
            arg_text += ev.delta
            pieces += 1
    final = s.get_final_response()
fc = [o for o in final.output if o.type == "function_call"][0]
assert arg_text == fc.arguments and pieces >= 2, (arg_text, pieces, fc)
assert "rome" in json.loads(arg_text)["city"].lower(), arg_text

# Delete, then the id is gone everywhere.
c.responses.delete(r.id)
for call in (lambda: c.responses.retrieve(r.id),
             lambda: c.responses.create(model=model, input="x", previous_response_id=r.id)):
    try:
        call()
        raise AssertionError("deleted response still found")
    except openai.NotFoundError as e:
        assert e.body["type"] == "not_found_error", e.body

try:
    c.responses.create(model=model, input=[], max_output_tokens=5)
    raise AssertionError("empty input accepted")
except openai.BadRequestError as e:
    assert e.body["param"] == "input", e.body

print(json.dumps(summary))
