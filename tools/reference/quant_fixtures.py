#!/usr/bin/env python3
"""Fixtures for ridge-kernels' dequantization tests of the Q5_0, Q5_1, MXFP4, k-quant (Q2_K..Q6_K)
IQ4_NL/IQ4_XS, lattice (IQ1_S..IQ3_S) and ternary (TQ1_0, TQ2_0) block formats.

For each format: a few blocks of random bytes (the f16 scale fields replaced by random finite
values, and MXFP4's e8m0 scale byte drawn from 96..=160, so no block decodes to inf/NaN),
dequantized by the `gguf` Python package
(`gguf.quants.dequantize`), the independent reference. Writes, per format,

    crates/ridge-kernels/tests/data/<fmt>.blocks   the raw block bytes
    crates/ridge-kernels/tests/data/<fmt>.f32      the expected values, little-endian f32

Run from the repository root: python3 tools/reference/quant_fixtures.py
Requires only numpy and gguf (a gguf new enough to know MXFP4). Deterministic (fixed seed).
"""

import os

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf.constants import GGML_QUANT_SIZES
from gguf.quants import dequantize

OUT = "crates/ridge-kernels/tests/data"

# format -> (blocks, byte offsets of its f16 scale fields)
FORMATS = {
    "q5_0": (T.Q5_0, 8, [0]),
    "q4_k": (T.Q4_K, 3, [0, 2]),
    "q5_k": (T.Q5_K, 3, [0, 2]),
    "q6_k": (T.Q6_K, 3, [208]),
    # Appended last so the fixtures above keep their bytes (one random stream for all).
    "q5_1": (T.Q5_1, 8, [0, 2]),
    "mxfp4": (T.MXFP4, 8, []),
    "q2_k": (T.Q2_K, 3, [80, 82]),
    "q3_k": (T.Q3_K, 3, [108]),
    "iq4_nl": (T.IQ4_NL, 8, [0]),
    "iq4_xs": (T.IQ4_XS, 3, [0]),
    "iq2_xxs": (T.IQ2_XXS, 3, [0]),
    "iq2_xs": (T.IQ2_XS, 3, [0]),
    "iq2_s": (T.IQ2_S, 3, [0]),
    "iq3_xxs": (T.IQ3_XXS, 3, [0]),
    "iq3_s": (T.IQ3_S, 3, [0]),
    "iq1_s": (T.IQ1_S, 3, [0]),
    "iq1_m": (T.IQ1_M, 3, []),
    "tq1_0": (T.TQ1_0, 3, [52]),
    "tq2_0": (T.TQ2_0, 3, [64]),
}

# IQ1_M spreads its f16 scale over the top nibbles of the four u16 words at bytes 48..56.
SPREAD_F16 = {"iq1_m": 48}

# format -> byte offset of an e8m0 scale (a power of two: 2^(e - 127))
E8M0_FIELDS = {"mxfp4": 0}


def main():
    rng = np.random.default_rng(20240607)
    os.makedirs(OUT, exist_ok=True)
    for name, (qtype, n_blocks, f16_fields) in FORMATS.items():
        block_size, type_size = GGML_QUANT_SIZES[qtype]
        raw = rng.integers(0, 256, size=(n_blocks, type_size), dtype=np.uint8)
        for off in f16_fields:
            d = rng.uniform(-2.0, 2.0, size=n_blocks).astype(np.float16)
            raw[:, off : off + 2] = d.view(np.uint8).reshape(n_blocks, 2)
        if name in SPREAD_F16:
            o = SPREAD_F16[name]
            d = rng.uniform(-2.0, 2.0, size=n_blocks).astype(np.float16).view(np.uint16)
            for k in range(4):
                w = raw[:, o + 2 * k : o + 2 * k + 2].copy().view(np.uint16).reshape(n_blocks)
                w = (w & 0x0FFF) | (((d >> (4 * k)) & 0xF) << 12).astype(np.uint16)
                raw[:, o + 2 * k : o + 2 * k + 2] = w.view(np.uint8).reshape(n_blocks, 2)
        if name in E8M0_FIELDS:
            raw[:, E8M0_FIELDS[name]] = rng.integers(96, 161, size=n_blocks, dtype=np.uint8)
        vals = dequantize(raw.reshape(-1), qtype).astype("<f4")
        assert vals.size == n_blocks * block_size and np.isfinite(vals).all()
        raw.tofile(os.path.join(OUT, f"{name}.blocks"))
        vals.tofile(os.path.join(OUT, f"{name}.f32"))
        print(f"{name}: {n_blocks} blocks, {raw.size} bytes, {vals.size} values")


if __name__ == "__main__":
    main()
