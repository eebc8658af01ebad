#!/usr/bin/python3
"""Closed-loop simulated decode latency of a shipped model under a hardware profile.

For each --residency and policy: `steermoe trace --policy P --cache C` records the evaluation
text under that policy (so the replay is closed loop: the routing the simulator replays is the
routing the policy produced with that cache), then `steermoe sim` times it with the profile's
link and compute durations. Writes --out (default <model>/sim_latency.json) and prints a
markdown table (ms/token, p99 in brackets) beside the paper's figures for OLMoE-1B-7B.

  /usr/bin/python3 tools/train/simulate_policies.py --model models/steer-olmoe-small \
      --steermoe build/steermoe
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from routing_report import PAPER_OLMOE, POLICIES  # noqa: E402  (one list of operating points)


def run(cmd):
    print("+", " ".join(cmd), file=sys.stderr, flush=True)
    # stdout carries our table only; the tools' own tables are in the JSON they write
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)


def experts_per_layer(model):
    with open(os.path.join(model, "config.json")) as fh:
        cfg = json.load(fh)
    n = cfg.get("num_experts") or cfg.get("num_local_experts") or 0
    if n <= 0:
        sys.exit(f"simulate_policies: {model}/config.json: field num_experts: expected a MoE model")
    return n


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--steermoe", default="build/steermoe")
    ap.add_argument("--text", default="data/text-small/eval.txt")
    ap.add_argument("--profile", default="rtx4090-olmoe")
    ap.add_argument("--residency", type=float, nargs="+", default=[0.5, 0.25])
    ap.add_argument("--policy", nargs="+", default=POLICIES)
    ap.add_argument("--max-tokens", type=int, default=16384, help="tokens of --text traced (windows of 256)")
    ap.add_argument("--window", type=int, default=256)
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    calib = os.path.join(args.model, "calib.smcal")
    if not os.path.exists(calib):
        sys.exit(f"simulate_policies: {calib}: not found (make it with routing_report.py --calibrate)")
    experts = experts_per_layer(args.model)
    out = args.out or os.path.join(args.model, "sim_latency.json")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for res in args.residency:
            cache = round(res * experts)
            for pol in args.policy:
                trace = os.path.join(tmp, f"trace-{len(rows)}")
                report = os.path.join(tmp, f"sim-{len(rows)}.json")
                run([args.steermoe, "trace", "-q", "-m", args.model, "-f", args.text, "-o", trace,
                     "--window", str(args.window), "--max-tokens", str(args.max_tokens),
                     "--policy", pol, "--cache", str(cache), "--calib", calib])
                run([args.steermoe, "sim", "-q", "--trace", trace, "--calib", calib, "--profile", args.profile,
                     "--cache", str(cache), "--policy", pol, "--json", report])
                with open(report) as fh:
                    res_json = json.load(fh)["results"][0]
                rows.append({"residency": res, "cache": cache, "policy": pol,
                             "ms_per_token": res_json["ms_per_token"],
                             "copies_per_token": res_json["copies_per_token"],
                             "stall_ms_per_token": res_json["stall_ms_per_token"],
                             "loop": res_json["loop"], "max_inflight": res_json["max_inflight"],
                             "tokens": res_json["tokens"], "decision_hash": res_json["decision_hash"]})
    paper_ms = {0.5: PAPER_OLMOE["latency_ms_50"], 0.25: PAPER_OLMOE["latency_ms_25"]}
    doc = {"schema": "steermoe.sim_latency/1", "model": os.path.basename(os.path.normpath(args.model)),
           "profile": args.profile, "text": args.text, "max_tokens": args.max_tokens, "rows": rows,
           "paper_olmoe_ms": {str(res): ms for res, ms in paper_ms.items()}}
    with open(out + ".tmp", "w") as fh:
        json.dump(doc, fh, indent=1)
        fh.write("\n")
    os.replace(out + ".tmp", out)
    print("| residency | " + " | ".join(args.policy) + " | paper (16 layers) |")
    print("| --- " * (len(args.policy) + 2) + "|")
    for res in args.residency:
        cells = [f"{r['ms_per_token']['mean']:.2f} ({r['ms_per_token']['p99']:.1f})"
                 for r in rows if r["residency"] == res]
        paper = paper_ms.get(res, {})
        print(f"| {res:.0%} | " + " | ".join(cells) + " | " +
              (" / ".join(f"{k} {v}" for k, v in paper.items()) or "-") + " |")
    print(f"wrote {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
