#!/usr/bin/python3
"""Routing statistics of a shipped model beside the paper's OLMoE-1B-7B figures.

Two sources, one JSON (--out, default <model>/routing_stats.json):
  * "pytorch": tools/train/stats.py on the evaluation text (perplexity, next-token expert reuse,
    pre-gate recall@8, LRU hit rates, load, router entropy and top-1 / top-8 margins per layer);
  * "engine": `steermoe kl` on the same text at each --residency for exact routing with LRU,
    Cache-Prior lambda 0.2 and 0.3, PSR lambda 0.2 and 0.3 n 1 (the paper's operating points
    and the same-lambda pairs): copies per token (demand and prefetch), the
    fraction of the router's top-K replaced, KL to exact routing, perplexity.
The calibration the cache-aware policies need is the model's calib.smcal (made with
--calibrate from an exact-routing trace of the held-out text, as the model card says).

Per-layer copy counts are what compare across depths: OLMoE-1B-7B has 16 MoE layers, so its
per-token counts are divided by 16 in the table, ours by the model's layer count.

  /usr/bin/python3 tools/train/routing_report.py --model models/steer-olmoe-small \
      --steermoe build/steermoe --text data/text-small/eval.txt
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
POLICIES = ["exact:evict=lru", "cacheprior:lambda=0.2", "cacheprior:lambda=0.3", "psr:lambda=0.2,n=1",
            "psr:lambda=0.3,n=1"]

# The paper (RTX 4090, OLMoE-1B-7B, 16 MoE layers x 64 experts, top-8), Section 6.2 / Table 2.
# Copies per token at 50% residency; at 25% the paper gives latencies only.
PAPER_OLMOE = {
    "layers": 16,
    "copies_per_token_50": {"exact:evict=lru": {"total": 30.5, "demand": 30.5},
                            "cacheprior:lambda=0.2": {"total": 10.5, "demand": 10.5},
                            "psr:lambda=0.3,n=1": {"total": 13.8, "demand": 2.2}},
    "latency_ms_50": {"exact:evict=lru": 24.7, "cacheprior:lambda=0.2": 14.3, "psr:lambda=0.3,n=1": 10.7},
    "latency_ms_25": {"exact:evict=lru": 42.5, "cacheprior:lambda=0.2": 27.5, "psr:lambda=0.25,n=1": 19.2},
    "selfgen_excess_ppl_50_lambda_0.3": {"cacheprior": 0.182, "psr n 1": 0.054},
    "source": "prefetch-steered routing paper, Section 6.2 and Table 2",
}


def run(cmd):
    print("+", " ".join(cmd), file=sys.stderr, flush=True)
    subprocess.run(cmd, check=True)


def calibrate(steermoe, model, heldout, cache, window):
    with tempfile.TemporaryDirectory() as tmp:
        trace = os.path.join(tmp, "heldout")
        run([steermoe, "trace", "-m", model, "-f", heldout, "-o", trace, "--window", str(window)])
        run([steermoe, "calibrate", "--trace", trace, "--cache", str(cache), "-o",
             os.path.join(model, "calib.smcal")])


def engine_rows(steermoe, model, text, residency, windows, window_len, threads):
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "kl.json")
        run([steermoe, "kl", "-m", model, "-f", text, "--policy", *POLICIES, "--residency",
             str(residency), "--window-len", str(window_len), "--max-windows", str(windows),
             "-t", str(threads), "--calib", os.path.join(model, "calib.smcal"), "--json", out])
        with open(out) as fh:
            return json.load(fh)["configurations"]


def paper_key(policy):
    """the engine prints policies with their defaults spelled out (psr:lambda=0.3,n=1,evict=a):
    match on the name and the lambda / n given here"""
    name, _, params = policy.partition(":")
    kv = dict(p.split("=", 1) for p in params.split(",") if "=" in p)
    for key in PAPER_OLMOE["copies_per_token_50"]:
        kname, _, kparams = key.partition(":")
        want = dict(p.split("=", 1) for p in kparams.split(",") if "=" in p)
        if kname == name and all(kv.get(k) == v for k, v in want.items()):
            return key
    return None


def markdown(report):
    L = len(report["pytorch"]["layers"])
    P = PAPER_OLMOE["layers"]
    lines = ["| residency | policy | copies/token (demand + prefetch) | per layer | paper OLMoE per token (per layer) | top-K replaced | KL (nats/token) | ppl |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for res, rows in report["engine"].items():
        for r in rows:
            c = r["copies_per_token"]
            key = paper_key(r["policy"])
            paper = PAPER_OLMOE["copies_per_token_50"].get(key) if res == "0.5" and key else None
            ptxt = f"{paper['total']:.1f} ({paper['total'] / P:.2f}), demand {paper['demand']:.1f}" if paper else "-"
            lines.append(f"| {float(res):.0%} | {r['policy']} | {c['demand']:.2f} + {c['prefetch']:.2f} | "
                         f"{c['total'] / L:.2f} | {ptxt} | {100 * r['replaced_fraction']:.1f}% | "
                         f"{r['kl']['mean']:.4f} | {r['perplexity']:.3f} |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="exported HF folder")
    ap.add_argument("--steermoe", default="build/steermoe")
    ap.add_argument("--text", default="data/text-small/eval.txt")
    ap.add_argument("--heldout", default="data/text-small/heldout.txt")
    ap.add_argument("--residency", type=float, nargs="+", default=[0.5, 0.25])
    ap.add_argument("--windows", type=int, default=40, help="KL windows of --window-len tokens")
    ap.add_argument("--window-len", type=int, default=256)
    ap.add_argument("--stats-windows", type=int, default=0, help="stats.py windows (0: all)")
    ap.add_argument("--calibrate", action="store_true", help="(re)write <model>/calib.smcal first")
    ap.add_argument("--calib-cache", type=int, default=32)
    ap.add_argument("--checkpoint", default="", help="stats.py reads this checkpoint instead of the folder's weights")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    out = args.out or os.path.join(args.model, "routing_stats.json")
    for path, what in ((args.steermoe, "--steermoe"), (args.text, "--text"), (args.heldout, "--heldout")):
        if not os.path.exists(path):
            sys.exit(f"routing_report: {what} {path}: no such file")
    if args.calibrate or not os.path.exists(os.path.join(args.model, "calib.smcal")):
        calibrate(args.steermoe, args.model, args.heldout, args.calib_cache, args.window_len)
    with tempfile.TemporaryDirectory() as tmp:
        sj = os.path.join(tmp, "stats.json")
        cmd = [sys.executable, os.path.join(HERE, "stats.py"), "--model", args.model, "--text", args.text,
               "--seq", str(args.window_len), "--out", sj, "--threads", str(args.threads),
               "--max-windows", str(args.stats_windows)]
        if args.checkpoint:
            cmd += ["--checkpoint", args.checkpoint]
        run(cmd)
        with open(sj) as fh:
            pyt = json.load(fh)
    report = {"schema": "steermoe.routing_stats/2", "model": args.model, "text": args.text,
              "pytorch": pyt, "engine": {}, "paper_olmoe_1b_7b": PAPER_OLMOE}
    for res in args.residency:
        report["engine"][str(res)] = engine_rows(args.steermoe, args.model, args.text, res, args.windows,
                                                 args.window_len, args.threads)
    report["markdown"] = markdown(report)
    with open(out + ".tmp", "w") as fh:
        json.dump(report, fh, indent=1)
        fh.write("\n")
    os.replace(out + ".tmp", out)
    print(report["markdown"])


if __name__ == "__main__":
    main()
