"""Float64 reference embeddings: the final normed hidden states of `llama_ref.py` /
`gemma3_ref.py` (independent numpy forward passes over the dequantized weights), pooled by
mean and by last token and L2-normalised, for the texts of an embedding fixture; written into
the fixture as `mean_f64` / `last_f64` beside llama.cpp's vectors, with the cosine of each of
llama.cpp's vectors to its reference printed.

Usage: python3 tools/reference/embedding_ref.py {llama|gemma3} MODEL.gguf FIXTURE.json
(run by make_embedding_fixtures.sh; needs numpy and gguf).
"""

import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def main():
    arch, model, fixture = sys.argv[1:4]
    if arch == "gemma3":
        from gemma3_ref import Gemma3Ref as Ref
    else:
        from llama_ref import LlamaRef as Ref
    m = Ref(model)
    fx = json.load(open(fixture))
    for p in ("mean", "last"):
        fx[f"{p}_f64"] = []
    for i, ids in enumerate(fx["token_ids"]):
        h = m.hidden(ids)
        for p, v in (("mean", h.mean(axis=0)), ("last", h[-1])):
            v = v / np.linalg.norm(v)
            fx[f"{p}_f64"].append([float(f"{x:.7f}") for x in v])
            ll = np.array(fx[p][i])
            cos = float(v @ ll / np.linalg.norm(ll))
            print(f"{arch} text {i} ({len(ids)} tokens) {p}: cos(llama.cpp, f64) = {cos:.6f}")
    with open(fixture, "w") as f:
        json.dump(fx, f, separators=(",", ":"))
        f.write("\n")


if __name__ == "__main__":
    main()
