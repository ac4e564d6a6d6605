#!/usr/bin/env python3
"""Independent float64 reference of the Qwen2 (Qwen2, Qwen2.5) forward pass.

Reads a GGUF file with gguf.GGUFReader, dequantizes every tensor with
gguf.quants.dequantize, and runs the transformer in float64 numpy, following
the qwen2 architecture as llama.cpp evaluates it:

  x = token_embd[ids]
  per layer:
    h = rmsnorm(x, attn_norm)
    q, k, v = h Wq + bq, h Wk + bk, h Wv + bv     (biases on all three)
    q, k = rope_neox(q, k, base = qwen2.rope.freq_base)
        (NEOX layout: element i turns with element i + head_dim/2)
    a = softmax(q k^T / sqrt(head_dim) + causal mask) v   (grouped-query heads)
    x = x + a Wo
    h = rmsnorm(x, ffn_norm)
    x = x + (silu(h Wgate) * (h Wup)) Wdown
  logits = rmsnorm(x, output_norm) output^T   (token_embd^T when output.weight is absent)

The dequantized weights are kept as float32 (every dequantized value is an
exact float32) and widened to float64 inside each product, so all arithmetic
is float64 while a 1.5B model fits in ~7 GB. Used only to check ridge's
numbers; slow and simple on purpose.

Examples:
  python3 tools/reference/qwen2_ref.py --model M.gguf --ids 785,6722,315,9625,374 --top 10
  python3 tools/reference/qwen2_ref.py --model M.gguf --ids 785,6722,315,9625,374 --greedy 8
  python3 tools/reference/qwen2_ref.py --model M.gguf --perplexity ids.json --ctx 512 --chunks 4
"""

import argparse
import json
import math
import os
import sys
import time

import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from llama_ref import field_value, top_k  # noqa: E402


def mm(h, w, rows=8192):
    """h [T, in] (float64) times w [out, in]^T, widening w to float64 a block of rows at a
    time so no float64 copy of a whole large matrix is ever made."""
    out = np.empty((h.shape[0], w.shape[0]), dtype=np.float64)
    for r in range(0, w.shape[0], rows):
        out[:, r:r + rows] = h @ w[r:r + rows].astype(np.float64).T
    return out


