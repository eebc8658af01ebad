#!/usr/bin/python3
"""Optional cross-check: the exported folder run by HF transformers' OlmoeForCausalLM (or
Qwen3ForCausalLM for the dense drafter; eager, float32) against this repository's PyTorch model
and the committed reference logits.

Needs `transformers` (tested with 4.46.3) importable, e.g. PYTHONPATH=/some/dir after
`pip install --target /some/dir --no-deps transformers==4.46.3 huggingface_hub==0.26.2 safetensors ...`.
Not part of any build or CI.
"""
import argparse
import json
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_io import load_exported  # noqa: E402


@torch.no_grad()
def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="models/steer-olmoe-tiny")
    args = ap.parse_args()
    from transformers import AutoModelForCausalLM
    hf = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32, attn_implementation="eager")
    hf.eval()
    ours = load_exported(args.model)
    ref = json.load(open(os.path.join(args.model, "reference", "reference.json")))
    worst = 0.0
    for s in ref["sequences"]:
        ids = torch.tensor([s["tokens"]])
        dense = ref["top_k"] == 0
        out = hf(ids) if dense else hf(ids, output_router_logits=True)
        a = out.logits[0].float().numpy()
        b = ours(ids)[0].numpy()
        r = np.fromfile(os.path.join(args.model, "reference", s["logits_file"]), dtype="<f4").reshape(a.shape)
        d1, d2 = np.abs(a - b).max(), np.abs(a - r).max()
        # router top-8 agreement (HF returns router logits per layer, [n, E])
        agree = dense or all(
            sorted(torch.topk(rl.float(), ref["top_k"], -1).indices[p].tolist()) == sorted(s["topk_experts"][l][p])
            for l, rl in enumerate(out.router_logits) for p in range(len(s["tokens"])))
        print(f"{s['source_doc']}: max|hf-ours| {d1:.2e}  max|hf-reference| {d2:.2e}  top-8 sets equal: {agree}")
        worst = max(worst, d1, d2)
    print("PASS" if worst < 1e-3 else "FAIL", f"worst {worst:.2e}")
    sys.exit(0 if worst < 1e-3 else 1)


if __name__ == "__main__":
    main()
