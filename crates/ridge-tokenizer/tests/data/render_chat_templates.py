"""Renders the chat templates in templates/ with Python's jinja2, configured as Hugging Face
transformers' apply_chat_template configures it, over a fixed set of conversations, and writes
chat_template_renders.json: the ground truth tests/chat_templates.rs compares ridge against.
Nothing here may come from ridge itself.

The environment is transformers' (_compile_jinja_template): ImmutableSandboxedEnvironment with
trim_blocks, lstrip_blocks and the loopcontrols extension; `tojson` is
json.dumps(ensure_ascii=False, ...); globals raise_exception (a TemplateError) and
strftime_now. transformers' strftime_now formats the current local time; here it formats a
fixed instant, NOW_UNIX in UTC, so the renders are reproducible (the Rust test pins ridge's
clock to the same instant).

Messages are what ridge's ChatMessage carries: `content` is always a string ("" for an
assistant turn that only calls tools), plus optional tool_calls, tool_call_id, name,
reasoning_content and thinking.

Usage: python3 render_chat_templates.py  (run from anywhere; writes next to this file)
"""

import json
import os
from datetime import datetime, timezone

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

HERE = os.path.dirname(os.path.abspath(__file__))
# 2025-08-05 12:00:00 UTC.
NOW_UNIX = 1754395200


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


def strftime_now(fmt):
    return datetime.fromtimestamp(NOW_UNIX, timezone.utc).strftime(fmt)


def compile_template(src):
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env.from_string(src)


def msg(role, content, **fields):
    m = {"role": role, "content": content}
    m.update(fields)
    return m


def call(call_id, name, arguments):
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def tool_result(call_id, name, content):
    return msg("tool", content, tool_call_id=call_id, name=name)


# Tools, as OpenAI-style requests send them (JSON-schema parameters).
WEATHER = {"type": "function", "function": {
    "name": "get_weather",
    "description": "Current weather in a city, in °C.",
    "parameters": {
        "type": "object",
        "properties": {
            "city": {"type": "string", "description": "City name, e.g. Zürich"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "default": "celsius",
                     "description": "Temperature unit"},
        },
        "required": ["city"],
    }}}
CLOCK = {"type": "function", "function": {
    "name": "now", "description": "The time.",
    "parameters": {"type": "object", "properties": {}}}}
SEARCH = {"type": "function", "function": {
    "name": "search_files",
    "description": "  Search the repository for a pattern.\n",
    "parameters": {
        "type": "object",
        "properties": {
            "pattern": {"type": "string", "description": "A regular expression"},
            "max_results": {"type": "integer", "description": "At most this many", "minimum": 1,
                            "default": 20},
            "threshold": {"type": "number", "description": "Score cut-off"},
            "case_sensitive": {"type": "boolean", "default": False},
            "paths": {"type": "array", "items": {"type": "string"},
                      "description": "Folders to search"},
            "filters": {"type": "array",
                        "items": {"type": "object",
                                  "properties": {"ext": {"type": "string"},
                                                 "min_size": {"type": "integer"}}}},
            "options": {"type": "object",
                        "properties": {"follow_links": {"type": "boolean"},
                                       "depth": {"type": "integer"}},
                        "required": ["depth"]},
            "mode": {"oneOf": [{"type": "string", "description": "a named mode"},
                               {"type": "integer"}]},
            "label": {"type": ["string", "null"], "description": "Free-form tag"},
            "note": {"type": "string", "nullable": True},
        },
        "required": ["pattern"],
        "additionalProperties": False,
    }}}
EXEC = {"type": "function", "function": {
    "name": "run_shell",
    "description": "Run a shell command.",
    "parameters": {"type": "object",
                   "properties": {"command": {"type": "string"},
                                  "timeout": {"type": "number", "default": 1.5}},
                   "required": ["command"]},
    "strict": True}}

SYSTEM = msg("system", "You are a terse senior engineer.")

