#!/usr/bin/env python3
"""Checks that the per-sample log-likelihoods lm-eval logged (--log_samples) equal the engine's
own scores for the same (context, continuation) strings, computed by `steermoe score` with the
same policy: exact float equality, and the same is_greedy.

  python3 check.py --samples OUT_DIR --steermoe build/steermoe -m MODEL [--policy P --cache C --calib F]
"""
import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile


def pairs_of(sample):
    args = sample["arguments"]
    if isinstance(args, dict):  # lm-eval >= 0.4.5: {"gen_args_0": {"arg_0": ctx, "arg_1": cont}}
        return [(a["arg_0"], a["arg_1"]) for a in args.values()]
    return [(a[0], a[1]) for a in args]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", required=True)
    ap.add_argument("--steermoe", required=True)
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--policy", default="exact:evict=lru")
    ap.add_argument("--cache", default="0")
    ap.add_argument("--calib", default="")
    a = ap.parse_args()
    files = sorted(glob.glob(os.path.join(a.samples, "**", "samples_heldout_cloze_*.jsonl"), recursive=True))
    if not files:
        sys.exit(f"no samples_heldout_cloze_*.jsonl under {a.samples}")
    requests, logged = [], []
    for line in open(files[-1], encoding="utf-8"):
        s = json.loads(line)
        for (ctx, cont), resp in zip(pairs_of(s), s["resps"]):
            ll, greedy = resp[0]
            # lm-eval logs them as str(float) / str(bool); repr round-trips a double exactly.
            ll = float(ll)
            greedy = greedy if isinstance(greedy, bool) else greedy == "True"
            requests.append({"context": ctx, "continuation": cont})
            logged.append((ll, greedy))
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
        for r in requests:
            f.write(json.dumps(r) + "\n")
        path = f.name
    cmd = [a.steermoe, "score", "-m", a.model, "-f", path, "--policy", a.policy, "--cache", a.cache]
    if a.calib:
        cmd += ["--calib", a.calib]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.splitlines()
    os.unlink(path)
    own = [json.loads(x) for x in out]
    assert len(own) == len(logged), (len(own), len(logged))
    bad = 0
    for k, ((ll, greedy), mine) in enumerate(zip(logged, own)):
        if ll != mine["loglikelihood"] or bool(greedy) != mine["is_greedy"]:
            bad += 1
            if bad <= 5:
                print(f"  request {k}: lm-eval {ll!r} {greedy} vs engine {mine['loglikelihood']!r} {mine['is_greedy']}")
    print(f"{a.policy} cache {a.cache}: {len(own)} loglikelihoods, {len(own) - bad} identical to the "
          f"engine's own (bit for bit), {bad} different")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
