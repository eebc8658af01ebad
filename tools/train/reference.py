#!/usr/bin/python3
"""Dump reference logits of the exported model for the engine's equivalence test.

Loads <model>/model.safetensors (BF16), upcasts to float32 and runs the PyTorch model in
float32 (eager) on three short sequences cut from the evaluation split (one Python code, one
documentation, one KJV snippet). Each sequence is tokens = [0 (<|endoftext|>)] + encode(text).

Writes <model>/reference/:
  reference.json   per sequence: text, tokens, logits file, top-8 experts per layer and
                   position (descending router probability), their probabilities, and the gap
                   between the 8th and 9th probability (a tie-sensitivity hint)
  seqN.logits.bin  float32 little-endian [n][vocab]; row p = logits after tokens[0..p]
"""
import argparse
import json
import os
import sys

import numpy as np
import torch
from tokenizers import Tokenizer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_io import load_exported  # noqa: E402

MAX_TOKENS = 24


def pick_texts(workdir, tok, sources):
    docs = [json.loads(l) for l in open(os.path.join(workdir, "eval.jsonl"), encoding="utf-8")]
    out = []
    for src in sources:
        doc = next(d for d in docs if d["id"].startswith(src))
        lines = doc["text"].split("\n")
        # skip the first lines (licence headers, titles); start at a non-empty line
        # start at the first prose/code line after the first lines (licence headers, titles,
        # directives): long enough, not a comment or directive, no e-mail address
        start = min(len(lines) - 1, 6)
        while start < len(lines) - 1 and (len(lines[start].strip()) < 30 or "@" in lines[start]
                                          or lines[start].lstrip().startswith(("#", "..", "-", "="))):
            start += 1
        text = "\n".join(lines[start:start + 6])
        ids = tok.encode(text).ids
        while len(ids) > MAX_TOKENS - 1:
            text = text[:-1]
            ids = tok.encode(text).ids
        out.append({"source_doc": doc["id"], "text": text, "tokens": [0] + ids})
    return out


@torch.no_grad()
def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--workdir", default="build-train")
    ap.add_argument("--model", default="models/steer-olmoe-tiny")
    ap.add_argument("--sources", default="code:,docs:,bible:",
                    help="comma-separated document-id prefixes: one sequence from the first eval document of each")
    args = ap.parse_args()
    torch.set_num_threads(1)
    tok = Tokenizer.from_file(os.path.join(args.model, "tokenizer.json"))
    model = load_exported(args.model)
    seqs = pick_texts(args.workdir, tok, [p for p in args.sources.split(",") if p])
    refdir = os.path.join(args.model, "reference")
    os.makedirs(refdir, exist_ok=True)
    k = model.cfg.num_experts_per_tok                   # 0 for the dense drafter
    for i, s in enumerate(seqs):
        ids = torch.tensor([s["tokens"]], dtype=torch.long)
        logits, rlog, _, _ = model(ids, return_aux=True)
        logits = logits[0].float().numpy().astype("<f4")
        fname = f"seq{i}.logits.bin"
        logits.tofile(os.path.join(refdir, fname))
        s["logits_file"] = fname
        s["n"] = int(logits.shape[0])
        s["argmax"] = [int(a) for a in logits.argmax(-1)]
        experts, probs, gaps = [], [], []
        for rl in rlog:                                  # [n, E] fp32 router logits
            p = torch.softmax(rl, -1)
            top = torch.topk(p, k + 1, dim=-1)
            experts.append(top.indices[:, :k].tolist())
            probs.append([[round(float(v), 7) for v in row] for row in top.values[:, :k]])
            gaps.append([round(float(a - b), 7) for a, b in zip(top.values[:, k - 1], top.values[:, k])])
        s["topk_experts"] = experts                      # [layer][position][k]
        s["topk_probs"] = probs
        s["gap_k_k1"] = gaps
    meta = {"model": os.path.basename(os.path.normpath(args.model)), "dtype": "float32",
            "weights": "model.safetensors BF16 upcast to float32", "vocab_size": model.cfg.vocab_size,
            "layers": model.cfg.num_hidden_layers, "top_k": k,
            "logits_layout": "float32 little-endian [n][vocab_size]; row p = logits after tokens[0..p]",
            "topk_layout": "topk_experts[layer][position] = expert ids by descending router probability",
            "torch": str(torch.__version__), "sequences": seqs}
    with open(os.path.join(refdir, "reference.json"), "w") as fh:
        json.dump(meta, fh, indent=1)
        fh.write("\n")
    for s in seqs:
        print(s["source_doc"], s["n"], "tokens", repr(s["text"][:60]))


if __name__ == "__main__":
    main()