# ---------------------------------------------------------------- Qwen3 (0.6B ... 235B) ----
qwen3 = [
    ("system_user", [SYSTEM, msg("user", "Explain RoPE in one line.")], {}, True),
    ("system_user_no_generation_prompt", [SYSTEM, msg("user", "What is 2+2?")], {}, False),
    ("user_only", [msg("user", "Write fib(n) in Python.")], {}, True),
    ("enable_thinking_false", [SYSTEM, msg("user", "Quick: 7*6?")], {"enable_thinking": False},
     True),
    ("enable_thinking_true", [msg("user", "Quick: 7*6?")], {"enable_thinking": True}, True),
    ("enable_thinking_false_no_generation_prompt", [msg("user", "Hi")],
     {"enable_thinking": False}, False),
    # Reasoning in earlier turns is stripped; only turns after the last user query keep it.
    ("multi_turn_think_in_content", [
        SYSTEM,
        msg("user", "Hello!"),
        msg("assistant", "<think>\nThe user greets me.\nGreet back.\n</think>\n\nBonjour !"),
        msg("user", "Quel temps fait-il ?\n(短く)"),
    ], {}, True),
    ("multi_turn_last_assistant_keeps_think", [
        msg("user", "Hello!"),
        msg("assistant", "<think>greet</think>Hi there."),
        msg("user", "2+2?"),
        msg("assistant", "<think>\n\nSimple sum.\n\n</think>\n\n\n4"),
    ], {}, False),
    ("multi_turn_no_think", [
        SYSTEM,
        msg("user", "Name a prime."),
        msg("assistant", "7"),
        msg("user", "Another one."),
        msg("assistant", "11"),
        msg("user", "Sum them."),
    ], {"enable_thinking": False}, True),
    ("reasoning_content_field", [
        msg("user", "Is 91 prime?"),
        msg("assistant", "No: 91 = 7 × 13.", reasoning_content="Try 7: 7*13 = 91."),
        msg("user", "And 97?"),
        msg("assistant", "Yes.", reasoning_content="\nNo divisor up to 9.\n"),
    ], {}, False),
    ("reasoning_content_overrides_think_tags", [
        msg("user", "Hi"),
        msg("assistant", "<think>ignored</think>Hello", reasoning_content="kept"),
    ], {}, False),
    ("tools_with_system", [SYSTEM, msg("user", "Weather in Paris?")], {"tools": [WEATHER, CLOCK]},
     True),
    ("tools_without_system", [msg("user", "What time is it?")], {"tools": [CLOCK, SEARCH]}, True),
    # Arguments as an object (printed with tojson) and as a JSON string (printed as is);
    # several consecutive tool results form one user turn.
    ("tool_calls_and_results", [
        SYSTEM,
        msg("user", "Weather in Paris and the time?"),
        msg("assistant", "", reasoning_content="Two lookups.", tool_calls=[
            call("call_1", "get_weather", {"city": "Paris", "unit": "celsius"}),
            call("call_2", "now", "{\"tz\": \"Europe/Paris\"}"),
        ]),
        tool_result("call_1", "get_weather", "{\"temp\": 21, \"sky\": \"clear\"}"),
        tool_result("call_2", "now", "14:05"),
    ], {"tools": [WEATHER, CLOCK]}, True),
    ("tool_calls_full_round", [
        msg("user", "Weather in Zürich?"),
        msg("assistant", "<think>\nI should call the weather tool.\n</think>\n\nLet me check.",
            tool_calls=[call("call_1", "get_weather", {"city": "Zürich"})]),
        tool_result("call_1", "get_weather", "{\"temp\": 18}"),
        msg("assistant", "<think>18 degrees.</think>It is 18 °C in Zürich."),
        msg("user", "Thanks. And Bern?"),
        msg("assistant", "", tool_calls=[call("call_2", "get_weather", {"city": "Bern"})]),
        tool_result("call_2", "get_weather", "{\"temp\": 17}"),
        tool_result("call_2b", "get_weather", "{\"wind\": 3}"),
        tool_result("call_2c", "get_weather", "{\"rain\": false}"),
        msg("assistant", "<think>17.</think>17 °C in Bern."),
    ], {"tools": [WEATHER]}, False),
    # A user turn that is a tool response does not count as the last query.
    ("user_tool_response_is_not_a_query", [
        msg("user", "Time?"),
        msg("assistant", "<think>call now</think>", tool_calls=[call("c", "now", {})]),
        msg("user", "<tool_response>\n12:00\n</tool_response>"),
        msg("assistant", "<think>It is noon.</think>Noon."),
    ], {"tools": [CLOCK]}, False),
    ("system_in_the_middle", [
        msg("user", "a"),
        msg("system", "Switch to English."),
        msg("user", "b"),
    ], {}, True),
]

