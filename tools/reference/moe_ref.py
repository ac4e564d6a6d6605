#!/usr/bin/env python3
"""Independent float64 reference of qwen3, qwen3moe and qwen2moe forward passes.

Reads a GGUF file with gguf.GGUFReader, dequantizes every tensor with
gguf.quants.dequantize and runs the model in float64 numpy, as llama.cpp's
graphs define these architectures:

    qwen3     NEOX RoPE; per-head RMSNorm of Q and K (attn_{q,k}_norm) before RoPE;
              head size from attention.key_length; SwiGLU FFN
    qwen3moe  qwen3's attention; a routed FFN: softmax over the router's E logits,
              the k largest, renormalised to sum to one, each chosen expert's SwiGLU
              (ffn_{gate,up,down}_exps, stacked [E, rows, cols]) weighted and summed
    qwen2moe  Q/K/V biases, NEOX RoPE; routed FFN as above but the k weights are not
              renormalised, plus a shared expert (ffn_*_shexp) scaled per token by
              sigmoid(h . ffn_gate_inp_shexp)
    gpt-oss   biases on Q/K/V/O; one sink logit per head in each softmax's denominator;
              a causal window of attention.sliding_window keys on the layers of the
              sliding pattern (every other one from layer 0 unless the file says);
              NEOX RoPE with YaRN when rope.scaling.type is yarn (llama.cpp's rope_yarn:
              correction dims from beta 32 / 1, the cos/sin scaled by 1 + 0.1 ln factor);
              post_attention_norm before the FFN; router with a bias, the k largest
              logits' softmax; per-expert biases; the clamped SwiGLU
              min(g, 7) * sigmoid(1.702 min(g, 7)) * (clamp(u, -7, 7) + 1)

Ties in the top-k go to the lower expert index. Used to check that ridge's f32
activations are exact on quantized files, where llama.cpp itself rounds its
activations to 8-bit blocks; slow and simple on purpose.

  python3 tools/reference/moe_ref.py --model M.gguf --perplexity ids.json --ctx 64 --chunks 8
"""

import argparse
import json
import math
import sys

import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize

from llama_ref import LlamaRef, field_value

ARCHES = ("qwen3", "qwen3moe", "qwen2moe", "gpt-oss")


