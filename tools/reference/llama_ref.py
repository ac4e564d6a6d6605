#!/usr/bin/env python3
"""Independent float64 reference of the llama-architecture forward pass.

Reads a GGUF file with gguf.GGUFReader, dequantizes every tensor with
gguf.quants.dequantize, and runs the transformer in float64 numpy, following
the llama architecture as llama.cpp evaluates it (RMSNorm, "normal" adjacent
pair RoPE, grouped-query causal attention, SwiGLU FFN, final norm, LM head).
Used only to check ridge's numbers; it is slow and simple on purpose.

Examples:
  python3 tools/reference/llama_ref.py --model M.gguf --ids 504,3575,282,4649,314 --top 10
  python3 tools/reference/llama_ref.py --model M.gguf --ids 504,3575 --greedy 16
  python3 tools/reference/llama_ref.py --model M.gguf --perplexity ids.json --ctx 512 --chunks 4
"""

import argparse
import json
import math
import sys
import time

import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize


def field_value(reader, key, default=None):
    f = reader.fields.get(key)
    if f is None:
        return default
    return f.contents()


class LlamaRef:
    def __init__(self, path):
        r = GGUFReader(path)
        arch = field_value(r, "general.architecture")
        if arch != "llama":
            raise ValueError(f"unsupported architecture {arch!r}")
        p = "llama."
        self.n_layer = int(field_value(r, p + "block_count"))
        self.d = int(field_value(r, p + "embedding_length"))
        self.n_head = int(field_value(r, p + "attention.head_count"))
        self.n_head_kv = int(field_value(r, p + "attention.head_count_kv", self.n_head))
        self.head_dim = self.d // self.n_head
        self.n_rot = int(field_value(r, p + "rope.dimension_count", self.head_dim))
        self.rope_base = float(field_value(r, p + "rope.freq_base", 10000.0))
        self.eps = float(field_value(r, p + "attention.layer_norm_rms_epsilon", 1e-5))
        self.add_bos = bool(field_value(r, "tokenizer.ggml.add_bos_token", False))
        self.bos_id = field_value(r, "tokenizer.ggml.bos_token_id")
        self.tokens = field_value(r, "tokenizer.ggml.tokens")

        # Dequantize everything to float64. GGUF shapes list ne0 (the
        # contiguous dimension) first; numpy hands us [rows, cols] with
        # cols = ne0, so a matrix is W[out, in] and y = W @ x.
        self.w = {}
        for t in r.tensors:
            a = dequantize(t.data, t.tensor_type).astype(np.float64)
            shape = [int(s) for s in reversed(list(t.shape))]  # [.., ne1, ne0]
            self.w[t.name] = a.reshape(shape)
        self.tok_embd = self.w["token_embd.weight"]  # [n_vocab, d]
        self.lm_head = self.w.get("output.weight", self.tok_embd)  # tied if absent
        self.n_vocab = self.tok_embd.shape[0]

        # RoPE inverse frequencies: base^(-2i/n_rot), i = 0 .. n_rot/2-1
        i = np.arange(self.n_rot // 2, dtype=np.float64)
        self.inv_freq = self.rope_base ** (-2.0 * i / self.n_rot)

    # ---- building blocks ----
    def rmsnorm(self, x, w):
        ms = np.mean(x * x, axis=-1, keepdims=True)
        return x / np.sqrt(ms + self.eps) * w

    def rope(self, x, pos):
        """x: [T, n_heads, head_dim]; rotate adjacent pairs (2i, 2i+1)."""
        ang = np.outer(pos.astype(np.float64), self.inv_freq)  # [T, n_rot/2]
        cos = np.cos(ang)[:, None, :]
        sin = np.sin(ang)[:, None, :]
        out = x.copy()
        x0 = x[..., 0:self.n_rot:2]
        x1 = x[..., 1:self.n_rot:2]
        out[..., 0:self.n_rot:2] = x0 * cos - x1 * sin
        out[..., 1:self.n_rot:2] = x0 * sin + x1 * cos
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

        x = self.tok_embd[ids]  # [T, d]
        for l in range(self.n_layer):
            b = f"blk.{l}."
            h = self.rmsnorm(x, self.w[b + "attn_norm.weight"])
            q = (h @ self.w[b + "attn_q.weight"].T).reshape(T, nh, hd)
            k = (h @ self.w[b + "attn_k.weight"].T).reshape(T, nkv, hd)
            v = (h @ self.w[b + "attn_v.weight"].T).reshape(T, nkv, hd)
            q = self.rope(q, pos)
            k = self.rope(k, pos)
            att = np.empty((T, nh, hd))
            for hh in range(nh):
                kv = hh // group  # query head hh uses kv head hh // group
                s = (q[:, hh, :] @ k[:, kv, :].T) * scale + causal  # [T, T]
                s -= s.max(axis=-1, keepdims=True)
                p = np.exp(s)
                p /= p.sum(axis=-1, keepdims=True)
                att[:, hh, :] = p @ v[:, kv, :]
            x = x + att.reshape(T, nh * hd) @ self.w[b + "attn_output.weight"].T

            h = self.rmsnorm(x, self.w[b + "ffn_norm.weight"])
            g = h @ self.w[b + "ffn_gate.weight"].T
            u = h @ self.w[b + "ffn_up.weight"].T
            act = g / (1.0 + np.exp(-g)) * u  # silu(gate) * up
            x = x + act @ self.w[b + "ffn_down.weight"].T
        return self.rmsnorm(x, self.w["output_norm.weight"])

    def logits(self, ids, rows=None):
        """Logits [T, n_vocab] (or only for the given row slice)."""
        h = self.hidden(ids)
        if rows is not None:
            h = h[rows]
        return h @ self.lm_head.T

    # ---- tasks ----
    def greedy(self, ids, n):
        ids = list(ids)
        out = []
        for _ in range(n):  # no KV cache: recompute the whole prefix, fine for a reference
            nxt = int(np.argmax(self.logits(ids, rows=slice(-1, None))[0]))
            out.append(nxt)
            ids.append(nxt)
        return out

    def perplexity(self, ids, ctx, max_chunks=None):
        """llama-perplexity protocol: non-overlapping ctx-sized chunks, each from an
        empty cache; BOS replaces the first token when the model adds BOS; logits at
        positions first .. ctx-2 (first = ctx//2) score tokens first+1 .. ctx-1."""
        n_chunks = len(ids) // ctx
        if max_chunks is not None and max_chunks >= 0:
            n_chunks = min(n_chunks, max_chunks)
        first = ctx // 2
        nll_sum, count = 0.0, 0
        for c in range(n_chunks):
            chunk = list(ids[c * ctx:(c + 1) * ctx])
            if self.add_bos:
                chunk[0] = int(self.bos_id)
            lg = self.logits(chunk, rows=slice(first, ctx - 1))  # [ctx-1-first, V]
            m = lg.max(axis=-1, keepdims=True)
            logz = (m + np.log(np.exp(lg - m).sum(axis=-1, keepdims=True)))[:, 0]
            tgt = np.asarray(chunk[first + 1:ctx])
            nll = logz - lg[np.arange(len(tgt)), tgt]
            nll_sum += float(nll.sum())
            count += len(tgt)
            print(f"chunk {c}: running ppl {math.exp(nll_sum / count):.6f}", file=sys.stderr)
        return math.exp(nll_sum / count), n_chunks, count

    def decode(self, ids):
        """GPT-2 byte-level decode via tokenizer.ggml.tokens (for sanity checks)."""
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
            raw += bytes(unmap.get(ch, 0x3F) for ch in self.tokens[i])
        return raw.decode("utf-8", errors="replace")


def top_k(row, k):
    idx = np.argsort(-row, kind="stable")[:k]
    return [[int(i), float(row[i])] for i in idx]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--ids", help="comma-separated prompt token ids")
    ap.add_argument("--top", type=int, default=10, help="top-k logits to print")
    ap.add_argument("--all-positions", action="store_true", help="print top-k at every position")
    ap.add_argument("--greedy", type=int, default=0, help="greedily generate N tokens after --ids")
    ap.add_argument("--decode", action="store_true", help="also print decoded text")
    ap.add_argument("--perplexity", metavar="IDS_JSON", help="JSON array of token ids")
    ap.add_argument("--ctx", type=int, default=512)
    ap.add_argument("--chunks", type=int, default=-1)
    a = ap.parse_args()

    t0 = time.time()
    m = LlamaRef(a.model)
    print(f"loaded in {time.time() - t0:.1f}s", file=sys.stderr)

    if a.perplexity:
        with open(a.perplexity) as f:
            ids = json.load(f)
        t0 = time.time()
        ppl, n, cnt = m.perplexity(ids, a.ctx, a.chunks)
        print(f"perplexity in {time.time() - t0:.1f}s", file=sys.stderr)
        print(json.dumps({"perplexity": ppl, "chunks": n, "tokens_scored": cnt}))
        return

    if not a.ids:
        ap.error("--ids or --perplexity required")
    ids = [int(s) for s in a.ids.split(",") if s.strip()]
    out = {"ids": ids}
    if a.greedy > 0:
        out["greedy"] = m.greedy(ids, a.greedy)
        if a.decode:
            out["greedy_text"] = m.decode(out["greedy"])
    else:
        lg = m.logits(ids) if a.all_positions else m.logits(ids, rows=slice(-1, None))
        if a.all_positions:
            out["top"] = [top_k(r, a.top) for r in lg]
        else:
            out["last_top"] = top_k(lg[0], a.top)
        if a.decode:
            out["prompt_text"] = m.decode(ids)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
