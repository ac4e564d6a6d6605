"""Drives a running `ridge serve` with the official OpenAI Python SDK, unchanged.

Usage: python3 tools/tests/openai_sdk_check.py BASE_URL   (e.g. http://127.0.0.1:8080)

Exits non-zero with a message on the first failed check. Run by crates/ridge-cli/tests/serve.rs.
"""

import sys

from openai import OpenAI


def check(cond, what):
    if not cond:
        print(f"FAILED: {what}", file=sys.stderr)
        sys.exit(1)


def main():
    base = sys.argv[1].rstrip("/")
    client = OpenAI(base_url=f"{base}/v1", api_key="unused")

    models = client.models.list()
    name = models.data[0].id
    check(len(models.data) == 1 and name, "models.list")

    # Chat, non-streaming.
    r = client.chat.completions.create(
        model=name,
        messages=[{"role": "user", "content": "What is the capital of France? Answer in one word."}],
        max_tokens=24,
        temperature=0,
    )
    check(r.object == "chat.completion", "chat object")
    check("Paris" in r.choices[0].message.content, f"chat answer: {r.choices[0].message.content!r}")
    check(r.choices[0].message.role == "assistant", "role")
    check(r.usage.completion_tokens >= 1 and r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens, "chat usage")

    # Chat, streaming with usage.
    stream = client.chat.completions.create(
        model=name,
        messages=[{"role": "user", "content": "What is the capital of France? Answer in one word."}],
        max_tokens=24,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    text, usage, finish = "", None, None
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for c in chunk.choices:
            if c.delta.content:
                text += c.delta.content
            if c.finish_reason:
                finish = c.finish_reason
    check(text == r.choices[0].message.content, f"stream text {text!r} equals non-stream")
    check(usage is not None and usage.completion_tokens == r.usage.completion_tokens, "stream usage")
    check(finish in ("stop", "length"), "stream finish_reason")

    # Completions with stop, streaming.
    full = client.completions.create(model=name, prompt="The capital of France is", max_tokens=8, temperature=0)
    full_text = full.choices[0].text
    check("Paris" in full_text, f"completion: {full_text!r}")
    cut = full_text.index("ari")
    s = client.completions.create(
        model=name, prompt="The capital of France is", max_tokens=8, temperature=0, stop=["ari"], stream=True
    )
    got = "".join(c.choices[0].text for c in s if c.choices)
    check(got == full_text[:cut], f"stop: {got!r} vs {full_text[:cut]!r}")

    # Seeds reproduce; n > 1; logprobs.
    kw = dict(model=name, prompt="Once upon a time", max_tokens=16, temperature=1.0, seed=1234)
    a = client.completions.create(**kw).choices[0].text
    b = client.completions.create(**kw).choices[0].text
    check(a == b, "seed reproducibility")
    n = client.chat.completions.create(
        model=name, messages=[{"role": "user", "content": "Say hi"}], max_tokens=8, n=3, temperature=0.9, seed=5
    )
    check([c.index for c in n.choices] == [0, 1, 2], "n=3 choices")
    lp = client.chat.completions.create(
        model=name,
        messages=[{"role": "user", "content": "Hi"}],
        max_tokens=4,
        logprobs=True,
        top_logprobs=3,
        temperature=0,
    )
    content = lp.choices[0].logprobs.content
    check(len(content) >= 1 and len(content[0].top_logprobs) == 3, "chat logprobs")
    check(all(t.logprob <= 0 for t in content), "logprobs are log-probabilities")
    clp = client.completions.create(model=name, prompt="Hello", max_tokens=4, logprobs=2, temperature=0)
    check(len(clp.choices[0].logprobs.tokens) == 4, "completion logprobs")

    # Errors surface as SDK exceptions with the server's status.
    # Any model name: a one-model server answers it with its model, and says so in a header.
    raw = client.completions.with_raw_response.create(model="gpt-4o", prompt="x", max_tokens=2)
    check(raw.headers.get("x-ridge-requested-model") == "gpt-4o", "requested model header")
    check(raw.parse().model == name, "answered by the served model")
    try:
        client.chat.completions.create(model=name, messages=[], max_tokens=2)
        check(False, "empty messages must fail")
    except Exception as e:  # openai.BadRequestError
        check(getattr(e, "status_code", None) == 400, f"empty messages status: {e}")
    print("openai SDK checks passed")


if __name__ == "__main__":
    main()
