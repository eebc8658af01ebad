#!/usr/bin/python3
"""Perplexity and caching-relevant routing statistics of the exported model on the eval split.

By default the token stream is data/text/eval.txt tokenized as a whole, cut into windows as
`steermoe perplexity --window 256` does (so the perplexity is comparable with the engine's);
with --text '' it is <workdir>/eval.u16 (documents separated by <|endoftext|>).

The model is the shipped one: model.safetensors (BF16) upcast to float32. The token stream is
cut into non-overlapping windows of --seq tokens (each window is an independent sequence
starting at position 0, no BOS added); the first token of every window is context only.

Statistics (per MoE layer l, exact top-8 routing, positions within a window):
  ppl            exp(mean next-token NLL) over predicted tokens
  reuse          mean |S_t ∩ S_{t-1}| / 8: fraction of token t's experts also used by token t-1
                 (uniform random routing: 8/64 = 0.125)
  reuse_any4     fraction of token t's experts used by any of tokens t-1..t-4
  pregate_recall for l >= 1: |S_t(l) ∩ first 8 of g(l)| / 8 where g(l) ranks router l applied to
                 the MoE input (post_attention_layernorm output) of layer l-1, as in
                 docs/policy-contract.md
  lru_hit@C      hit rate of a per-layer LRU cache of C experts under exact routing, reset per window
  load           fraction of assignments per expert: max and min relative to uniform (1/64),
                 coefficient of variation, and how many experts take half of the assignments
  entropy        mean entropy (nats) of the router softmax over all E experts (uniform: ln E)
  margin_top1    mean p(1) - p(2) of the sorted router probabilities
  margin_top8    mean p(8) - p(9): how far the last selected expert is from the first rejected
                 one (with K = 8); cache-aware bonuses flip selections where this is small
  top8_mass      mean sum of the 8 largest probabilities

--checkpoint reads a training checkpoint or snapshot (float32, as trained) instead of the
exported folder (--model then only supplies the tokenizer), for statistics over training.

Writes a JSON file (--out) and prints a Markdown table.
"""
import argparse
import json
import os
import sys
from collections import OrderedDict

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_io import load_exported  # noqa: E402


def lru_hits(seq_sets, C):
    cache = OrderedDict()
    hits = total = 0
    for s in seq_sets:
        for e in s:
            total += 1
            if e in cache:
                hits += 1
                cache.move_to_end(e)
        for e in s:
            if e not in cache:
                cache[e] = True
                if len(cache) > C:
                    cache.popitem(last=False)
            else:
                cache.move_to_end(e)
    return hits, total


@torch.no_grad()
def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--workdir", default="build-train")
    ap.add_argument("--model", default="models/steer-olmoe-tiny")
    ap.add_argument("--split", default="eval", help="token stream <workdir>/<split>.u16 (with --text '')")
    ap.add_argument("--text", default="data/text/eval.txt",
                    help="text file tokenized as a whole, as `steermoe perplexity` reads it ('' to use --split)")
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--out", default="models/steer-olmoe-tiny/routing_stats.json")
    ap.add_argument("--max-windows", type=int, default=0, help="0: all")
    ap.add_argument("--checkpoint", default="", help="a train.py checkpoint/snapshot instead of --model's weights")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    if args.checkpoint:
        from model import Config, build_model
        ck = torch.load(args.checkpoint, weights_only=False)
        model = build_model(Config(**ck["config"]))
        model.load_state_dict(ck["model"])
        model.eval()
    else:
        model = load_exported(args.model)
    cfg = model.cfg
    E, K, L = cfg.num_experts, cfg.num_experts_per_tok, cfg.num_hidden_layers
    if args.text:
        # the text file exactly as the engine reads it (one token stream, no separators added)
        from tokenizers import Tokenizer
        tok = Tokenizer.from_file(os.path.join(args.model, "tokenizer.json"))
        with open(args.text, encoding="utf-8") as fh:
            toks = np.asarray(tok.encode(fh.read()).ids, dtype=np.int64)
        source = args.text
    else:
        toks = np.fromfile(os.path.join(args.workdir, args.split + ".u16"), dtype=np.uint16).astype(np.int64)
        source = os.path.join(args.workdir, args.split + ".u16")
    nwin = len(toks) // args.seq
    if args.max_windows:
        nwin = min(nwin, args.max_windows)
    win = torch.from_numpy(toks[: nwin * args.seq].reshape(nwin, args.seq))

    nll_sum, nll_n = 0.0, 0
    reuse = np.zeros(L); reuse4 = np.zeros(L); nreuse = 0
    pre = np.zeros(L); npre = 0
    loads = np.zeros((L, E))
    caps = (8, 16, 32)
    lru = {c: np.zeros((L, 2)) for c in caps}
    ent = np.zeros(L); m1 = np.zeros(L); m8 = np.zeros(L); mass8 = np.zeros(L); nrt = 0
    for i in range(0, nwin, 8):
        xb = win[i:i + 8]
        logits, rlog, topi, inputs = model(xb, return_aux=True)
        nll = F.cross_entropy(logits[:, :-1].reshape(-1, cfg.vocab_size), xb[:, 1:].reshape(-1), reduction="sum")
        nll_sum += nll.item(); nll_n += xb[:, 1:].numel()
        B, S = xb.shape
        sel = [ti.view(B, S, K) for ti in topi]                      # [B, S, K] per layer
        nrt += B * S
        for l in range(L):
            pr = torch.softmax(rlog[l].float(), dim=-1)
            ent[l] += -(pr * torch.log(pr.clamp_min(1e-30))).sum().item()
            ps = torch.sort(pr, dim=-1, descending=True).values
            m1[l] += (ps[:, 0] - ps[:, 1]).sum().item()
            m8[l] += (ps[:, K - 1] - ps[:, K]).sum().item()
            mass8[l] += ps[:, :K].sum().item()
            m = torch.zeros(B, S, E, dtype=torch.bool)
            m.scatter_(2, sel[l], True)
            loads[l] += m.sum((0, 1)).numpy()
            inter = (m[:, 1:] & m[:, :-1]).sum(-1).float() / K       # [B, S-1]
            reuse[l] += inter.sum().item()
            prev4 = torch.zeros(B, S, E, dtype=torch.bool)
            for d in range(1, 5):
                prev4[:, d:] |= m[:, :-d]
            reuse4[l] += ((m & prev4)[:, 1:].sum(-1).float() / K).sum().item()
            if l >= 1:
                b_prev = inputs[l - 1].reshape(B * S, -1)
                g = F.linear(b_prev.float(), model.layers[l].mlp.gate.weight.float())
                # descending score, ties to the lower index (stable sort of the negated scores)
                order = torch.sort(-g, dim=-1, stable=True).indices[:, :K]
                pm = torch.zeros(B * S, E, dtype=torch.bool)
                pm.scatter_(1, order, True)
                pre[l] += ((pm & m.view(B * S, E)).sum(-1).float() / K).sum().item()
            for b in range(B):
                sets = sel[l][b].tolist()
                for c in caps:
                    h, t = lru_hits(sets, c)
                    lru[c][l] += (h, t)
        nreuse += B * (S - 1)
        npre += B * S
    frac = loads / loads.sum(1, keepdims=True)
    res = {"source": source, "windows": int(nwin), "seq": args.seq, "tokens": int(nwin * args.seq),
           "predicted_tokens": int(nll_n), "eval_loss": nll_sum / nll_n, "ppl": float(np.exp(nll_sum / nll_n)),
           "layers": []}
    for l in range(L):
        f = np.sort(frac[l])[::-1]
        res["layers"].append({
            "layer": l,
            "reuse": reuse[l] / nreuse,
            "reuse_any4": reuse4[l] / nreuse,
            "pregate_recall": (pre[l] / npre) if l >= 1 else None,
            **{f"lru_hit@{c}": lru[c][l][0] / lru[c][l][1] for c in caps},
            "load_max_rel": float(f[0] * E),
            "load_min_rel": float(f[-1] * E),
            "load_cv": float(frac[l].std() / frac[l].mean()),
            "experts_for_half": int(np.searchsorted(np.cumsum(f), 0.5) + 1),
            "entropy": ent[l] / nrt,
            "margin_top1": m1[l] / nrt,
            "margin_top8": m8[l] / nrt,
            "top8_mass": mass8[l] / nrt,
            "load": [round(float(v), 5) for v in frac[l]],
        })
    with open(args.out, "w") as fh:
        json.dump(res, fh, indent=1)
        fh.write("\n")
    print(f"eval: {nwin} windows x {args.seq} tokens, loss {res['eval_loss']:.4f}, ppl {res['ppl']:.2f}")
    print("| layer | reuse t-1 | reuse t-1..t-4 | pre-gate recall@8 | LRU hit C=8 | C=16 | C=32 | max load (x uniform) | min load | load CV | experts for 50% | entropy | p1-p2 | p8-p9 | top-8 mass |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in res["layers"]:
        pr = "-" if r["pregate_recall"] is None else f"{r['pregate_recall']:.3f}"
        print(f"| {r['layer']} | {r['reuse']:.3f} | {r['reuse_any4']:.3f} | {pr} | {r['lru_hit@8']:.3f} | "
              f"{r['lru_hit@16']:.3f} | {r['lru_hit@32']:.3f} | {r['load_max_rel']:.2f} | {r['load_min_rel']:.2f} | "
              f"{r['load_cv']:.2f} | {r['experts_for_half']} | {r['entropy']:.2f} | {r['margin_top1']:.3f} | "
              f"{r['margin_top8']:.4f} | {r['top8_mass']:.3f} |")


if __name__ == "__main__":
    main()
