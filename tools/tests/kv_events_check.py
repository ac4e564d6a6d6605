"""A KV-event subscriber, built the way KV-aware routers build one, against a real `ridge serve`.

It subscribes to the PUB socket (pyzmq), decodes every batch strictly with msgspec structs
declared in vLLM's event layout (array_like, tagged), rebuilds the prefix cache's contents
from the events alone, and checks them against the server's own state (`GET /prefix_cache`)
after traffic that stores, reuses and evicts blocks, after `POST /flush_cache`, for a late
subscriber that catches up through the replay socket, and when the model unloads
(`AllBlocksCleared`).

Usage: kv_events_check.py BASE_URL PUB_ENDPOINT REPLAY_ENDPOINT TOPIC MODEL
       kv_events_check.py --silent BASE_URL PUB_ENDPOINT   (a server without prefix caching)
Prints "ok ..." lines; exits non-zero with the reason on the first mismatch.
"""

import json
import sys
import time
import urllib.request

import msgspec
import zmq

BLOCK = 16


class EventBatch(msgspec.Struct, array_like=True, omit_defaults=True, forbid_unknown_fields=True):
    ts: float
    events: list
    data_parallel_rank: int | None = None


class KVCacheEvent(msgspec.Struct, array_like=True, omit_defaults=True, tag=True):
    pass


class BlockStored(KVCacheEvent):
    block_hashes: list[int]
    parent_block_hash: int | None
    token_ids: list[int]
    block_size: int
    lora_id: int | None
    medium: str | None
    lora_name: str | None


class BlockRemoved(KVCacheEvent):
    block_hashes: list[int]
    medium: str | None


class AllBlocksCleared(KVCacheEvent):
    pass


class KVEventBatch(EventBatch, forbid_unknown_fields=True):
    events: list[BlockStored | BlockRemoved | AllBlocksCleared]


DECODER = msgspec.msgpack.Decoder(type=KVEventBatch)


def fail(msg):
    print(f"FAIL: {msg}", file=sys.stderr)
    sys.exit(1)


def http(base, path, body=None, method=None):
    req = urllib.request.Request(
        base + path,
        data=None if body is None else json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method=method or ("POST" if body is not None else "GET"),
    )
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.loads(r.read())


class View:
    """The cache as the events describe it: hash -> (parent, tokens)."""

    def __init__(self):
        self.blocks = {}
        self.next_seq = 0
        self.cleared = 0
        self.removed = 0

    def apply(self, seq, payload):
        if seq != self.next_seq:
            fail(f"sequence {seq} after {self.next_seq - 1}: a gap or a repeat")
        self.next_seq = seq + 1
        batch = DECODER.decode(payload)
        if batch.data_parallel_rank != 0:
            fail(f"data_parallel_rank {batch.data_parallel_rank}")
        if abs(batch.ts - time.time()) > 600:
            fail(f"timestamp {batch.ts} is not now")
        for e in batch.events:
            if isinstance(e, BlockStored):
                if e.block_size != BLOCK or e.medium != "CPU" or e.lora_id is not None:
                    fail(f"BlockStored fields: {e}")
                if len(e.token_ids) != BLOCK * len(e.block_hashes) or not e.block_hashes:
                    fail(f"{len(e.token_ids)} tokens for {len(e.block_hashes)} blocks")
                parent = e.parent_block_hash
                if parent is not None and parent not in self.blocks:
                    fail(f"stored under parent {parent} that the cache does not hold")
                for i, h in enumerate(e.block_hashes):
                    if h in self.blocks:
                        fail(f"block {h} stored twice")
                    self.blocks[h] = (parent, tuple(e.token_ids[i * BLOCK:(i + 1) * BLOCK]))
                    parent = h
            elif isinstance(e, BlockRemoved):
                for h in e.block_hashes:
                    if h not in self.blocks:
                        fail(f"block {h} removed but never stored")
                    del self.blocks[h]
                    self.removed += 1
            else:
                self.blocks.clear()
                self.cleared += 1

    def find(self, parent, tokens):
        for h, (p, t) in self.blocks.items():
            if p == parent and t == tokens:
                return h
        return None


def drain(sock, view, topic, quiet_ms=400):
    """Applies everything that arrives until the socket is quiet for quiet_ms."""
    n = 0
    while sock.poll(quiet_ms):
        t, seq, payload = sock.recv_multipart()
        if t != topic:
            fail(f"topic {t!r}, expected {topic!r}")
        view.apply(int.from_bytes(seq, "big"), payload)
        n += 1
    return n


def replay(ctx, endpoint, start, view):
    """Asks the replay socket for every batch from `start` (DEALER, with REQ's delimiter)."""
    s = ctx.socket(zmq.DEALER)
    s.connect(endpoint)
    s.send_multipart([b"", start.to_bytes(8, "big")])
    got = 0
    while True:
        if not s.poll(5000):
            fail("the replay socket did not answer")
        frames = s.recv_multipart()
        if len(frames) != 3 or frames[0] != b"":
            fail(f"replay reply of {len(frames)} frames")
        seq = int.from_bytes(frames[1], "big", signed=True)
        if seq == -1:
            if frames[2] != b"":
                fail("the end marker carries a payload")
            break
        view.apply(seq, frames[2])
        got += 1
    # A malformed request gets the end marker, and the socket keeps serving.
    s.send_multipart([b"", b"xyz"])
    if not s.poll(5000):
        fail("no answer to a malformed replay request")
    frames = s.recv_multipart()
    if int.from_bytes(frames[1], "big", signed=True) != -1:
        fail("a malformed replay request got batches")
    s.close(0)
    return got


