#!/usr/bin/env python3
"""Loopback capture server for recording what real coding agents send.

Logs every HTTP request it receives (method, path, headers, JSON body) to a
directory, one file per request, named NNN-<path-with-slashes-as-underscores>.json
(the query string is kept in "path" but left out of the file name), and answers
with minimal, protocol-valid responses so a client finishes its turn:

  POST /v1/messages               Anthropic Messages (SSE when "stream": true)
  POST /v1/messages/count_tokens  {"input_tokens": 10}
  POST /v1/responses              OpenAI Responses, streamed as SSE
  GET  /v1/models                 a one-model list
  anything else                   404 JSON

With --tool-call the first main request of a conversation (one that offers a
tool the server knows how to call, and carries no tool result yet) is answered
with tool calls instead of text, so the client runs them and sends a second
request with their results:
  Anthropic: a text block, then tool_use blocks `Write` (hello.txt = "hi") and
             `Bash` (`ls`), whichever are offered.
  Responses: a function_call to `exec_command`/`shell_command`/`shell` running
             `ls`, plus a custom_tool_call to a freeform `apply_patch` adding
             hello.txt when that tool is offered.
With --reasoning, answers to requests that offer tools start with a thinking
block (Anthropic, with a signature) or a reasoning item (Responses, with a
summary and reasoning_text), so the second request shows how the client
echoes them back.

Standard library only (Python 3.11). Usage:
  python3 tools/agents/capture_server.py --port 8765 --out /tmp/capture [--tool-call]
"""

from __future__ import annotations

import argparse
import base64
import gzip
import itertools
import json
import os
import re
import sys
import threading
import time
import uuid
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

TEXT = "OK"


class State:
    def __init__(self, out_dir: str, tool_call: bool, reasoning: bool):
        self.out_dir = out_dir
        self.tool_call = tool_call
        self.reasoning = reasoning
        self.counter = itertools.count(1)
        self.lock = threading.Lock()

    def next_index(self) -> int:
        with self.lock:
            return next(self.counter)


def _decode_body(raw: bytes, encoding: str | None):
    """Return (body, note). body is parsed JSON when possible."""
    note = None
    data = raw
    enc = (encoding or "").strip().lower()
    try:
        if enc == "gzip":
            data = gzip.decompress(raw)
        elif enc == "deflate":
            data = zlib.decompress(raw)
        elif enc:
            note = f"unsupported content-encoding {enc!r}; body is base64 of the raw bytes"
            return base64.b64encode(raw).decode("ascii"), note
    except Exception as exc:  # noqa: BLE001 - record and carry on
        note = f"could not decode content-encoding {enc!r}: {exc}"
        return base64.b64encode(raw).decode("ascii"), note
    if not data:
        return None, note
    try:
        return json.loads(data), note
    except ValueError:
        try:
            return data.decode("utf-8"), "body is not JSON"
        except UnicodeDecodeError:
            return base64.b64encode(data).decode("ascii"), "body is base64 (not UTF-8)"


def _sse(events: list[tuple[str, dict]]) -> bytes:
    out = []
    for name, data in events:
        out.append(f"event: {name}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n")
    return "".join(out).encode("utf-8")


# ---------------------------------------------------------------- Anthropic

def _last_message_has_tool_result(body: dict) -> bool:
    msgs = body.get("messages") or []
    if not msgs:
        return False
    content = msgs[-1].get("content")
    if isinstance(content, list):
        return any(isinstance(b, dict) and b.get("type") == "tool_result" for b in content)
    return False


def _anthropic_tool_calls(body: dict) -> list[tuple[str, dict]]:
    """The tool_use calls to answer with (possibly none)."""
    if _last_message_has_tool_result(body):
        return []
    names = {t.get("name") for t in body.get("tools") or [] if isinstance(t, dict)}
    calls = []
    if "Write" in names:
        calls.append(("Write", {"file_path": "hello.txt", "content": "hi\n"}))
    if "Bash" in names:
        calls.append(("Bash", {"command": "ls", "description": "List files"}))
    return calls


