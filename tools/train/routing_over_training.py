#!/usr/bin/python3
"""How routing sharpens with training: routing_report.py on every snapshot of a run.

For each <workdir>/snap-STEP.pt (train.py --snapshots): export it to a temporary HF folder,
calibrate it on the held-out text with the engine, run routing_report.py (PyTorch statistics
and `steermoe kl` at --residency), and keep the layer means. Writes --out (JSON, one record
per snapshot, in step order) and --plot (PNG: perplexity, reuse / pre-gate recall, router
entropy and margins, copies per token and KL against training tokens).

  /usr/bin/python3 tools/train/routing_over_training.py --workdir build-train-small \
      --model models/steer-olmoe-small --steermoe build/steermoe
"""
import argparse
import glob
import json
import os
import re
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def layer_mean(layers, key):
    vals = [l[key] for l in layers if l.get(key) is not None]
    return float(np.mean(vals)) if vals else None


def summarise(step, tokens, rep):
    pyt = rep["pytorch"]
    rec = {"step": step, "tokens": tokens, "ppl": pyt["ppl"], "eval_loss": pyt["eval_loss"]}
    for k in ("reuse", "reuse_any4", "pregate_recall", "entropy", "margin_top1", "margin_top8",
              "top8_mass", "load_cv", "lru_hit@16", "lru_hit@32"):
        rec[k] = layer_mean(pyt["layers"], k)
    rec["engine"] = {res: {r["policy"]: {"copies": r["copies_per_token"], "kl": r["kl"]["mean"],
                                         "replaced": r["replaced_fraction"]} for r in rows}
                     for res, rows in rep["engine"].items()}
    return rec


def plot(records, path, layers):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    t = [max(r["tokens"], 1) / 1e6 for r in records]
    fig, ax = plt.subplots(2, 2, figsize=(11, 8))
    ax[0, 0].plot(t, [r["ppl"] for r in records], "o-")
    ax[0, 0].set_yscale("log"); ax[0, 0].set_title("eval perplexity")
    for k, lab in (("reuse", "reuse t-1"), ("reuse_any4", "reuse t-1..t-4"), ("pregate_recall", "pre-gate recall@8")):
        ax[0, 1].plot(t, [r[k] for r in records], "o-", label=lab)
    ax[0, 1].axhline(8 / 64, color="gray", ls=":", label="random (8/64)")
    ax[0, 1].set_title("expert locality (layer mean)"); ax[0, 1].legend()
    ax[1, 0].plot(t, [r["entropy"] for r in records], "o-", label="router entropy (nats)")
    ax2 = ax[1, 0].twinx()
    ax2.plot(t, [r["margin_top1"] for r in records], "s--", color="C1", label="p1-p2")
    ax2.plot(t, [r["margin_top8"] for r in records], "^--", color="C2", label="p8-p9")
    ax[1, 0].set_title("router sharpness (layer mean)")
    ax[1, 0].legend(loc="upper right"); ax2.legend(loc="center right")
    res = sorted(records[-1]["engine"])[-1] if records[-1]["engine"] else None
    # Only the policies every snapshot was measured with (older cache entries may have fewer).
    common = [p for p in records[-1]["engine"].get(res, {})
              if all(p in r["engine"].get(res, {}) for r in records)]
    if res:
        for pol in common:
            ax[1, 1].plot(t, [r["engine"][res][pol]["copies"]["total"] / layers for r in records], "o-",
                          label=f"{pol} copies/layer")
        ax3 = ax[1, 1].twinx()
        for i, pol in enumerate(p for p in common if not p.startswith("exact")):
            ax3.plot(t, [r["engine"][res][pol]["kl"] for r in records], "x:", color=f"C{i + 3}", label=f"{pol} KL")
        ax[1, 1].set_title(f"engine at {float(res):.0%} residency")
        ax[1, 1].legend(loc="upper right", fontsize=7); ax3.legend(loc="center right", fontsize=7)
    for a in ax.flat:
        a.set_xlabel("training tokens (M)")
    fig.tight_layout()
    fig.savefig(path, dpi=90)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--model", required=True, help="the exported model (tokenizer and files to copy)")
    ap.add_argument("--steermoe", default="build/steermoe")
    ap.add_argument("--text", default="data/text-small/eval.txt")
    ap.add_argument("--heldout", default="data/text-small/heldout.txt")
    ap.add_argument("--residency", type=float, nargs="+", default=[0.5])
    ap.add_argument("--windows", type=int, default=16)
    ap.add_argument("--stats-windows", type=int, default=96)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default="")
    ap.add_argument("--plot", default="")
    ap.add_argument("--cache-dir", default="", help="per-snapshot reports kept here and reused "
                    "(default <workdir>/routing-cache; delete it after changing the options)")
    ap.add_argument("--max-step", type=int, default=0, help="ignore snapshots after this step (0: none)")
    args = ap.parse_args()
    cache_dir = args.cache_dir or os.path.join(args.workdir, "routing-cache")
    os.makedirs(cache_dir, exist_ok=True)
    out = args.out or os.path.join(args.model, "routing_over_training.json")
    png = args.plot or os.path.join(args.model, "routing_over_training.png")
    snaps = sorted(glob.glob(os.path.join(args.workdir, "snap-*.pt")),
                   key=lambda p: int(re.search(r"snap-(\d+)\.pt$", p).group(1)))
    if not snaps:
        sys.exit(f"routing_over_training: no snap-STEP.pt in {args.workdir}")
    records = []
    for snap in snaps:
        step = int(re.search(r"snap-(\d+)\.pt$", snap).group(1))
        if args.max_step and step > args.max_step:
            continue
        cached = os.path.join(cache_dir, f"report-{step}.json")
        if os.path.exists(cached):
            with open(cached) as fh:
                rep = json.load(fh)
            records.append(summarise(step, rep["tokens"], rep))
            continue
        with tempfile.TemporaryDirectory() as tmp:
            folder = os.path.join(tmp, "model")
            subprocess.run([sys.executable, os.path.join(HERE, "export.py"), "--workdir", args.workdir,
                            "--checkpoint", snap, "--out", folder], check=True)
            rep_path = os.path.join(tmp, "report.json")
            subprocess.run([sys.executable, os.path.join(HERE, "routing_report.py"), "--model", folder,
                            "--steermoe", args.steermoe, "--text", args.text, "--heldout", args.heldout,
                            "--residency", *map(str, args.residency), "--windows", str(args.windows),
                            "--stats-windows", str(args.stats_windows), "--calibrate",
                            "--threads", str(args.threads), "--out", rep_path], check=True)
            with open(rep_path) as fh:
                rep = json.load(fh)
        import torch
        tokens = int(torch.load(snap, weights_only=False).get("tokens", 0))
        rep["tokens"] = tokens
        with open(cached + ".tmp", "w") as fh:
            json.dump(rep, fh)
        os.replace(cached + ".tmp", cached)
        records.append(summarise(step, tokens, rep))
        print(json.dumps({k: records[-1][k] for k in ("step", "tokens", "ppl", "reuse", "pregate_recall",
                                                      "entropy")}), flush=True)
    layers = len(rep["pytorch"]["layers"])
    with open(out + ".tmp", "w") as fh:
        json.dump({"schema": "steermoe.routing_over_training/1", "snapshots": records}, fh, indent=1)
        fh.write("\n")
    os.replace(out + ".tmp", out)
    plot(records, png, layers)
    print_table(records, f"{args.residency[0]}")
    print(f"wrote {out} and {png}")


