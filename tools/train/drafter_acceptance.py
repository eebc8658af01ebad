#!/usr/bin/python3
"""Acceptance of the drafter against the target under greedy decoding, on the evaluation text.

Prompts are --prompts windows of --prompt-len tokens cut evenly from the evaluation text; the
target continues each greedily for --gen tokens (its own text, as speculative decoding sees it).
Under greedy verification a drafted token is accepted exactly when it equals the target's
greedy token at that position given the same prefix, so one teacher-forced drafter pass over
the target's continuation gives the match indicator m_t for every position, and speculative
decoding with draft length k is simulated exactly from it: a block starting at t accepts the
run of matches from t (at most k), then the target adds one token; the next block starts after.

Reported: the per-token acceptance rate alpha = mean(m_t), and per k the mean tokens committed
per target verification ((accepted + 1) per block) and the drafted-token acceptance
(accepted / k per block). Also the top-1 agreement of the two models on the evaluation text
itself (teacher-forced on real text rather than on the target's output).

Both models run in PyTorch from their exported folders (BF16 weights upcast to float32).
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
def greedy(model, prompt, n):
    seq = prompt.clone()
    for _ in range(n):
        nxt = model(seq)[:, -1].argmax(-1, keepdim=True)
        seq = torch.cat([seq, nxt], dim=1)
    return seq


def simulate(match, k):
    """blocks over one sequence's match indicators -> (blocks, accepted, committed)"""
    t, blocks, acc, com = 0, 0, 0, 0
    n = len(match)
    while t < n:
        a = 0
        while a < k and t + a < n and match[t + a]:
            a += 1
        blocks += 1
        acc += a
        step = min(a + 1, n - t)
        com += step
        t += step
    return blocks, acc, com


@torch.no_grad()
def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default="models/steer-olmoe-small")
    ap.add_argument("--drafter", default="models/steer-drafter-small")
    ap.add_argument("--text", default="data/text-small/eval.txt")
    ap.add_argument("--prompts", type=int, default=48)
    ap.add_argument("--prompt-len", type=int, default=64)
    ap.add_argument("--gen", type=int, default=64)
    ap.add_argument("--k", type=int, nargs="+", default=[1, 2, 4, 8])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    from tokenizers import Tokenizer
    tok_t = open(os.path.join(args.target, "tokenizer.json")).read()
    tok_d = open(os.path.join(args.drafter, "tokenizer.json")).read()
    if tok_t != tok_d:
        sys.exit("drafter_acceptance: the drafter's tokenizer.json differs from the target's")
    tok = Tokenizer.from_file(os.path.join(args.target, "tokenizer.json"))
    with open(args.text, encoding="utf-8") as fh:
        ids = np.asarray(tok.encode(fh.read()).ids, dtype=np.int64)
    target, drafter = load_exported(args.target), load_exported(args.drafter)
    span = args.prompt_len + args.gen
    starts = np.linspace(0, len(ids) - span - 1, args.prompts).astype(np.int64)
    matches, agree_text, n_text = [], 0, 0
    for s in starts:
        prompt = torch.from_numpy(ids[s:s + args.prompt_len]).unsqueeze(0)
        seq = greedy(target, prompt, args.gen)
        d = drafter(seq[:, :-1]).argmax(-1)                     # drafter's guess for positions 1..
        m = (d[0, args.prompt_len - 1:] == seq[0, args.prompt_len:]).numpy()
        matches.append(m)
        real = torch.from_numpy(ids[s:s + span]).unsqueeze(0)
        a = target(real).argmax(-1) == drafter(real).argmax(-1)
        agree_text += int(a.sum()); n_text += a.numel()
    alpha = float(np.mean(np.concatenate(matches)))
    per_k = {}
    for k in args.k:
        b = acc = com = 0
        for m in matches:
            bb, aa, cc = simulate(list(m), k)
            b += bb; acc += aa; com += cc
        per_k[str(k)] = {"blocks": b, "tokens_per_verification": com / b, "drafted_accepted": acc / (b * k)}
    res = {"schema": "steermoe.drafter_acceptance/1", "target": args.target, "drafter": args.drafter,
           "text": args.text, "prompts": int(args.prompts), "prompt_len": args.prompt_len, "gen": args.gen,
           "alpha_greedy": alpha, "top1_agreement_on_text": agree_text / n_text, "per_k": per_k}
    if args.out:
        with open(args.out + ".tmp", "w") as fh:
            json.dump(res, fh, indent=1)
            fh.write("\n")
        os.replace(args.out + ".tmp", args.out)
    print(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