def anthropic_message(body: dict, tool_call: bool, reasoning: bool):
    model = body.get("model") or "ridge"
    msg_id = "msg_" + uuid.uuid4().hex[:24]
    calls = _anthropic_tool_calls(body) if tool_call else []
    content: list[dict] = []
    if reasoning and body.get("tools"):
        content.append({"type": "thinking", "thinking": "The user wants a file; use the tools.",
                        "signature": "c2lnbmF0dXJl"})
    if calls:
        content.append({"type": "text", "text": "I'll do that."})
        for name, args in calls:
            content.append({"type": "tool_use", "id": "toolu_" + uuid.uuid4().hex[:24],
                            "name": name, "input": args})
        stop = "tool_use"
    else:
        content.append({"type": "text", "text": TEXT})
        stop = "end_turn"
    usage = {"input_tokens": 10, "output_tokens": 1}
    if not body.get("stream"):
        return "application/json", json.dumps({
            "id": msg_id, "type": "message", "role": "assistant", "model": model,
            "content": content, "stop_reason": stop, "stop_sequence": None,
            "usage": usage,
        }).encode("utf-8")
    events = [("message_start", {"type": "message_start", "message": {
        "id": msg_id, "type": "message", "role": "assistant", "model": model,
        "content": [], "stop_reason": None, "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 1}}})]
    for i, block in enumerate(content):
        if block["type"] == "text":
            start = {"type": "text", "text": ""}
            deltas = [{"type": "text_delta", "text": block["text"]}]
        elif block["type"] == "thinking":
            start = {"type": "thinking", "thinking": "", "signature": ""}
            deltas = [{"type": "thinking_delta", "thinking": block["thinking"]},
                      {"type": "signature_delta", "signature": block["signature"]}]
        else:
            start = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
            deltas = [{"type": "input_json_delta", "partial_json": json.dumps(block["input"])}]
        events.append(("content_block_start", {"type": "content_block_start", "index": i,
                                               "content_block": start}))
        for d in deltas:
            events.append(("content_block_delta", {"type": "content_block_delta", "index": i,
                                                   "delta": d}))
        events.append(("content_block_stop", {"type": "content_block_stop", "index": i}))
    events += [
        ("message_delta", {"type": "message_delta",
                           "delta": {"stop_reason": stop, "stop_sequence": None},
                           "usage": {"output_tokens": 1}}),
        ("message_stop", {"type": "message_stop"}),
    ]
    return "text/event-stream", _sse(events)


# ---------------------------------------------------------------- Responses

APPLY_PATCH = """*** Begin Patch
*** Add File: hello.txt
+hi
*** End Patch"""


def _responses_tool_calls(body: dict) -> list[dict]:
    """Output items calling the offered tools (possibly none)."""
    inputs = body.get("input") or []
    if any(isinstance(i, dict) and i.get("type", "").endswith("_call_output") for i in inputs):
        return []
    tools = {t.get("name"): t for t in body.get("tools") or [] if isinstance(t, dict)}
    items = []

    def fcall(name, args):
        items.append({"type": "function_call", "id": "fc_" + uuid.uuid4().hex[:24],
                      "status": "completed", "call_id": "call_" + uuid.uuid4().hex[:24],
                      "name": name, "arguments": json.dumps(args)})

    if "exec_command" in tools:
        fcall("exec_command", {"cmd": "ls"})
    elif "shell_command" in tools:
        fcall("shell_command", {"command": "ls"})
    elif "shell" in tools:
        fcall("shell", {"command": ["ls"]})
    if tools.get("apply_patch", {}).get("type") == "custom":
        items.append({"type": "custom_tool_call", "id": "ctc_" + uuid.uuid4().hex[:24],
                      "status": "completed", "call_id": "call_" + uuid.uuid4().hex[:24],
                      "name": "apply_patch", "input": APPLY_PATCH})
    return items


def responses_stream(body: dict, tool_call: bool, reasoning: bool) -> bytes:
    model = body.get("model") or "ridge"
    resp_id = "resp_" + uuid.uuid4().hex[:24]
    created = int(time.time())
    items: list[dict] = []
    if reasoning and body.get("tools"):
        items.append({"type": "reasoning", "id": "rs_" + uuid.uuid4().hex[:24],
                      "summary": [{"type": "summary_text", "text": "Listing files."}],
                      "content": [{"type": "reasoning_text",
                                   "text": "The user wants the files; run ls."}],
                      "encrypted_content": None})
    calls = _responses_tool_calls(body) if tool_call else []
    if calls:
        items += calls
    else:
        items.append({"type": "message", "id": "msg_" + uuid.uuid4().hex[:24],
                      "status": "completed", "role": "assistant",
                      "content": [{"type": "output_text", "text": TEXT, "annotations": []}]})

    def response_obj(status, output, usage=None):
        return {
            "id": resp_id, "object": "response", "created_at": created,
            "status": status, "error": None, "incomplete_details": None,
            "model": model, "output": output, "usage": usage,
            "parallel_tool_calls": body.get("parallel_tool_calls", False),
            "tool_choice": body.get("tool_choice", "auto"),
            "tools": [],
        }

    seq = itertools.count(0)
    ev: list[tuple[str, dict]] = []

    def add(name, **fields):
        ev.append((name, {"type": name, "sequence_number": next(seq), **fields}))

    add("response.created", response=response_obj("in_progress", []))
    add("response.in_progress", response=response_obj("in_progress", []))
    for n, item in enumerate(items):
        iid = item["id"]
        kind = item["type"]
        if kind == "message":
            text = item["content"][0]["text"]
            add("response.output_item.added", output_index=n,
                item=dict(item, status="in_progress", content=[]))
            add("response.content_part.added", item_id=iid, output_index=n, content_index=0,
                part={"type": "output_text", "text": "", "annotations": []})
            add("response.output_text.delta", item_id=iid, output_index=n, content_index=0,
                delta=text)
            add("response.output_text.done", item_id=iid, output_index=n, content_index=0,
                text=text)
            add("response.content_part.done", item_id=iid, output_index=n, content_index=0,
                part={"type": "output_text", "text": text, "annotations": []})
        elif kind == "reasoning":
            add("response.output_item.added", output_index=n,
                item=dict(item, summary=[], content=[]))
            s = item["summary"][0]["text"]
            add("response.reasoning_summary_part.added", item_id=iid, output_index=n,
                summary_index=0, part={"type": "summary_text", "text": ""})
            add("response.reasoning_summary_text.delta", item_id=iid, output_index=n,
                summary_index=0, delta=s)
            add("response.reasoning_summary_text.done", item_id=iid, output_index=n,
                summary_index=0, text=s)
            add("response.reasoning_summary_part.done", item_id=iid, output_index=n,
                summary_index=0, part={"type": "summary_text", "text": s})
            r = item["content"][0]["text"]
            add("response.reasoning_text.delta", item_id=iid, output_index=n,
                content_index=0, delta=r)
            add("response.reasoning_text.done", item_id=iid, output_index=n,
                content_index=0, text=r)
        elif kind == "function_call":
            add("response.output_item.added", output_index=n,
                item=dict(item, status="in_progress", arguments=""))
            add("response.function_call_arguments.delta", item_id=iid, output_index=n,
                delta=item["arguments"])
            add("response.function_call_arguments.done", item_id=iid, output_index=n,
                arguments=item["arguments"])
        elif kind == "custom_tool_call":
            add("response.output_item.added", output_index=n,
                item=dict(item, status="in_progress", input=""))
            add("response.custom_tool_call_input.delta", item_id=iid, output_index=n,
                delta=item["input"])
            add("response.custom_tool_call_input.done", item_id=iid, output_index=n,
                input=item["input"])
        add("response.output_item.done", output_index=n, item=item)
    usage = {"input_tokens": 10, "input_tokens_details": {"cached_tokens": 0},
             "output_tokens": 1, "output_tokens_details": {"reasoning_tokens": 0},
             "total_tokens": 11}
    add("response.completed", response=response_obj("completed", items, usage))
    return _sse(ev)


# ---------------------------------------------------------------- server

class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "capture/1"
    state: State  # set on the class by main()

    def log_message(self, fmt, *args):  # quieter than the default
        sys.stderr.write("[capture] " + (fmt % args) + "\n")

    def _read_body(self) -> bytes:
        te = (self.headers.get("Transfer-Encoding") or "").lower()
        if "chunked" in te:
            chunks = []
            while True:
                line = self.rfile.readline().strip()
                size = int(line.split(b";")[0], 16) if line else 0
                if size == 0:
                    # trailer lines until an empty one
                    while self.rfile.readline().strip():
                        pass
                    break
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
            return b"".join(chunks)
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n else b""

    def _record(self, raw: bytes):
        body, note = _decode_body(raw, self.headers.get("Content-Encoding"))
        idx = self.state.next_index()
        bare = self.path.split("?", 1)[0]
        name = re.sub(r"[^A-Za-z0-9._-]", "_", bare.replace("/", "_")) or "_"
        rec = {"method": self.command, "path": self.path,
               "headers": {k: v for k, v in self.headers.items()}, "body": body}
        if note:
            rec["note"] = note
        fname = f"{self.state.out_dir}/{idx:03d}-{name}.json"
        with open(fname, "w", encoding="utf-8") as f:
            json.dump(rec, f, indent=1, ensure_ascii=False)
            f.write("\n")
        self.log_message("%s %s -> %s (%d bytes)", self.command, self.path, fname, len(raw))
        return body

    def _send(self, status: int, ctype: str, payload: bytes):
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(payload)))
        if ctype == "text/event-stream":
            self.send_header("Cache-Control", "no-cache")
        self.send_header("request-id", "req_" + uuid.uuid4().hex[:24])
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(payload)
            self.wfile.flush()

    def _json(self, status: int, obj):
        self._send(status, "application/json", json.dumps(obj).encode("utf-8"))

    def _handle(self):
        raw = self._read_body()
        body = self._record(raw)
        path = self.path.split("?", 1)[0].rstrip("/")
        tool, think = self.state.tool_call, self.state.reasoning
        if self.command == "POST" and path.endswith("/messages/count_tokens"):
            return self._json(200, {"input_tokens": 10})
        if self.command == "POST" and path.endswith("/messages"):
            ctype, payload = anthropic_message(body if isinstance(body, dict) else {}, tool, think)
            return self._send(200, ctype, payload)
        if self.command == "POST" and path.endswith("/responses"):
            payload = responses_stream(body if isinstance(body, dict) else {}, tool, think)
            return self._send(200, "text/event-stream", payload)
        if self.command in ("GET", "HEAD") and path.endswith("/models"):
            return self._json(200, {"object": "list",
                                    "data": [{"id": "ridge", "object": "model",
                                              "created": 0, "owned_by": "ridge"}]})
        if self.command in ("GET", "HEAD") and path in ("", "/", "/health"):
            return self._json(200, {"status": "ok"})
        return self._json(404, {"type": "error", "error": {
            "type": "not_found_error", "message": f"no route for {self.command} {self.path}"}})

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = do_OPTIONS = _handle


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8765)
    ap.add_argument("--out", required=True, help="directory for NNN-<path>.json files")
    ap.add_argument("--tool-call", action="store_true",
                    help="answer a conversation's first main request with tool calls")
    ap.add_argument("--reasoning", action="store_true",
                    help="put a thinking block / reasoning item first in answers to "
                         "requests that offer tools")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    Handler.state = State(args.out, args.tool_call, args.reasoning)
    srv = ThreadingHTTPServer((args.host, args.port), Handler)
    srv.daemon_threads = True
    sys.stderr.write(f"[capture] listening on http://{args.host}:{srv.server_port} -> {args.out}\n")
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
