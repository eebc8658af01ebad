#!/usr/bin/python3
"""Compare the engine (`steermoe logits`, `steermoe tokenize`) with the committed reference of
steer-olmoe-tiny: per sequence the max |logit difference|, the argmax agreement and the max
KL(reference || engine) per position; and tokenization of the reference texts and of the
data/text files against HF `tokenizers`. A developer tool (not part of CI); the engine's own
test reads the same reference files.

  /usr/bin/python3 tools/train/check_engine.py --steermoe build/steermoe
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np


def log_softmax(x):
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steermoe", required=True)
    ap.add_argument("--model", default="models/steer-olmoe-tiny")
    ap.add_argument("--max-kl", type=float, default=1e-3)
    args = ap.parse_args()
    refdir = os.path.join(args.model, "reference")
    ref = json.load(open(os.path.join(refdir, "reference.json")))
    ok = True
    with tempfile.TemporaryDirectory() as td:
        for s in ref["sequences"]:
            out = os.path.join(td, "l.bin")
            subprocess.run([args.steermoe, "logits", "-m", args.model, "--tokens",
                            ",".join(map(str, s["tokens"])), "-o", out], check=True, capture_output=True)
            n = len(s["tokens"])
            eng = np.fromfile(out, dtype="<f4").reshape(n, -1)
            r = np.fromfile(os.path.join(refdir, s["logits_file"]), dtype="<f4").reshape(n, -1)
            lp, lq = log_softmax(r.astype(np.float64)), log_softmax(eng.astype(np.float64))
            kl = (np.exp(lp) * (lp - lq)).sum(-1)
            agree = float((eng.argmax(-1) == r.argmax(-1)).mean())
            tok = subprocess.run([args.steermoe, "tokenize", "-m", args.model, "--text", s["text"]],
                                 check=True, capture_output=True, text=True)
            tok_ok = json.loads(tok.stdout) == s["tokens"][1:]
            print(f"{s['source_doc']}: max|diff| {np.abs(eng - r).max():.4f}  argmax agreement {agree:.3f}  "
                  f"max KL {kl.max():.2e}  tokenizer {'ok' if tok_ok else 'DIFFERS'}")
            ok &= bool(kl.max() < args.max_kl) and tok_ok
    try:
        from tokenizers import Tokenizer
        hf = Tokenizer.from_file(os.path.join(args.model, "tokenizer.json"))
        for f in ("data/text/eval.txt", "data/text/heldout.txt"):
            t = subprocess.run([args.steermoe, "tokenize", "-m", args.model, "--file", f],
                               check=True, capture_output=True, text=True)
            same = json.loads(t.stdout) == hf.encode(open(f, encoding="utf-8").read()).ids
            print(f"{f}: tokenizer {'ok' if same else 'DIFFERS'}")
            ok &= same
    except ImportError:
        print("tokenizers not installed: data/text tokenization not checked")
    print("PASS" if ok else "FAIL")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