# ------------------------------------------------------------------------- Qwen3-Coder ----
coder = [
    ("system_user", [SYSTEM, msg("user", "Explain RoPE in one line.")], {}, True),
    ("system_user_no_generation_prompt", [SYSTEM, msg("user", "What is 2+2?")], {}, False),
    ("user_only", [msg("user", "Write fib(n) in Python.")], {}, True),
    ("multi_turn", [
        SYSTEM,
        msg("user", "Hello!"),
        msg("assistant", "Bonjour !"),
        msg("user", "Quel temps fait-il ?\n(短く)"),
    ], {}, True),
    ("tools_default_system", [msg("user", "Find TODOs.")], {"tools": [SEARCH, EXEC]}, True),
    ("tools_with_system", [SYSTEM, msg("user", "Weather in Paris?")], {"tools": [WEATHER, CLOCK]},
     True),
    # Argument values: strings and numbers as text, objects and lists as JSON.
    ("tool_calls_and_results", [
        SYSTEM,
        msg("user", "Find TODOs in src and run the tests."),
        msg("assistant", "  I will search first.  \n", tool_calls=[
            call("call_1", "search_files", {"pattern": "TODO", "max_results": 5,
                                            "paths": ["src", "tests"],
                                            "options": {"depth": 2, "follow_links": None}}),
            call("call_2", "run_shell", {"command": "cargo test", "timeout": 30.5}),
        ]),
        tool_result("call_1", "search_files", "src/lib.rs:3: TODO"),
        tool_result("call_2", "run_shell", "ok. 12 passed"),
        msg("assistant", "One TODO; tests pass."),
        msg("user", "Thanks."),
    ], {"tools": [SEARCH, EXEC]}, True),
    ("tool_call_without_content", [
        msg("user", "Time?"),
        msg("assistant", "", tool_calls=[call("c", "now", {})]),
        tool_result("c", "now", "12:00"),
    ], {"tools": [CLOCK]}, True),
]

# ------------------------------------------------------------------- gpt-oss (harmony) ----
gpt_oss = [
    ("user_only", [msg("user", "What is 2+2?")], {}, True),
    ("user_only_no_generation_prompt", [msg("user", "What is 2+2?")], {}, False),
    ("system_reasoning_low", [SYSTEM, msg("user", "Explain RoPE in one line.")],
     {"reasoning_effort": "low"}, True),
    ("developer_reasoning_high", [msg("developer", "Answer in French.\nBe brief."),
                                  msg("user", "Hello!")], {"reasoning_effort": "high"}, True),
    # Earlier turns' thinking is dropped.
    ("multi_turn_thinking_dropped", [
        msg("developer", "Answer in French."),
        msg("user", "Hello!"),
        msg("assistant", "Bonjour !", thinking="The user greets me; greet back in French."),
        msg("user", "Quel temps fait-il ?\n(短く)"),
    ], {"reasoning_effort": "low"}, True),
    # A final assistant turn without a generation prompt keeps its thinking (training format).
    ("final_turn_keeps_thinking", [
        msg("user", "2+2?"),
        msg("assistant", "4", thinking="Simple sum."),
    ], {}, False),
    ("tools_call_pending", [
        SYSTEM,
        msg("user", "Weather in Paris?"),
        msg("assistant", "", thinking="Need the weather tool.",
            tool_calls=[call("call_1", "get_weather", {"city": "Paris"})]),
        tool_result("call_1", "get_weather", "{\"temp\": 21, \"sky\": \"clear\"}"),
    ], {"tools": [WEATHER, CLOCK]}, True),
    # Once a final answer follows, the tool call's analysis is dropped.
    ("tools_full_round", [
        msg("user", "Find TODOs, then the time."),
        msg("assistant", "Searching first.",
            tool_calls=[call("call_1", "search_files", {"pattern": "TODO", "paths": ["src"]})]),
        tool_result("call_1", "search_files", "src/lib.rs:3: TODO"),
        tool_result("call_1", "search_files", "src/main.rs:9: TODO \"quoted\""),
        msg("assistant", "", thinking="Now the clock.",
            tool_calls=[call("call_2", "now", {})]),
        tool_result("call_2", "now", "12:00"),
        msg("assistant", "Two TODOs; it is noon.", thinking="Summarise."),
        msg("user", "Thanks!"),
    ], {"tools": [SEARCH, CLOCK, EXEC], "reasoning_effort": "high"}, True),
    ("model_identity_and_builtin_tools", [msg("user", "Look up ridge.")],
     {"model_identity": "You are a helpful assistant.", "builtin_tools": ["browser", "python"]},
     True),
    ("builtin_python_only", [msg("developer", "Use python."), msg("user", "1/7?")],
     {"builtin_tools": ["python"], "tools": [EXEC]}, True),
]


