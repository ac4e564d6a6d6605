"""Structured outputs and tool calling against a running ridge, with the official OpenAI SDK.

Usage: structured_check.py BASE_URL SCHEMAS.json SAMPLES [--schemas-only]

1. Every JSON Schema in SCHEMAS.json ({"name": schema, ...}) is asked for SAMPLES times at
   temperature 0.8 through `response_format: json_schema`; every answer must parse and
   validate (the `jsonschema` package is the judge, not ridge).
2. `client.chat.completions.parse` with a Pydantic model returns a parsed object.
3. A function-calling loop: tool_choice "required" yields a call whose arguments validate
   against the function's parameters; the tool's result goes back (role "tool", with the
   assistant's tool_calls) and the model answers in text. The same call streamed arrives as
   OpenAI streams it (index, id and name first, then the arguments).
4. vLLM's guided_choice / guided_regex extras are honoured; a broken schema is a 400 naming
   its field.
Prints a JSON summary; exits non-zero on the first failure.
"""

import json
import re
import sys

import jsonschema
import openai
from pydantic import BaseModel


def check(cond, what):
    if not cond:
        raise SystemExit(f"structured check failed: {what}")


def main():
    base, schemas_path, samples = sys.argv[1], sys.argv[2], int(sys.argv[3])
    c = openai.OpenAI(base_url=base + "/v1", api_key="unused", max_retries=0, timeout=600)
    model = c.models.list().data[0].id
    schemas = json.load(open(schemas_path))
    summary = {"answers": 0, "valid": 0, "compile_ms": {}}

    # 1. Schemas at temperature 0.8.
    for name, schema in schemas.items():
        for k in range(samples):
            r = c.chat.completions.create(
                model=model, temperature=0.8, seed=k, max_tokens=400,
                messages=[{"role": "user", "content": f"Give an example {name.replace('_', ' ')} as JSON."}],
                response_format={"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": True}},
            )
            text = r.choices[0].message.content
            summary["answers"] += 1
            check(r.choices[0].finish_reason == "stop", f"{name}#{k}: finish {r.choices[0].finish_reason}: {text!r}")
            try:
                value = json.loads(text)
                jsonschema.validate(value, schema)
            except Exception as e:  # noqa: BLE001 - report any failure with the text
                raise SystemExit(f"structured check failed: {name}#{k}: {e}\n{text}")
            summary["valid"] += 1
            summary["compile_ms"][name] = r.model_extra["timings"]["grammar_compile_ms"]
    if "--schemas-only" in sys.argv:
        print(json.dumps(summary))
        return

    # 2. The SDK's parse helper with a Pydantic model.
    class Book(BaseModel):
        title: str
        year: int
        in_print: bool

    p = c.chat.completions.parse(
        model=model, temperature=0.8, max_tokens=200, response_format=Book,
        messages=[{"role": "user", "content": "Name a famous novel as JSON with title, year and in_print."}],
    )
    book = p.choices[0].message.parsed
    check(isinstance(book, Book), f"parse returned {book!r}")
    summary["parsed"] = book.model_dump()

    # 3. Function calling: required call, tool result back, final answer.
    params = {"type": "object", "properties": {"city": {"type": "string"},
              "unit": {"enum": ["celsius", "fahrenheit"]}}, "required": ["city", "unit"],
              "additionalProperties": False}
    tools = [{"type": "function", "function": {"name": "get_weather",
              "description": "Current weather in a city", "parameters": params}},
             {"type": "function", "function": {"name": "get_time",
              "description": "Current local time in a city",
              "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
    msgs = [{"role": "user", "content": "What's the weather like in Paris right now, in celsius?"}]
    r = c.chat.completions.create(model=model, messages=msgs, tools=tools, tool_choice="required",
                                  parallel_tool_calls=False, temperature=0, max_tokens=100)
    ch = r.choices[0]
    check(ch.finish_reason == "tool_calls", f"finish {ch.finish_reason}")
    calls = ch.message.tool_calls
    check(calls and len(calls) == 1, f"calls {calls}")
    call = calls[0]
    check(call.id and call.type == "function" and call.function.name in ("get_weather", "get_time"), f"{call}")
    args = json.loads(call.function.arguments)
    if call.function.name == "get_weather":
        jsonschema.validate(args, params)
    summary["call"] = {"name": call.function.name, "arguments": args}

    named = c.chat.completions.create(model=model, messages=msgs, tools=tools, temperature=0, max_tokens=100,
                                      tool_choice={"type": "function", "function": {"name": "get_time"}})
    check(named.choices[0].message.tool_calls[0].function.name == "get_time", f"{named.choices[0].message}")

    msgs += [{"role": "assistant", "content": None, "tool_calls": [
                 {"id": call.id, "type": "function",
                  "function": {"name": call.function.name, "arguments": call.function.arguments}}]},
             {"role": "tool", "tool_call_id": call.id,
              "content": json.dumps({"city": "Paris", "temperature": 18, "unit": "celsius", "sky": "cloudy"})}]
    final = c.chat.completions.create(model=model, messages=msgs, tools=tools, tool_choice="none",
                                      temperature=0, max_tokens=60)
    text = final.choices[0].message.content or ""
    check(final.choices[0].message.tool_calls is None and "18" in text, f"final answer {text!r}")
    summary["final"] = text

    # Streamed: index, id and name first, then the arguments.
    deltas, finish = [], None
    for chunk in c.chat.completions.create(model=model, messages=msgs[:1], tools=tools, tool_choice="required",
                                           parallel_tool_calls=False, temperature=0, max_tokens=100, stream=True):
        for choice in chunk.choices:
            deltas.extend(choice.delta.tool_calls or [])
            finish = choice.finish_reason or finish
    check(finish == "tool_calls", f"stream finish {finish}")
    check(deltas[0].index == 0 and deltas[0].id and deltas[0].function.name == call.function.name
          and deltas[0].function.arguments == "", f"first delta {deltas[0]}")
    streamed = "".join(d.function.arguments or "" for d in deltas)
    check(json.loads(streamed) == args, f"streamed arguments {streamed!r} vs {args}")

    # 4. vLLM extras and errors.
    r = c.chat.completions.create(model=model, messages=[{"role": "user", "content": "Is water wet?"}],
                                  temperature=0.8, max_tokens=10, extra_body={"guided_choice": ["yes", "no"]})
    check(r.choices[0].message.content in ("yes", "no"), f"choice {r.choices[0].message.content!r}")
    r = c.chat.completions.create(model=model, messages=[{"role": "user", "content": "A US zip code?"}],
                                  temperature=0.8, max_tokens=10, extra_body={"guided_regex": "[0-9]{5}"})
    check(re.fullmatch("[0-9]{5}", r.choices[0].message.content), f"regex {r.choices[0].message.content!r}")
    try:
        c.chat.completions.create(model=model, messages=[{"role": "user", "content": "x"}], max_tokens=5,
                                  response_format={"type": "json_schema", "json_schema": {
                                      "name": "bad", "schema": {"type": "object", "properties": {"a": {"$ref": "#/$defs/none"}}}}})
        check(False, "a broken schema was accepted")
    except openai.BadRequestError as e:
        check(e.body.get("param") == "response_format", f"error {e.body}")
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
