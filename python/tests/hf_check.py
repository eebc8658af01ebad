#!/usr/bin/env python3
"""HF transformers harness against the engine on the shipped model (not run by CI: it needs
PyPI's torch and transformers; docs/evaluation.md, "Python module and HF transformers", has the
command and output).

For N windows of W tokens of a text, under one policy and cache size:
  * decisions: the engine's (steermoe trace under the policy, then steermoe replay of that
    closed-loop trace: the engine's own decisions and router scores) against those of
    steermoe.hf.PolicyHarness on OlmoeForCausalLM (float32), windows batched B at a time, one
    logical cache per batch row;
  * perplexity: steermoe perplexity under the policy against the HF model's under the harness.

A decision is the selected set S at one (token, layer). Where HF's S differs from the engine's,
each root difference (one with no other difference at an earlier-or-equal token and
earlier-or-equal layer of its window, i.e. none among the decisions it depends on) is counted as
a rounding tie when the engine's router scores of the swapped experts differ by at most 8 x the
largest |z_HF - z_engine| at that position (the decision then depends on float rounding, not on
the policy); every other difference is a consequence of a root (hidden states and logical
caches have diverged downstream of it).
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch


def run(cmd):
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--model", default="models/steer-olmoe-small")
    ap.add_argument("--text", default="data/text-small/eval.txt")
    ap.add_argument("--policy", default="psr:lambda=0.3,n=1")
    ap.add_argument("--cache", type=int, default=32)
    ap.add_argument("--calib", default=None)
    ap.add_argument("--window", type=int, default=256)
    ap.add_argument("--windows", type=int, default=16)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--json", default=None)
    ap.add_argument("--kernels", default="avx512",
                    help="engine kernel level (STEERMOE_KERNELS): avx512 keeps activations f32 "
                         "like HF in float32; avx512bf16 (the default on such CPUs) rounds them "
                         "to bf16")
    a = ap.parse_args()
    build = Path(a.build).resolve()
    sys.path.insert(0, str(build / "python"))
    import steermoe
    import steermoe.hf
    from transformers import AutoModelForCausalLM

    exe = str(build / "steermoe")
    if a.kernels:
        os.environ["STEERMOE_KERNELS"] = a.kernels
    calib = a.calib or str(Path(a.model) / "calib.smcal")
    W, N = a.window, a.windows
    ids = json.loads(run([exe, "tokenize", "-m", a.model, "--file", a.text, "--no-parse-special"]))
    if len(ids) < N * W:
        sys.exit(f"text has {len(ids)} tokens, need {N * W}")
    windows = [ids[k * W:(k + 1) * W] for k in range(N)]
    pol = ["--policy", a.policy, "--cache", str(a.cache), "--calib", calib]

    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.time()
        tdir = Path(tmp) / "trace"
        run([exe, "trace", "-m", a.model, "-f", a.text, "-o", str(tdir), "--window", str(W),
             "--max-tokens", str(N * W), *pol])
        dec = Path(tmp) / "decisions.jsonl"
        run([exe, "replay", "--trace", str(tdir), "--decisions", str(dec), *pol])
        ppl_engine = json.loads(run([exe, "perplexity", "-m", a.model, "-f", a.text, "--window",
                                     str(W), "--max-windows", str(N), *pol]))
        trace = steermoe.Trace.open(tdir)
        engine_z = np.array(trace.scores)
        got_tokens = [int(v) for v in trace.tokens[:N * W]]
        want_tokens = [t for w in windows for t in w]
        assert got_tokens == want_tokens, f"trace tokens {got_tokens[:8]} vs {want_tokens[:8]}"
        starts = list(trace.sequence_starts)
        assert starts[:N] == [k * W for k in range(N)], f"trace windows {starts[:N]}"
        L = trace.layers
        engine_S = {}
        for line in dec.read_text().splitlines():
            d = json.loads(line)
            if not d.get("summary"):
                engine_S[(d["t"], d["l"])] = d["S"]
        engine_seconds = time.time() - t0

    model = AutoModelForCausalLM.from_pretrained(a.model, dtype=torch.float32)
    model.eval()
    t0 = time.time()
    hf_nll, hf_S, hf_z = [], {}, {}
    with steermoe.hf.PolicyHarness(model, a.policy, a.cache, calib, record=True) as h:
        for k0 in range(0, N, a.batch):
            batch = windows[k0:k0 + a.batch]
            x = torch.tensor(batch, dtype=torch.int64)
            with torch.no_grad():
                logits = model(input_ids=x, use_cache=False).logits.to(torch.float64)
            lp = torch.log_softmax(logits, dim=-1)
            for b in range(len(batch)):
                tgt = x[b, 1:]
                nll = -lp[b, :-1].gather(1, tgt[:, None]).sum().item()
                hf_nll.append(nll / (W - 1))
                for m in range(L):
                    for s, (sel, z) in enumerate(h.records[b][m]):
                        t = (k0 + b) * W + s
                        hf_S[(t, m)] = [int(v) for v in sel]
                        hf_z[(t, m)] = z
        stats = h.stats()
    hf_seconds = time.time() - t0

    # Batch independence: the first window alone gives the same decisions as in its batch.
    alone_same = True
    with steermoe.hf.PolicyHarness(model, a.policy, a.cache, calib, record=True) as h:
        with torch.no_grad():
            model(input_ids=torch.tensor(windows[:1]), use_cache=False)
        for m in range(L):
            for s, (sel, _) in enumerate(h.records[0][m]):
                alone_same &= [int(v) for v in sel] == hf_S[(s, m)]

    total = len(engine_S)
    same = sum(engine_S[k] == hf_S[k] for k in engine_S)
    max_dz = max(float(np.max(np.abs(hf_z[k] - engine_z[k[0], k[1]]))) for k in engine_S)
    # Root differences: no other difference at (t', m') with t' <= t and m' <= m in the same
    # window (the set a decision at (t, m) depends on: earlier layers through the hidden state,
    # earlier tokens through attention and this layer's cache). Every other one is a
    # consequence of a root.
    ties, firsts, consequences = 0, [], 0
    for w in range(N):
        diffs = [(t, m) for t in range(w * W, (w + 1) * W) for m in range(L)
                 if engine_S[(t, m)] != hf_S[(t, m)]]
        roots = [(t, m) for (t, m) in diffs
                 if not any(t2 <= t and m2 <= m and (t2, m2) != (t, m) for (t2, m2) in diffs)]
        consequences += len(diffs) - len(roots)
        for first in roots:
            t, m = first
            ze, zh = engine_z[t, m], hf_z[(t, m)]
            err = float(np.max(np.abs(zh - ze)))
            a_set = set(hf_S[first]) - set(engine_S[first])
            b_set = set(engine_S[first]) - set(hf_S[first])
            gap = max(abs(float(ze[x] - ze[y])) for x in a_set for y in b_set)
            tie = gap <= 8 * err
            ties += tie
            firsts.append({"window": w, "t": t, "layer": m, "hf_only": sorted(a_set),
                           "engine_only": sorted(b_set), "score_gap": gap, "max_dz": err,
                           "rounding_tie": tie})
    eng = [w["nll"] for w in ppl_engine["per_window"]]
    ppl_e = math.exp(sum(eng) / len(eng))
    ppl_h = math.exp(sum(hf_nll) / len(hf_nll))
    report = {
        "policy": a.policy, "cache": a.cache, "engine_kernels": a.kernels, "windows": N, "window": W, "batch": a.batch,
        "decisions": total, "identical": same, "differing": total - same,
        "windows_with_a_difference": len({f["window"] for f in firsts}),
        "root_differences": len(firsts), "root_differences_rounding_ties": ties,
        "consequences": consequences, "roots": firsts,
        "max_abs_router_score_difference": max_dz,
        "batch_row_equals_alone": bool(alone_same),
        "perplexity_engine": ppl_e, "perplexity_hf": ppl_h,
        "perplexity_relative_difference": abs(ppl_h - ppl_e) / ppl_e,
        "max_window_nll_difference": max(abs(x - y) for x, y in zip(eng, hf_nll)),
        "hf_copies_per_token": sum(s["copies"] for s in stats) / sum(s["tokens"] for s in stats),
        "engine_seconds": engine_seconds, "hf_seconds": hf_seconds,
    }
    print(json.dumps(report, indent=1))
    if a.json:
        Path(a.json).write_text(json.dumps(report, indent=1) + "\n")
    ok = (report["perplexity_relative_difference"] < 1e-3 and alone_same
          and len(firsts) == ties)
    print("PASS" if ok else "FAIL")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