# ------------------------------------------------------- Qwen3.5 / Qwen3.6 (hybrids) ----
# Thinking on by default (the generation prompt opens <think>), Qwen3-Coder's XML tool calls.
qwen35 = [
    ("system_user", [SYSTEM, msg("user", "Explain RoPE in one line.")], {}, True),
    ("user_only_no_generation_prompt", [msg("user", "What is 2+2?")], {}, False),
    ("enable_thinking_false", [SYSTEM, msg("user", "Quick: 7*6?")], {"enable_thinking": False},
     True),
    ("multi_turn_think_in_content", [
        SYSTEM,
        msg("user", "Hello!"),
        msg("assistant", "<think>\nThe user greets me.\n</think>\n\nBonjour !"),
        msg("user", "Quel temps fait-il ?\n(短く)"),
    ], {}, True),
    ("reasoning_content_field", [
        msg("user", "Is 91 prime?"),
        msg("assistant", "No: 91 = 7 × 13.", reasoning_content="Try 7: 7*13 = 91."),
        msg("user", "And 97?"),
        msg("assistant", "Yes.", reasoning_content="\nNo divisor up to 9.\n"),
    ], {}, False),
    ("tools_default_system", [msg("user", "Find TODOs.")], {"tools": [SEARCH, EXEC]}, True),
    ("tools_with_system", [SYSTEM, msg("user", "Weather in Paris?")], {"tools": [WEATHER, CLOCK]},
     True),
    ("tool_calls_and_results", [
        SYSTEM,
        msg("user", "Find TODOs in src and run the tests."),
        msg("assistant", "I will search first.", reasoning_content="Search, then test.",
            tool_calls=[
                call("call_1", "search_files", {"pattern": "TODO", "max_results": 5,
                                                "paths": ["src", "tests"]}),
                call("call_2", "run_shell", {"command": "cargo test", "timeout": 30.5}),
            ]),
        tool_result("call_1", "search_files", "src/lib.rs:3: TODO"),
        tool_result("call_2", "run_shell", "ok. 12 passed"),
        msg("assistant", "One TODO; tests pass."),
        msg("user", "Thanks."),
    ], {"tools": [SEARCH, EXEC]}, True),
    ("tool_call_without_content", [
        msg("user", "Time?"),
        msg("assistant", "", tool_calls=[call("c", "now", {})]),
        tool_result("c", "now", "12:00"),
    ], {"tools": [CLOCK]}, True),
]

# ------------------------------- Granite 4.0, LFM2.5, Nemotron Nano v2 (other hybrids) ----
hybrid_chat = [
    ("system_user", [SYSTEM, msg("user", "Explain RoPE in one line.")], {}, True),
    ("user_only", [msg("user", "Write fib(n) in Python.")], {}, True),
    ("no_generation_prompt", [SYSTEM, msg("user", "What is 2+2?")], {}, False),
    ("multi_turn", [
        SYSTEM,
        msg("user", "Hello!"),
        msg("assistant", "Bonjour !"),
        msg("user", "Quel temps fait-il ?\n(短く)"),
    ], {}, True),
    ("tools_with_system", [SYSTEM, msg("user", "Weather in Paris?")], {"tools": [WEATHER, CLOCK]},
     True),
    ("tools_without_system", [msg("user", "What time is it?")], {"tools": [CLOCK, SEARCH]}, True),
    ("tool_calls_and_results", [
        msg("user", "Weather in Paris and the time?"),
        msg("assistant", "", tool_calls=[
            call("call_1", "get_weather", {"city": "Paris", "unit": "celsius"}),
            call("call_2", "now", {}),
        ]),
        tool_result("call_1", "get_weather", "{\"temp\": 21}"),
        tool_result("call_2", "now", "14:05"),
        msg("assistant", "21 °C, 14:05."),
        msg("user", "Thanks."),
    ], {"tools": [WEATHER, CLOCK]}, True),
    ("think_switch_in_system", [msg("system", "You help. /no_think"), msg("user", "Hi")], {},
     True),
]

