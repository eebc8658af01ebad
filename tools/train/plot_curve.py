#!/usr/bin/python3
"""Plot the training curve (train loss, eval-split loss, load-balancing loss) from train_log.jsonl."""
import argparse
import json

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--log", default="build-train/train_log.jsonl")
    ap.add_argument("--out", default="models/steer-olmoe-tiny/training_curve.png")
    ap.add_argument("--title", default="steer-olmoe-tiny training")
    args = ap.parse_args()
    recs = [json.loads(l) for l in open(args.log)]
    start = next((r for r in recs if r.get("event") == "start"), {"args": {"batch": 16, "seq": 256}})
    batch, seq = start["args"]["batch"], start["args"]["seq"]
    steps = [r for r in recs if "step" in r and "loss" in r]
    end = next((r for r in reversed(recs) if r.get("event") == "end"), None)
    s = np.array([r["step"] for r in steps])
    loss = np.array([r["loss"] for r in steps])
    lb = np.array([r["lb"] for r in steps])
    ev = [(r["step"], r["eval_loss"]) for r in steps if "eval_loss" in r]
    if end is not None:
        ev.append((end["step"], end["eval_loss"]))
    k = 10
    smooth = np.convolve(loss, np.ones(k) / k, mode="valid") if len(loss) >= k else loss
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4))
    a1.plot(s, loss, color="0.75", lw=0.8, label="train loss (per step)")
    a1.plot(s[len(s) - len(smooth):], smooth, color="C0", label=f"train loss ({k}-step mean)")
    a1.plot([e[0] for e in ev], [e[1] for e in ev], "o-", color="C3", label="eval-split loss (16 windows)")
    a1.set_xlabel(f"step ({batch} x {seq} tokens)")
    a1.set_ylabel("cross-entropy (nats/token)")
    a1.set_title(args.title)
    a1.grid(alpha=0.3)
    a1.legend()
    a2.plot(s, lb, color="C2")
    a2.axhline(1.0, color="0.5", ls="--", lw=0.8)
    a2.set_xlabel("step")
    a2.set_ylabel("load-balancing loss (1 = uniform)")
    a2.set_title("router load balance (mean over layers)")
    a2.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)
    print("wrote", args.out)


if __name__ == "__main__":
    main()