class Qwen2Ref:
    def __init__(self, path):
        r = GGUFReader(path)
        arch = field_value(r, "general.architecture")
        if arch != "qwen2":
            raise ValueError(f"unsupported architecture {arch!r}")
        p = "qwen2."
        self.n_layer = int(field_value(r, p + "block_count"))
        self.d = int(field_value(r, p + "embedding_length"))
        self.n_head = int(field_value(r, p + "attention.head_count"))
        self.n_head_kv = int(field_value(r, p + "attention.head_count_kv", self.n_head))
        self.head_dim = self.d // self.n_head
        self.n_rot = int(field_value(r, p + "rope.dimension_count", self.head_dim))
        self.rope_base = float(field_value(r, p + "rope.freq_base", 10000.0))
        self.eps = float(field_value(r, p + "attention.layer_norm_rms_epsilon", 1e-6))
        self.add_bos = bool(field_value(r, "tokenizer.ggml.add_bos_token", False))
        self.bos_id = field_value(r, "tokenizer.ggml.bos_token_id")
        self.tokens = field_value(r, "tokenizer.ggml.tokens")

        # [rows, cols] with cols = ne0 (the contiguous dimension): W[out, in], y = W @ x.
        self.w = {}
        for t in r.tensors:
            a = dequantize(t.data, t.tensor_type).astype(np.float32, copy=False)
            shape = [int(s) for s in reversed(list(t.shape))]
            self.w[t.name] = a.reshape(shape)
        self.tok_embd = self.w["token_embd.weight"]
        self.lm_head = self.w.get("output.weight", self.tok_embd)
        self.n_vocab = self.tok_embd.shape[0]

        i = np.arange(self.n_rot // 2, dtype=np.float64)
        self.inv_freq = self.rope_base ** (-2.0 * i / self.n_rot)

    def vec(self, name):
        return self.w[name].astype(np.float64)

    def rmsnorm(self, x, w):
        ms = np.mean(x * x, axis=-1, keepdims=True)
        return x / np.sqrt(ms + self.eps) * w

    def rope(self, x, pos):
        """x: [T, n_heads, head_dim]; NEOX layout: rotate (i, i + n_rot/2)."""
        ang = np.outer(pos.astype(np.float64), self.inv_freq)
        cos = np.cos(ang)[:, None, :]
        sin = np.sin(ang)[:, None, :]
        half = self.n_rot // 2
        out = x.copy()
        x0 = x[..., 0:half]
        x1 = x[..., half:self.n_rot]
        out[..., 0:half] = x0 * cos - x1 * sin
        out[..., half:self.n_rot] = x0 * sin + x1 * cos
        return out

    def hidden(self, ids):
        """Final normed hidden states [T, d] for a sequence from an empty cache."""
        ids = np.asarray(ids, dtype=np.int64)
        T = len(ids)
        pos = np.arange(T)
        hd, nh, nkv = self.head_dim, self.n_head, self.n_head_kv
        group = nh // nkv
        scale = 1.0 / math.sqrt(hd)
        causal = np.triu(np.full((T, T), -np.inf), k=1)

        x = self.tok_embd[ids].astype(np.float64)
        for l in range(self.n_layer):
            b = f"blk.{l}."
            h = self.rmsnorm(x, self.vec(b + "attn_norm.weight"))
            q = (mm(h, self.w[b + "attn_q.weight"]) + self.vec(b + "attn_q.bias")).reshape(T, nh, hd)
            k = (mm(h, self.w[b + "attn_k.weight"]) + self.vec(b + "attn_k.bias")).reshape(T, nkv, hd)
            v = (mm(h, self.w[b + "attn_v.weight"]) + self.vec(b + "attn_v.bias")).reshape(T, nkv, hd)
            q = self.rope(q, pos)
            k = self.rope(k, pos)
            att = np.empty((T, nh, hd))
            for hh in range(nh):
                kv = hh // group
                s = (q[:, hh, :] @ k[:, kv, :].T) * scale + causal
                s -= s.max(axis=-1, keepdims=True)
                p = np.exp(s)
                p /= p.sum(axis=-1, keepdims=True)
                att[:, hh, :] = p @ v[:, kv, :]
            x = x + mm(att.reshape(T, nh * hd), self.w[b + "attn_output.weight"])

            h = self.rmsnorm(x, self.vec(b + "ffn_norm.weight"))
            g = mm(h, self.w[b + "ffn_gate.weight"])
            u = mm(h, self.w[b + "ffn_up.weight"])
            x = x + mm(g / (1.0 + np.exp(-g)) * u, self.w[b + "ffn_down.weight"])
        return self.rmsnorm(x, self.vec("output_norm.weight"))

    def logits(self, ids, rows=None):
        h = self.hidden(ids)
        if rows is not None:
            h = h[rows]
        return mm(h, self.lm_head)

    def greedy(self, ids, n, stop=()):
        ids = list(ids)
        out = []
        for _ in range(n):  # no KV cache: recompute the whole prefix, fine for a reference
            nxt = int(np.argmax(self.logits(ids, rows=slice(-1, None))[0]))
            out.append(nxt)
            ids.append(nxt)
            if nxt in stop:
                break
        return out

    def perplexity(self, ids, ctx, max_chunks=None):
        """llama-perplexity's protocol: non-overlapping ctx-sized chunks, each from an empty
        cache; BOS replaces the first token when the model adds BOS (qwen2 does not); logits
        at positions ctx/2 .. ctx-2 score tokens ctx/2+1 .. ctx-1."""
        n_chunks = len(ids) // ctx
        if max_chunks is not None and max_chunks >= 0:
            n_chunks = min(n_chunks, max_chunks)
        first = ctx // 2
        nll_sum, count, running = 0.0, 0, []
        for c in range(n_chunks):
            chunk = list(ids[c * ctx:(c + 1) * ctx])
            if self.add_bos:
                chunk[0] = int(self.bos_id)
            lg = self.logits(chunk, rows=slice(first, ctx - 1))
            m = lg.max(axis=-1, keepdims=True)
            logz = (m + np.log(np.exp(lg - m).sum(axis=-1, keepdims=True)))[:, 0]
            tgt = np.asarray(chunk[first + 1:ctx])
            nll = logz - lg[np.arange(len(tgt)), tgt]
            nll_sum += float(nll.sum())
            count += len(tgt)
            running.append(math.exp(nll_sum / count))
            print(f"chunk {c}: running ppl {running[-1]:.6f}", file=sys.stderr)
        return math.exp(nll_sum / count), n_chunks, count, running

    def decode(self, ids):
        """GPT-2 byte-level decode via tokenizer.ggml.tokens (control tokens as written)."""
        bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
        cs = bs[:]
        n = 0
        for b in range(256):
            if b not in bs:
                bs.append(b)
                cs.append(256 + n)
                n += 1
        unmap = {chr(c): b for b, c in zip(bs, cs)}
        raw = bytearray()
        for i in ids:
            t = self.tokens[i]
            if t.startswith("<|") and t.endswith("|>"):
                raw += t.encode()
            else:
                raw += bytes(unmap.get(ch, 0x3F) for ch in t)
        return raw.decode("utf-8", errors="replace")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--ids", help="comma-separated prompt token ids")
    ap.add_argument("--top", type=int, default=10, help="top-k logits to print")
    ap.add_argument("--greedy", type=int, default=0, help="greedily generate N tokens after --ids")
    ap.add_argument("--stop", default="", help="comma-separated ids that end --greedy early")
    ap.add_argument("--decode", action="store_true", help="also print decoded text")
    ap.add_argument("--perplexity", metavar="IDS_JSON", help="JSON array of token ids")
    ap.add_argument("--ctx", type=int, default=512)
    ap.add_argument("--chunks", type=int, default=-1)
    a = ap.parse_args()

    t0 = time.time()
    m = Qwen2Ref(a.model)
    print(f"loaded in {time.time() - t0:.1f}s", file=sys.stderr)

    if a.perplexity:
        with open(a.perplexity) as f:
            ids = json.load(f)
        t0 = time.time()
        ppl, n, cnt, running = m.perplexity(ids, a.ctx, a.chunks)
        print(f"perplexity in {time.time() - t0:.1f}s", file=sys.stderr)
        print(json.dumps({"perplexity": ppl, "chunks": n, "tokens_scored": cnt, "running": running}))
        return

    if not a.ids:
        ap.error("--ids or --perplexity required")
    ids = [int(s) for s in a.ids.split(",") if s.strip()]
    out = {"ids": ids}
    if a.greedy > 0:
        stop = {int(s) for s in a.stop.split(",") if s.strip()}
        out["greedy"] = m.greedy(ids, a.greedy, stop)
        if a.decode:
            out["greedy_text"] = m.decode(out["greedy"])
    else:
        lg = m.logits(ids, rows=slice(-1, None))
        out["last_top"] = top_k(lg[0], a.top)
        if a.decode:
            out["prompt_text"] = m.decode(ids)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