# Mistral's templates want call ids of nine alphanumerics (Mistral Small 3.2 raises otherwise).
mistral_chat = [c for c in hybrid_chat if c[0] != "tool_calls_and_results"] + [
    ("tool_calls_and_results", [
        msg("user", "Weather in Paris and the time?"),
        msg("assistant", "", tool_calls=[
            call("Wx7Kp2Qa9", "get_weather", {"city": "Paris", "unit": "celsius"}),
            call("Tm4Zr8Nb1", "now", {}),
        ]),
        tool_result("Wx7Kp2Qa9", "get_weather", "{\"temp\": 21}"),
        tool_result("Tm4Zr8Nb1", "now", "14:05"),
        msg("assistant", "21 °C, 14:05."),
        msg("user", "Thanks."),
    ], {"tools": [WEATHER, CLOCK]}, True),
]

# ------------------------------------------------------------------------ Gemma 4 ----
# <|turn>ROLE\n…<turn|>; thinking (enable_thinking) as <|channel>thought\n…<channel|>, closed
# empty in the generation prompt when off; tools declared and calls written in Gemma's own
# syntax, <|tool_call>call:NAME{key:value,…}<tool_call|> with strings in <|"|>; a call's results
# follow it in the same model turn as <|tool_response>…<tool_response|>.
TRIP = {"type": "function", "function": {
    "name": "plan_trip",
    "description": "Plan a trip.",
    "parameters": {
        "type": "object",
        "properties": {
            "stops": {"type": "array", "description": "Stops in order",
                      "items": {"type": "object",
                                "properties": {"city": {"type": "string"},
                                               "nights": {"type": "integer"}},
                                "required": ["city"]}},
            "tags": {"type": "array", "items": {"type": ["string", "integer"]}},
            "budget": {"type": "object", "description": "Budget",
                       "properties": {"amount": {"type": "number"},
                                      "currency": {"type": "string", "enum": ["EUR", "USD"]}},
                       "required": ["amount"]},
            "flexible": {"type": "boolean", "nullable": True},
        },
        "required": ["stops"],
    },
    "response": {"description": "The itinerary", "type": "object"}}}
gemma4 = [
    ("user_only", [msg("user", "Write fib(n) in Python.")], {}, True),
    ("system_user", [SYSTEM, msg("user", "Explain RoPE in one line.")], {}, True),
    ("developer_user", [msg("developer", "  Answer in French.\n"), msg("user", "Hi")], {}, True),
    ("no_generation_prompt", [SYSTEM, msg("user", "What is 2+2?")], {}, False),
    ("enable_thinking_true", [msg("user", "Quick: 7*6?")], {"enable_thinking": True}, True),
    ("enable_thinking_false", [SYSTEM, msg("user", "Quick: 7*6?")], {"enable_thinking": False},
     True),
    ("multi_turn_thinking_in_content", [
        SYSTEM,
        msg("user", "Hello!"),
        msg("assistant", "<|channel>thought\nThe user greets me.<channel|>Bonjour !"),
        msg("user", "Quel temps fait-il ?\n(短く)"),
    ], {"enable_thinking": True}, True),
    ("tools_search_exec", [msg("user", "Find TODOs.")], {"tools": [SEARCH, EXEC]}, True),
    ("tools_with_system", [SYSTEM, msg("user", "Weather in Paris?")],
     {"tools": [WEATHER, CLOCK, TRIP]}, True),
    ("tools_and_thinking", [msg("user", "Plan Rome.")],
     {"tools": [TRIP], "enable_thinking": True}, True),
    ("tool_calls_and_results", [
        SYSTEM,
        msg("user", "Find TODOs in src and run the tests."),
        msg("assistant", "I will search first.", reasoning_content="Search, then test.",
            tool_calls=[
                call("call_1", "search_files", {"pattern": "TODO", "max_results": 5,
                                                "paths": ["src", "tests"]}),
                call("call_2", "run_shell", {"command": "cargo test", "timeout": 30.5}),
            ]),
        tool_result("call_1", "search_files", "src/lib.rs:3: TODO"),
        tool_result("call_2", "run_shell", "ok. 12 passed"),
        msg("assistant", "One TODO; tests pass."),
        msg("user", "Thanks."),
    ], {"tools": [SEARCH, EXEC]}, True),
    ("tool_call_typed_arguments", [
        msg("user", "Search."),
        msg("assistant", "", tool_calls=[
            call("c1", "search_files", {"pattern": "a, b: {c} \"q\" <x>", "case_sensitive": True,
                                        "options": {"depth": 2, "follow_links": False},
                                        "label": None, "paths": [], "threshold": 0.5,
                                        "filters": [{"ext": "rs", "min_size": -1}]}),
        ]),
        tool_result("c1", "search_files", "{\"hits\": 0}"),
    ], {"tools": [SEARCH]}, True),
    ("tool_call_without_content", [
        msg("user", "Time?"),
        msg("assistant", "", tool_calls=[call("c", "now", {})]),
        tool_result("c", "now", "12:00"),
    ], {"tools": [CLOCK]}, True),
    ("tool_call_pending", [
        msg("user", "Time?"),
        msg("assistant", "", reasoning_content="Need the clock.",
            tool_calls=[call("c", "now", {})]),
    ], {"tools": [CLOCK]}, True),
    ("tool_calls_then_answer_then_more", [
        msg("user", "Weather in Paris and the time?"),
        msg("assistant", "", reasoning_content="Two tools.", tool_calls=[
            call("call_1", "get_weather", {"city": "Paris", "unit": "celsius"}),
            call("call_2", "now", {}),
        ]),
        tool_result("call_1", "get_weather", "{\"temp\": 21}"),
        tool_result("call_2", "now", "14:05"),
        msg("assistant", "21 °C, 14:05."),
        msg("user", "And Rome?"),
        msg("assistant", "", tool_calls=[call("call_3", "get_weather", {"city": "Rome"})]),
        tool_result("call_3", "get_weather", "{\"temp\": 25}"),
    ], {"tools": [WEATHER, CLOCK], "enable_thinking": True}, True),
    # A call's results on the assistant turn itself (`tool_responses`, Gemma's own form, which
    # the interleaved variant reads instead of tool messages).
    ("tool_responses_field", [
        msg("user", "Weather in Paris and the time?"),
        msg("assistant", "21 °C, 14:05.", reasoning_content="Two tools.", tool_calls=[
            call("call_1", "get_weather", {"city": "Paris"}),
            call("call_2", "now", {}),
        ], tool_responses=[{"name": "get_weather", "response": {"temp": 21, "sky": "clear"}},
                           {"name": "now", "response": "14:05"}]),
        msg("user", "Thanks."),
    ], {"tools": [WEATHER, CLOCK]}, True),
    ("tool_responses_pending", [
        msg("user", "Time?"),
        msg("assistant", "", reasoning_content="Need the clock.",
            tool_calls=[call("c", "now", {})],
            tool_responses=[{"name": "now", "response": {"time": "12:00", "tz": None}}]),
    ], {"tools": [CLOCK], "enable_thinking": True}, True),
]