def print_table(records, residency):
    """The model card's table: one row per snapshot, engine columns at the first residency."""
    pols = ["exact:evict=lru", "cacheprior:lambda=0.2,evict=lru", "psr:lambda=0.3,n=1,evict=a"]
    print(f"| step | tokens | ppl | reuse t-1 | pre-gate recall@8 | entropy | p1-p2 | p8-p9 | "
          f"exact LRU copies/token | CP 0.2 | PSR 0.3 n 1 (demand) | KL CP 0.2 | KL PSR 0.3 |  "
          f"(engine at {float(residency):.0%})")
    print("|---" * 13 + "|")
    for r in records:
        eng = r["engine"].get(residency, {})
        missing = [p for p in pols if p not in eng]
        if missing:
            sys.exit(f"routing_over_training: step {r['step']}: no engine row for {missing[0]} at "
                     f"residency {residency} (rerun with the same --residency)")
        tok = "0" if r["tokens"] == 0 else f"{r['tokens'] / 1e6:.2f} M"
        ppl = f"{r['ppl']:.1f}" if r["ppl"] < 100 else f"{r['ppl']:.0f}"
        ex, cp, psr = (eng[p] for p in pols)
        print(f"| {r['step']} | {tok} | {ppl} | {r['reuse']:.3f} | {r['pregate_recall']:.3f} | "
              f"{r['entropy']:.2f} | {r['margin_top1']:.3f} | {r['margin_top8']:.4f} | "
              f"{ex['copies']['total']:.2f} | {cp['copies']['total']:.2f} | "
              f"{psr['copies']['total']:.2f} ({psr['copies']['demand']:.2f}) | {cp['kl']:.4f} | {psr['kl']:.4f} |")


if __name__ == "__main__":
    main()
