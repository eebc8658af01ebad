#!/usr/bin/python3
"""Reference pre-gate scores of the shipped model, for the engine's pre-gate test.

The pre-gate ranking of MoE layer l (docs/policy-contract.md) comes from router l applied to the
MoE input of layer l-1: the post_attention_layernorm output that layer l-1's own router and
experts read. This script computes those scores with the PyTorch model of tools/train/model.py
(float32 on the BF16 weights upcast, as reference.py), for the first PREFIX tokens of each
sequence already listed in <model>/reference/reference.json (so it needs neither the training
data nor the tokenizers package).

Writes <model>/reference/:
  pregate.json        per sequence: tokens, the .bin file, the largest |score|
  seqN.pregate.bin    float32 little-endian [n][layers][experts], the engine's RoutingRecord
                      layout: row l = router l on the MoE input of layer l-1 (router logits);
                      row 0 is zero (layer 0 has no pre-gate)

As a self-check it also compares its logits with the committed seqN.logits.bin (same model and
arithmetic; only the batch shape differs, so the difference is rounding, ~1e-5) and records it.

Run from the repository root: /usr/bin/python3 tools/train/pregate_reference.py
"""
import argparse
import json
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_io import load_exported  # noqa: E402

PREFIX = 16   # tokens per sequence: 3 x 16 x 8 layers x 64 experts floats = 96 KiB in all


@torch.no_grad()
def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="models/steer-olmoe-tiny")
    args = ap.parse_args()
    torch.set_num_threads(1)
    refdir = os.path.join(args.model, "reference")
    with open(os.path.join(refdir, "reference.json")) as fh:
        ref = json.load(fh)
    model = load_exported(args.model)
    cfg = model.cfg
    L, E, V = cfg.num_hidden_layers, cfg.num_experts, cfg.vocab_size
    out = []
    for i, seq in enumerate(ref["sequences"]):
        tokens = seq["tokens"][:PREFIX]
        ids = torch.tensor([tokens], dtype=torch.long)
        logits, _, _, moe_inputs = model(ids, return_aux=True)
        # self-check against the committed reference logits (rows 0..n-1 of a causal model
        # depend only on tokens 0..n-1)
        want = np.fromfile(os.path.join(refdir, seq["logits_file"]), dtype="<f4").reshape(-1, V)
        logit_diff = float(np.abs(logits[0].float().numpy() - want[: len(tokens)]).max())
        n = len(tokens)
        pre = np.zeros((n, L, E), dtype=np.float32)
        for l in range(1, L):
            b = moe_inputs[l - 1].reshape(n, -1)                       # [n, H] MoE input of l-1
            pre[:, l, :] = F.linear(b.float(), model.layers[l].mlp.gate.weight.float()).numpy()
        fname = f"seq{i}.pregate.bin"
        pre.astype("<f4").tofile(os.path.join(refdir, fname))
        out.append({"source_doc": seq["source_doc"], "tokens": tokens, "n": n, "pregate_file": fname,
                    "max_abs_pregate": float(np.abs(pre).max()),
                    "self_check_max_logit_diff": logit_diff})
        print(f"{seq['source_doc']}: {n} tokens, max |pregate| {np.abs(pre).max():.4g}, "
              f"logits vs reference.json's {logit_diff:.3g}")
    meta = {"model": os.path.basename(os.path.normpath(args.model)), "dtype": "float32",
            "weights": "model.safetensors BF16 upcast to float32", "layers": L, "experts": E,
            "pregate_layout": "float32 little-endian [n][layers][experts]; row l = router l applied "
                              "to the MoE input (post_attention_layernorm output) of layer l-1, "
                              "router logits; row 0 zero",
            "torch": torch.__version__, "sequences": out}
    with open(os.path.join(refdir, "pregate.json"), "w") as fh:
        json.dump(meta, fh, indent=1)
        fh.write("\n")


if __name__ == "__main__":
    main()