# Conversations the templates reject. `raise` names the raise_exception message; otherwise
# jinja2 fails in some other way and ridge must fail too.
errors = {
    "openai-gpt-oss-120b.jinja": [
        ("tool_without_call", [msg("user", "Hi"), tool_result("x", "now", "12:00")], {}, True),
        ("channel_tags_in_content", [
            msg("user", "Hi"),
            msg("assistant", "<|channel|>analysis<|message|>hmm<|end|>")], {}, True),
        ("channel_tags_in_thinking", [
            msg("user", "Hi"),
            msg("assistant", "Hello", thinking="<|channel|>final<|message|>x")], {}, True),
        ("content_and_thinking_with_tool_calls", [
            msg("user", "Time?"),
            msg("assistant", "Calling.", thinking="Need the clock.",
                tool_calls=[call("c", "now", {})])], {"tools": [CLOCK]}, True),
    ],
    "Mistral-Small-3.2-24B-Instruct-2506.jinja": [
        ("call_id_not_nine_alphanumerics", [
            msg("user", "Time?"),
            msg("assistant", "", tool_calls=[call("call_1", "now", {})])],
         {"tools": [CLOCK]}, True),
    ],
    "Qwen3-Coder.jinja": [
        # `arguments | items` needs a mapping; a JSON string is a TypeError in jinja2.
        ("string_arguments", [
            msg("user", "Time?"),
            msg("assistant", "", tool_calls=[call("c", "now", "{\"tz\": \"UTC\"}")])],
         {"tools": [CLOCK]}, True),
    ],
}

# Small templates that probe, one feature at a time, the Python behaviour the real templates
# lean on: str() of containers and floats, the `string` filter, tojson, Python string methods,
# slicing, namespaces, loop controls, strftime_now.
VALUES = {"xs": [1, "a", "it's", "say \"hi\"", "both ' \"", None, True, False, 1.5, 1e-05, 1e16,
                 -0.0, {"k": [1, {"n": None}]}],
          "odd": "tab\tnl\nnbsp\u00a0zwsp\u200bbell\u0007del\u007fé€😀\\",
          "floats": [0.1, 100.0, 1e-07, 123456789012345680.0, 2.5e-05],
          "schema": {"type": ["string", "null"], "nullable": True, "default": None}}
