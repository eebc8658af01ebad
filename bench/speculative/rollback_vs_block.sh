#!/usr/bin/env bash
# The section-7 replay (2): rollback (per-position logical caches taken back to the committed
# tokens, PSR at several lambda) against block selection (AcceptMoE's block and the paper's
# block:conf), copies per committed token at matched displacement, with a synthetic drafter of
# set acceptance A (`kl --draft synthetic:A`, teacher forced on the evaluation split). The
# displacement is the share of router top-K picks each configuration replaced (`kl`'s
# "replaced"); rollback's copies are interpolated along lambda to each block rule's share.
# Usage: bench/speculative/rollback_vs_block.sh [BUILD_DIR] [OUT_DIR]
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${1:-build}
OUT=${2:-rollback-vs-block}
M=${MODEL:-models/steer-olmoe-small}
TEXT=${TEXT:-data/text-small/eval.txt}
C=${CACHE:-24}
K=${DRAFT_K:-4}
WINDOWS=${KL_WINDOWS:-16}
mkdir -p "$OUT"
for A in ${ACCEPTANCE:-0.6 0.8}; do
  common=(-m "$M" -f "$TEXT" --cache "$C" --window-len 256 --max-windows "$WINDOWS"
          --draft "synthetic:$A" --draft-k "$K" --pool "$C" --union-slots "$C")
  "$BUILD/steermoe" kl "${common[@]}" --spec-select rollback \
    --policy psr:lambda=0,n=1 psr:lambda=0.01,n=1 psr:lambda=0.02,n=1 psr:lambda=0.05,n=1 \
    psr:lambda=0.1,n=1 psr:lambda=0.2,n=1 psr:lambda=0.3,n=1 --json "$OUT/rollback-$A.json" > "$OUT/rollback-$A.md"
  for rule in block block:conf; do
    "$BUILD/steermoe" kl "${common[@]}" --spec-select "$rule" --policy exact:evict=lru \
      --json "$OUT/${rule/:/-}-$A.json" > "$OUT/${rule/:/-}-$A.md"
  done
done
python3 - "$OUT" <<'PY'
import json, os, sys
out = sys.argv[1]
rows = []
for name in sorted(os.listdir(out)):
    if not name.startswith("rollback-") or not name.endswith(".json"):
        continue
    a = name[len("rollback-"):-len(".json")]
    rb = json.load(open(os.path.join(out, name)))["configurations"]
    curve = sorted((c["replaced_fraction"], c["copies_per_token"]["total"], c["kl"]["mean"],
                    c["policy"]) for c in rb)
    for rule in ("block", "block-conf"):
        b = json.load(open(os.path.join(out, f"{rule}-{a}.json")))["configurations"][0]
        x = b["replaced_fraction"]
        # Rollback's copies at the block rule's displacement: linear between the two lambdas
        # around it (clamped to the curve's ends, flagged).
        inside = curve[0][0] <= x <= curve[-1][0]
        lo = max([p for p in curve if p[0] <= x], default=curve[0])
        hi = min([p for p in curve if p[0] >= x], default=curve[-1])
        t = 0.0 if hi[0] == lo[0] else (x - lo[0]) / (hi[0] - lo[0])
        rb_copies = lo[1] + t * (hi[1] - lo[1])
        rows.append({"acceptance": float(a), "rule": rule.replace("-", ":"),
                     "replaced_fraction": x, "block_copies_per_token": b["copies_per_token"]["total"],
                     "block_kl": b["kl"]["mean"], "tau": b["speculative"]["tau"],
                     "rollback_copies_per_token_at_same_replaced": rb_copies,
                     "within_rollback_curve": inside,
                     "rollback_over_block": rb_copies / b["copies_per_token"]["total"],
                     "rollback_curve": [{"policy": p[3], "replaced_fraction": p[0],
                                         "copies_per_token": p[1], "kl": p[2]} for p in curve]})
json.dump({"schema": "steermoe.rollback-vs-block/1", "rows": rows},
          open(os.path.join(out, "summary.json"), "w"), indent=1)
lines = ["| A | rule | replaced | block copies/token | KL | rollback copies/token at the same replaced | rollback / block |",
         "| --- | --- | --- | --- | --- | --- | --- |"]
for r in rows:
    lines.append(f"| {r['acceptance']} | {r['rule']} | {100*r['replaced_fraction']:.1f}% | "
                 f"{r['block_copies_per_token']:.2f} | {r['block_kl']:.4f} | "
                 f"{r['rollback_copies_per_token_at_same_replaced']:.2f}"
                 f"{'' if r['within_rollback_curve'] else ' (curve end)'} | "
                 f"{r['rollback_over_block']:.2f}x |")
open(os.path.join(out, "summary.md"), "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY
