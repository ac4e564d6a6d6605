#!/usr/bin/env python3
"""Independent float64 reference of the Gemma 3 forward pass.

Reads a GGUF file with gguf.GGUFReader, dequantizes every tensor with
gguf.quants.dequantize, and runs the transformer in float64 numpy, following
the gemma3 architecture as llama.cpp evaluates it:

  x = token_embd[ids] * sqrt(d_model)
  per layer i (global when (i+1) % 6 == 0, else sliding-window):
    h = rmsnorm(x, attn_norm)
    q, k, v = h Wq, h Wk, h Wv             (head_dim = gemma3.attention.key_length)
    q = rmsnorm_per_head(q, attn_q_norm);  k = rmsnorm_per_head(k, attn_k_norm)
    q, k = rope_neox(q, k, base = rope.freq_base if global else 10000)
    a = softmax(q k^T / sqrt(head_dim) + mask) v
        mask: causal; sliding layers also hide keys j with i - j >= sliding_window
    x = x + rmsnorm(a Wo, post_attention_norm)
    h = rmsnorm(x, ffn_norm)
    x = x + rmsnorm((gelu_tanh(h Wgate) * (h Wup)) Wdown, post_ffw_norm)
  logits = rmsnorm(x, output_norm) token_embd^T   (tied head)

The GGUF converter stores Gemma's RMSNorm weights with the +1 already added
(Gemma computes x_normed * (1 + w)); `--norm-offset 1` adds another 1 to every
norm weight, which lets one check that claim against the perplexity it gives.
Used only to check ridge's numbers; slow and simple on purpose.

Examples:
  python3 tools/reference/gemma3_ref.py --model M.gguf --ids 2,818,5279,529,7001,563 --top 10
  python3 tools/reference/gemma3_ref.py --model M.gguf --ids 2,818,5279,529,7001,563 --greedy 8
  python3 tools/reference/gemma3_ref.py --model M.gguf --perplexity ids.json --ctx 512 --chunks 4
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

# llama.cpp hard-codes these for gemma3 (not in the GGUF metadata).
SWA_PATTERN = 6
SWA_ROPE_BASE = 10000.0


class Gemma3Ref:
    def __init__(self, path, norm_offset=0.0):
        r = GGUFReader(path)
        arch = field_value(r, "general.architecture")
        if arch != "gemma3":
            raise ValueError(f"unsupported architecture {arch!r}")
        p = "gemma3."
        self.n_layer = int(field_value(r, p + "block_count"))
        self.d = int(field_value(r, p + "embedding_length"))
        self.n_head = int(field_value(r, p + "attention.head_count"))
        self.n_head_kv = int(field_value(r, p + "attention.head_count_kv", self.n_head))
        self.head_dim = int(field_value(r, p + "attention.key_length", self.d // self.n_head))
        self.rope_base = float(field_value(r, p + "rope.freq_base", 10000.0))
        self.window = int(field_value(r, p + "attention.sliding_window"))
        self.eps = float(field_value(r, p + "attention.layer_norm_rms_epsilon", 1e-6))
        self.softcap = field_value(r, p + "final_logit_softcapping")
        self.add_bos = bool(field_value(r, "tokenizer.ggml.add_bos_token", False))
        self.bos_id = field_value(r, "tokenizer.ggml.bos_token_id")

        self.w = {}
        for t in r.tensors:
            a = dequantize(t.data, t.tensor_type).astype(np.float64)
            shape = [int(s) for s in reversed(list(t.shape))]
            a = a.reshape(shape)
            if t.name.endswith("norm.weight"):
                a = a + norm_offset
            self.w[t.name] = a
        self.tok_embd = self.w["token_embd.weight"]  # [n_vocab, d]
        self.n_vocab = self.tok_embd.shape[0]

    def is_global(self, layer):
        return (layer + 1) % SWA_PATTERN == 0

    def rmsnorm(self, x, w):
        ms = np.mean(x * x, axis=-1, keepdims=True)
        return x / np.sqrt(ms + self.eps) * w

    def rope_neox(self, x, pos, base):
        """x: [T, n_heads, head_dim]; rotate (x[i], x[i + head_dim/2])."""
        hd = self.head_dim
        half = hd // 2
        inv = base ** (-2.0 * np.arange(half, dtype=np.float64) / hd)
        ang = np.outer(pos.astype(np.float64), inv)
        cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
        x0, x1 = x[..., :half], x[..., half:]
        return np.concatenate([x0 * cos - x1 * sin, x0 * sin + x1 * cos], axis=-1)

    @staticmethod
    def gelu_tanh(x):
        return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))

    def hidden(self, ids):
        """Final normed hidden states [T, d] for a sequence from an empty cache."""
        ids = np.asarray(ids, dtype=np.int64)
        T = len(ids)
        pos = np.arange(T)
        hd, nh, nkv = self.head_dim, self.n_head, self.n_head_kv
        group = nh // nkv
        scale = 1.0 / math.sqrt(hd)
        dist = pos[:, None] - pos[None, :]  # query i, key j: i - j
        causal = np.where(dist >= 0, 0.0, -np.inf)
        sliding = np.where((dist >= 0) & (dist < self.window), 0.0, -np.inf)

        x = self.tok_embd[ids] * math.sqrt(self.d)
        for l in range(self.n_layer):
            b = f"blk.{l}."
            glob = self.is_global(l)
            h = self.rmsnorm(x, self.w[b + "attn_norm.weight"])
            q = (h @ self.w[b + "attn_q.weight"].T).reshape(T, nh, hd)
            k = (h @ self.w[b + "attn_k.weight"].T).reshape(T, nkv, hd)
            v = (h @ self.w[b + "attn_v.weight"].T).reshape(T, nkv, hd)
            q = self.rmsnorm(q, self.w[b + "attn_q_norm.weight"])
            k = self.rmsnorm(k, self.w[b + "attn_k_norm.weight"])
            base = self.rope_base if glob else SWA_ROPE_BASE
            q = self.rope_neox(q, pos, base)
            k = self.rope_neox(k, pos, base)
            mask = causal if glob else sliding
            kh = np.repeat(k, group, axis=1)  # [T, nh, hd]
            vh = np.repeat(v, group, axis=1)
            s = np.einsum("ihd,jhd->hij", q, kh) * scale + mask[None]
            s -= s.max(axis=-1, keepdims=True)
            pr = np.exp(s)
            pr /= pr.sum(axis=-1, keepdims=True)
            att = np.einsum("hij,jhd->ihd", pr, vh).reshape(T, nh * hd)
            o = att @ self.w[b + "attn_output.weight"].T
            x = x + self.rmsnorm(o, self.w[b + "post_attention_norm.weight"])

            h = self.rmsnorm(x, self.w[b + "ffn_norm.weight"])
            g = h @ self.w[b + "ffn_gate.weight"].T
            u = h @ self.w[b + "ffn_up.weight"].T
            f = (self.gelu_tanh(g) * u) @ self.w[b + "ffn_down.weight"].T
            x = x + self.rmsnorm(f, self.w[b + "post_ffw_norm.weight"])
        return self.rmsnorm(x, self.w["output_norm.weight"])

    def logits(self, ids, rows=None):
        h = self.hidden(ids)
        if rows is not None:
            h = h[rows]
        lg = h @ self.tok_embd.T
        if self.softcap:
            lg = float(self.softcap) * np.tanh(lg / float(self.softcap))
        return lg

    def greedy(self, ids, n):
        ids = list(ids)
        out = []
        for _ in range(n):
            nxt = int(np.argmax(self.logits(ids, rows=slice(-1, None))[0]))
            out.append(nxt)
            ids.append(nxt)
        return out

    def perplexity(self, ids, ctx, max_chunks=None):
        """llama-perplexity protocol (see llama_ref.py)."""
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


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--ids", help="comma-separated prompt token ids")
    ap.add_argument("--top", type=int, default=10, help="top-k logits to print")
    ap.add_argument("--greedy", type=int, default=0, help="greedily generate N tokens after --ids")
    ap.add_argument("--perplexity", metavar="IDS_JSON", help="JSON array of token ids")
    ap.add_argument("--ctx", type=int, default=512)
    ap.add_argument("--chunks", type=int, default=-1)
    ap.add_argument("--norm-offset", type=float, default=0.0,
                    help="add this to every norm weight (1 checks the converter's +1)")
    a = ap.parse_args()

    t0 = time.time()
    m = Gemma3Ref(a.model, a.norm_offset)
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
        out["greedy"] = m.greedy(ids, a.greedy)
    else:
        out["last_top"] = top_k(m.logits(ids, rows=slice(-1, None))[0], a.top)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