probes = [
    ("print_containers", "{{ xs }}|{{ schema }}|{{ floats }}|{{ xs[12] }}", VALUES),
    ("string_filter", "{{ xs | string }}|{{ schema.type | string }}|{{ schema.nullable | string }}"
                      "|{{ schema.default | string }}|{{ 1.5 | string }}|{{ missing | string }}|",
     VALUES),
    ("repr_escapes", "{{ [odd] }}", VALUES),
    ("print_scalars", "{{ 1e16 }} {{ 1e-05 }} {{ 2.0 }} {{ 7 }} {{ true }} {{ none }} {{ floats[2] }}",
     VALUES),
    ("tojson", "{{ xs | tojson }}|{{ floats | tojson }}|{{ odd | tojson }}|{{ schema | tojson(indent=2) }}"
               "|{{ odd | tojson(ensure_ascii=true) }}", VALUES),
    ("string_methods",
     "{{ s.startswith('<a') }} {{ s.endswith('b>') }} {{ s.split('|') }} {{ s.split('|')[-1] }}"
     " [{{ s.strip('<>') }}] [{{ p.lstrip('\n') }}] [{{ p.rstrip('\n') }}] [{{ p.strip() }}]"
     " {{ s.upper() }} {{ s.replace('|', '+') }} {{ s.find('|') }}",
     {"s": "<a|x|b>", "p": "\n\n pad \n\n"}),
    ("items_and_namespace",
     "{% set ns = namespace(n=0, last=none) %}{% for k, v in d.items() %}{% set ns.n = ns.n + v %}"
     "{% set ns.last = k %}{% endfor %}{% for k, v in d|items %}{{ k }}={{ v }};{% endfor %}"
     "{{ ns.n }} {{ ns.last }} {{ d.keys() | list }} {{ d.values() | list }} {{ d.get('zz', 'dflt') }}",
     {"d": {"b": 2, "a": 1, "c": 3}}),
    ("slices_and_loops",
     "{% for x in xs[::-1] %}{% if loop.index0 == 1 %}{% continue %}{% endif %}{{ x }}"
     "{% if x == 2 %}{% break %}{% endif %},{% endfor %}|{{ xs[1:] }}|{{ xs[:-1] }}|{{ xs | length }}"
     "|{% for x in xs %}{{ loop.previtem }}>{{ x }}>{{ loop.nextitem }} {% endfor %}",
     {"xs": [1, 2, 3, 4]}),
    # jinja2's upper/lower print a non-string as Python's str() first (Gemma 4's template upper-
    # cases a schema's `type`, which may be a list or missing).
    ("case_filters",
     "{{ xs | upper }}|{{ schema.type | upper }}|{{ missing | upper }}|{{ none | lower }}"
     "|{{ 1.5 | upper }}|{{ schema | lower }}|{{ schema.type | map('upper') | list }}"
     "|{{ odd | upper }}|{{ 'ǅß' | lower }}", VALUES),
    ("strftime_now", "{{ strftime_now('%Y-%m-%d') }} {{ strftime_now('%d %b %Y %A %H:%M:%S %j %I%p') }}",
     {}),
]