class MoeRef(LlamaRef):
    def __init__(self, path):  # noqa: D107  (LlamaRef's own loader accepts only llama)
        r = GGUFReader(path)
        self.arch = field_value(r, "general.architecture")
        if self.arch not in ARCHES:
            raise ValueError(f"unsupported architecture {self.arch!r}")
        p = self.arch + "."
        self.n_layer = int(field_value(r, p + "block_count"))
        self.d = int(field_value(r, p + "embedding_length"))
        self.n_head = int(field_value(r, p + "attention.head_count"))
        self.n_head_kv = int(field_value(r, p + "attention.head_count_kv", self.n_head))
        self.head_dim = int(field_value(r, p + "attention.key_length", self.d // self.n_head))
        self.n_rot = int(field_value(r, p + "rope.dimension_count", self.head_dim))
        self.rope_base = float(field_value(r, p + "rope.freq_base", 10000.0))
        self.eps = float(field_value(r, p + "attention.layer_norm_rms_epsilon", 1e-6))
        self.n_expert = int(field_value(r, p + "expert_count", 0))
        self.n_used = int(field_value(r, p + "expert_used_count", 0))
        self.add_bos = bool(field_value(r, "tokenizer.ggml.add_bos_token", False))
        self.bos_id = field_value(r, "tokenizer.ggml.bos_token_id")
        self.tokens = field_value(r, "tokenizer.ggml.tokens")
        self.w = {}
        for t in r.tensors:
            a = dequantize(t.data, t.tensor_type).astype(np.float64)
            self.w[t.name] = a.reshape([int(s) for s in reversed(list(t.shape))])
        self.tok_embd = self.w["token_embd.weight"]
        self.lm_head = self.w.get("output.weight", self.tok_embd)
        self.n_vocab = self.tok_embd.shape[0]
        i = np.arange(self.n_rot // 2, dtype=np.float64)
        self.inv_freq = self.rope_base ** (-2.0 * i / self.n_rot)
        self.mscale = 1.0
        if field_value(r, p + "rope.scaling.type") == "yarn":
            factor = float(field_value(r, p + "rope.scaling.factor"))
            orig = float(field_value(r, p + "rope.scaling.original_context_length"))

            def corr(rot):
                return self.n_rot * math.log(orig / (rot * 2 * math.pi)) / (2 * math.log(self.rope_base))

            lo, hi = max(0.0, math.floor(corr(32.0))), min(self.n_rot - 1.0, math.ceil(corr(1.0)))
            ramp = 1.0 - np.clip((i - lo) / max(0.001, hi - lo), 0.0, 1.0)
            self.inv_freq = self.inv_freq / factor * (1.0 - ramp) + self.inv_freq * ramp
            self.mscale = 1.0 + 0.1 * math.log(factor)
        self.window = field_value(r, p + "attention.sliding_window")
        self.sliding = [self.arch == "gpt-oss" and l % 2 == 0 for l in range(self.n_layer)]
        if field_value(r, p + "attention.sliding_window_pattern") is not None:
            raise ValueError("attention.sliding_window_pattern: not in this reference")

    def rope(self, x, pos):
        """x: [T, heads, head_dim]; NEOX layout: rotate (i, i + n_rot/2)."""
        ang = np.outer(pos.astype(np.float64), self.inv_freq)
        cos = np.cos(ang)[:, None, :] * self.mscale
        sin = np.sin(ang)[:, None, :] * self.mscale
        half = self.n_rot // 2
        out = x.copy()
        x0, x1 = x[..., 0:half], x[..., half:self.n_rot]
        out[..., 0:half] = x0 * cos - x1 * sin
        out[..., half:self.n_rot] = x0 * sin + x1 * cos
        return out

    def proj(self, h, name):
        y = h @ self.w[name + ".weight"].T
        b = self.w.get(name + ".bias")
        return y if b is None else y + b

    @staticmethod
    def swiglu(h, gate, up, down):
        g, u = h @ gate.T, h @ up.T
        return (g / (1.0 + np.exp(-g)) * u) @ down.T

    def routed_oai(self, h, b):
        """gpt-oss's routed FFN: the k largest biased logits' softmax, biased experts."""
        logits = self.proj(h, b + "ffn_gate_inp")
        gate, up, down = (self.w[b + f"ffn_{n}_exps.weight"] for n in ("gate", "up", "down"))
        bg, bu, bd = (self.w[b + f"ffn_{n}_exps.bias"] for n in ("gate", "up", "down"))
        out = np.zeros_like(h)
        for t in range(h.shape[0]):
            top = np.argsort(-logits[t], kind="stable")[: self.n_used]
            wts = np.exp(logits[t, top] - logits[t, top].max())
            wts /= wts.sum()
            for e, wt in zip(top, wts):
                g = np.minimum(gate[e] @ h[t] + bg[e], 7.0)
                u = np.clip(up[e] @ h[t] + bu[e], -7.0, 7.0)
                act = g / (1.0 + np.exp(-1.702 * g)) * (u + 1.0)
                out[t] += wt * (down[e] @ act + bd[e])
        return out

    def routed(self, h, b):
        """The routed FFN (and shared expert) of rows h [T, d]."""
        if self.arch == "gpt-oss":
            return self.routed_oai(h, b)
        logits = h @ self.w[b + "ffn_gate_inp.weight"].T  # [T, E]
        p = np.exp(logits - logits.max(axis=-1, keepdims=True))
        p /= p.sum(axis=-1, keepdims=True)
        gate, up, down = (self.w[b + f"ffn_{n}_exps.weight"] for n in ("gate", "up", "down"))
        out = np.zeros_like(h)
        for t in range(h.shape[0]):
            top = np.argsort(-p[t], kind="stable")[: self.n_used]
            wts = p[t, top]
            if self.arch == "qwen3moe":
                wts = wts / max(wts.sum(), 6.103515625e-5)
            for e, wt in zip(top, wts):
                out[t] += wt * self.swiglu(h[t], gate[e], up[e], down[e])
        if b + "ffn_gate_inp_shexp.weight" in self.w:
            s = self.swiglu(h, *(self.w[b + f"ffn_{n}_shexp.weight"] for n in ("gate", "up", "down")))
            g = h @ self.w[b + "ffn_gate_inp_shexp.weight"].reshape(-1)
            out += (1.0 / (1.0 + np.exp(-g)))[:, None] * s
        return out

    def hidden(self, ids):
        ids = np.asarray(ids, dtype=np.int64)
        T = len(ids)
        pos = np.arange(T)
        hd, nh, nkv = self.head_dim, self.n_head, self.n_head_kv
        group = nh // nkv
        scale = 1.0 / math.sqrt(hd)
        causal = np.triu(np.full((T, T), -np.inf), k=1)
        windowed = causal.copy()
        if self.window is not None:
            windowed[pos[:, None] - pos[None, :] >= int(self.window)] = -np.inf
        x = self.tok_embd[ids]
        for l in range(self.n_layer):
            b = f"blk.{l}."
            h = self.rmsnorm(x, self.w[b + "attn_norm.weight"])
            q = self.proj(h, b + "attn_q").reshape(T, nh, hd)
            k = self.proj(h, b + "attn_k").reshape(T, nkv, hd)
            v = self.proj(h, b + "attn_v").reshape(T, nkv, hd)
            if b + "attn_q_norm.weight" in self.w:
                q = self.rmsnorm(q, self.w[b + "attn_q_norm.weight"])
                k = self.rmsnorm(k, self.w[b + "attn_k_norm.weight"])
            q, k = self.rope(q, pos), self.rope(k, pos)
            att = np.empty((T, nh, hd))
            mask = windowed if self.sliding[l] else causal
            sinks = self.w.get(b + "attn_sinks.weight")
            for hh in range(nh):
                kv = hh // group
                s = (q[:, hh, :] @ k[:, kv, :].T) * scale + mask
                m = s.max(axis=-1, keepdims=True)
                if sinks is not None:
                    m = np.maximum(m, sinks[hh])
                pr = np.exp(s - m)
                den = pr.sum(axis=-1, keepdims=True)
                if sinks is not None:
                    den = den + np.exp(sinks[hh] - m)
                att[:, hh, :] = (pr / den) @ v[:, kv, :]
            x = x + self.proj(att.reshape(T, nh * hd), b + "attn_output")
            norm = "post_attention_norm" if self.arch == "gpt-oss" else "ffn_norm"
            h = self.rmsnorm(x, self.w[b + norm + ".weight"])
            if self.n_expert > 0:
                x = x + self.routed(h, b)
            else:
                x = x + self.swiglu(h, *(self.w[b + f"ffn_{n}.weight"] for n in ("gate", "up", "down")))
        return self.rmsnorm(x, self.w["output_norm.weight"])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--perplexity", metavar="IDS_JSON", required=True, help="JSON array of token ids")
    ap.add_argument("--ctx", type=int, default=512)
    ap.add_argument("--chunks", type=int, default=-1)
    a = ap.parse_args()
    m = MoeRef(a.model)
    ids = json.load(open(a.perplexity))
    running = []
    n_chunks = len(ids) // a.ctx if a.chunks < 0 else min(a.chunks, len(ids) // a.ctx)
    # Running perplexity after every chunk, as llama-perplexity prints it.
    for c in range(1, n_chunks + 1):
        ppl, _, _ = m.perplexity(ids[: c * a.ctx], a.ctx, c)
        running.append(ppl)
    print(json.dumps({"perplexity_running": running, "perplexity": running[-1]}))


if __name__ == "__main__":
    sys.exit(main())