def server_blocks(base, model):
    return set(http(base, f"/prefix_cache?model={model}")["block_hashes"])


def check_equal(view, base, model, when):
    want = server_blocks(base, model)
    have = set(view.blocks)
    if want != have:
        fail(
            f"{when}: the events describe {len(have)} blocks, the server holds {len(want)} "
            f"({len(have - want)} only in the events, {len(want - have)} only in the server)"
        )
    print(f"ok {when}: {len(have)} blocks, same hashes as the server")


def prompts():
    """Five documents sharing a long preamble, each with several questions."""
    preamble = (
        "You are a careful assistant for a public library. Answer in one short sentence. "
        "The library opens at nine, closes at six, lends books for three weeks, and keeps "
        "a reading room on the second floor with maps of the river valley. "
    ) * 3
    docs = [
        "Document A is about the old mill by the river and the families who ran it. ",
        "Document B is about the railway that reached the valley in the last century. ",
        "Document C is about the orchard festival held every autumn in the square. ",
        "Document D is about the bridge that the flood of the spring carried away. ",
        "Document E is about the school that opened in the old customs house. ",
    ]
    out = []
    for q in ["When does it open?", "What is on the second floor?", "How long is a loan?"]:
        for d in docs:
            out.append(preamble + d * 4 + "Question: " + q)
    return out


def main():
    if sys.argv[1] == "--silent":
        base, pub = sys.argv[2], sys.argv[3]
        ctx = zmq.Context()
        sub = ctx.socket(zmq.SUB)
        sub.connect(pub)
        sub.setsockopt(zmq.SUBSCRIBE, b"")
        time.sleep(0.5)
        for p in prompts()[:3]:
            http(base, "/v1/completions", {"prompt": p, "max_tokens": 2, "temperature": 0})
        http(base, "/flush_cache", {})
        if sub.poll(1000):
            fail("events published by a server that stores no blocks")
        print("ok no events without prefix caching")
        return

    base, pub, rep, topic, model = sys.argv[1:6]
    topic = topic.encode()
    ctx = zmq.Context()
    sub = ctx.socket(zmq.SUB)
    sub.connect(pub)
    sub.setsockopt(zmq.SUBSCRIBE, topic)
    time.sleep(0.5)  # the subscription reaches the publisher before the first batch
    view = View()

    # Traffic that stores, reuses and (with the small cache) evicts blocks.
    tokens_of = {}
    for p in prompts():
        r = http(base, "/v1/completions", {"prompt": p, "max_tokens": 4, "temperature": 0})
        if r["choices"][0]["text"] is None:
            fail("no answer")
        tokens_of[p] = http(base, "/tokenize", {"prompt": p})["tokens"]
    # /prefix_cache publishes what is pending before it answers; then the socket goes quiet.
    server_blocks(base, model)
    n = drain(sub, view, topic)
    check_equal(view, base, model, f"after {len(tokens_of)} requests ({n} batches)")
    if view.removed == 0:
        fail("the traffic evicted nothing: the test needs a smaller cache")
    print(f"ok {view.removed} evictions seen as BlockRemoved")

    # The last prompt's full blocks were just stored: its chain is in the view, token by token.
    last = tokens_of[prompts()[-1]]
    parent = None
    for i in range(len(last) // BLOCK):
        h = view.find(parent, tuple(last[i * BLOCK:(i + 1) * BLOCK]))
        if h is None:
            # The last block may hold generated tokens past the prompt's end; the full prompt
            # blocks before it must all be there.
            if i < len(last) // BLOCK - 1:
                fail(f"block {i} of the last prompt is not in the events' view")
            break
        parent = h
    print("ok the last prompt's blocks chain from the root with its own tokens")

    # A late subscriber: live from now, the past through the replay socket.
    late = ctx.socket(zmq.SUB)
    late.connect(pub)
    late.setsockopt(zmq.SUBSCRIBE, topic)
    time.sleep(0.5)
    http(base, "/v1/completions", {"prompt": prompts()[0], "max_tokens": 2, "temperature": 0})
    server_blocks(base, model)
    drain(sub, view, topic)
    late_view = View()
    live = []
    while late.poll(400):
        _, seq, payload = late.recv_multipart()
        live.append((int.from_bytes(seq, "big"), payload))
    if not live:
        fail("the late subscriber got nothing live")
    got = replay(ctx, rep, 0, late_view)
    for seq, payload in live:
        if seq >= late_view.next_seq:
            late_view.apply(seq, payload)
    if late_view.blocks != view.blocks:
        fail("the late subscriber's view (replay + live) differs from the first one's")
    print(f"ok a late subscriber rebuilt the same cache from {got} replayed batches")

    # A flush removes every block no request holds: the view follows.
    flushed = http(base, "/flush_cache", {})["flushed_blocks"]
    server_blocks(base, model)
    drain(sub, view, topic)
    check_equal(view, base, model, f"after a flush of {flushed} blocks")
    if flushed == 0:
        fail("the flush dropped nothing")

    # Blocks again, then the model unloads: AllBlocksCleared.
    http(base, "/v1/completions", {"prompt": prompts()[1], "max_tokens": 2, "temperature": 0})
    server_blocks(base, model)
    drain(sub, view, topic)
    if not view.blocks:
        fail("no blocks stored after the flush")
    http(base, "/models/unload", {"model": model})
    deadline = time.time() + 20
    while view.cleared == 0 and time.time() < deadline:
        drain(sub, view, topic, quiet_ms=200)
    if view.cleared != 1 or view.blocks:
        fail(f"unloading the model cleared {view.cleared} times, {len(view.blocks)} blocks left")
    print("ok unloading the model published AllBlocksCleared")


if __name__ == "__main__":
    main()