TEMPLATES = [
    # Qwen3 GGUFs: BOS <|endoftext|> (151643, not added), EOS <|im_end|> (151645).
    ("Qwen-Qwen3-0.6B.jinja", "<|endoftext|>", "<|im_end|>", qwen3),
    ("Qwen3-Coder.jinja", "<|endoftext|>", "<|im_end|>", coder),
    # gpt-oss GGUFs: BOS <|startoftext|> (199998), EOS <|return|> (200002).
    ("openai-gpt-oss-120b.jinja", "<|startoftext|>", "<|return|>", gpt_oss),
    # The 2026 hybrids' templates (llama.cpp's copies).
    ("Qwen3.5-4B.jinja", "<|endoftext|>", "<|im_end|>", qwen35),
    ("ibm-granite-granite-4.0.jinja", "<|end_of_text|>", "<|end_of_text|>", hybrid_chat),
    ("LFM2.5-Instruct.jinja", "<|startoftext|>", "<|im_end|>", hybrid_chat),
    ("NVIDIA-Nemotron-Nano-v2.jinja", "<SPECIAL_10>", "<SPECIAL_11>", hybrid_chat),
    # The families of llama's layer (llama.cpp's copies): SmolLM3 (<think> by default),
    # Granite 3.3 (<|tool_call|> JSON lists), Ministral 3 and Mistral Small 3.2 ([THINK],
    # [TOOL_CALLS]name[ARGS]{…}), Phi-3.5 / Phi-4-mini's chat format.
    ("HuggingFaceTB-SmolLM3-3B.jinja", "<|im_start|>", "<|im_end|>", hybrid_chat),
    ("ibm-granite-granite-3.3-2B-Instruct.jinja", "<|end_of_text|>", "<|end_of_text|>",
     hybrid_chat),
    ("mistralai-Ministral-3-14B-Reasoning-2512.jinja", "<s>", "</s>", mistral_chat),
    ("Mistral-Small-3.2-24B-Instruct-2506.jinja", "<s>", "</s>", mistral_chat),
    ("microsoft-Phi-3.5-mini-instruct.jinja", "<s>", "<|endoftext|>", hybrid_chat),
    # GLM-4.6 / GLM-4.5-Air and GLM-4.7-Flash: <think> (opened by 4.7's generation prompt),
    # <tool_call>NAME<arg_key>…</arg_key><arg_value>…</arg_value></tool_call>.
    ("GLM-4.6.jinja", "[gMASK]<sop>", "<|endoftext|>", qwen35),
    ("GLM-4.7-Flash.jinja", "[gMASK]<sop>", "<|endoftext|>", qwen35),
    # Gemma 4 (31B, 26B-A4B, E4B, E2B share it): <|channel>thought…<channel|> reasoning,
    # <|tool_call>call:NAME{…}<tool_call|> calls; and the earlier variant for interleaved
    # thinking (reasoning kept between a turn's calls; tool results as their own turns).
    ("google-gemma-4-31B-it.jinja", "<bos>", "<eos>", gemma4),
    ("google-gemma-4-31B-it-interleaved.jinja", "<bos>", "<eos>", gemma4),
    # DeepSeek V3.1 (GLM-4.7-Flash's latent-attention family; <think> by `thinking`) and Kimi
    # K2 (deepseek2 too): rendered only, their tool-call formats are not parsed yet.
    ("deepseek-ai-DeepSeek-V3.1.jinja", "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>",
     hybrid_chat),
    ("moonshotai-Kimi-K2.jinja", "[BOS]", "[EOS]", hybrid_chat),
]


def render(t, msgs, extra, gen, bos, eos):
    ctx = dict(extra)
    ctx.update(messages=msgs, add_generation_prompt=gen, bos_token=bos, eos_token=eos)
    return t.render(**ctx)


def main():
    out = {
        "source": "jinja2 " + jinja2.__version__ + " as transformers' apply_chat_template sets it"
                  " up (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loopcontrols,"
                  " tojson = json.dumps(ensure_ascii=False), raise_exception, strftime_now);"
                  " strftime_now formats now_unix in UTC",
        "now_unix": NOW_UNIX,
        "templates": [],
    }
    for file, bos, eos, convs in TEMPLATES:
        with open(os.path.join(HERE, "templates", file), encoding="utf-8") as f:
            t = compile_template(f.read())
        cases = []
        for name, msgs, extra, gen in convs:
            text = render(t, msgs, extra, gen, bos, eos)
            cases.append({"name": name, "messages": msgs, "extra": extra,
                          "add_generation_prompt": gen, "rendered": text})
            print(f"{file:28} {name:44} {len(text):6} chars")
        failures = []
        for name, msgs, extra, gen in errors.get(file, []):
            try:
                render(t, msgs, extra, gen, bos, eos)
            except jinja2.exceptions.TemplateError as e:
                kind, message = "raise_exception", str(e)
            except Exception as e:  # noqa: BLE001 - any failure of the render
                kind, message = type(e).__name__, str(e)
            else:
                raise SystemExit(f"{file} {name}: expected the render to fail")
            failures.append({"name": name, "messages": msgs, "extra": extra,
                             "add_generation_prompt": gen, "error_kind": kind,
                             "error": message})
            print(f"{file:28} {name:44} fails: {kind}: {message[:60]}")
        out["templates"].append({"template": file, "bos_token": bos, "eos_token": eos,
                                 "cases": cases, "errors": failures})
    out["probes"] = []
    for name, src, ctx in probes:
        text = compile_template(src).render(**ctx)
        out["probes"].append({"name": name, "source": src, "context": ctx, "rendered": text})
        print(f"probe {name:44} {text[:60]!r}")
    with open(os.path.join(HERE, "chat_template_renders.json"), "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
