#!/usr/bin/env bash
# Speculative decoding on the SSD tier (docs/figures.md, "Speculative decoding from disk"): the
# OLMoE-1B-7B-shaped Q4_K_M model of bench/offload/ssd_tier.sh, routed by the shipped model's
# trace (`bench --scores-from`), experts from disk at 25% of each layer (C 16), against a
# synthetic drafter of set acceptance A (random weights cannot draft) whose drafting cost MS
# (ms of busy drafting per draft) is swept, so that the break-even drafting cost against
# autoregressive PSR is read off: SD rollback (PSR's output, bit for bit) and SD block:conf
# (pool 16 + union 16 slots; AR at C 32 holds as many) at each MS, AR PSR and exact LRU at C 16
# and C 32, all teacher forced over the same trace windows.
#
#   bench/speculative/ssd_break_even.sh [BUILD_DIR] [OUT_DIR]
#
# Environment: DIR (/tmp/steermoe-ssd, from bench/offload/ssd_tier.sh), A (0.7), K (4),
# COSTS ("0 5 10 20"), THREADS (2), ROUNDS (3), WINDOWS (2), LEN (48). Measure on a quiet machine:
# the script waits for a 1-minute load under 1.5 before each run.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${1:-build}
OUT=${2:-ssd-speculative}
S="$BUILD/steermoe"
DIR=${DIR:-/tmp/steermoe-ssd}
A=${A:-0.7}
K=${K:-4}
COSTS=${COSTS:-0 5 10 20}
mkdir -p "$OUT"
model="$DIR/olmoe-1b-7b-q4_k_m.gguf"
[ -f "$model" ] || { echo "no $model: run bench/offload/ssd_tier.sh first" >&2; exit 1; }
. bench/bench_common/quiet.sh
common=(-m "$model" --scores-from "$DIR/real-trace" --calib models/steer-olmoe-small/calib.smcal
        --link disk -t "${THREADS:-2}" --rounds "${ROUNDS:-3}" --warmup 1 --windows "${WINDOWS:-2}"
        --window-len "${LEN:-48}" --no-floor)
quiet
"$S" bench "${common[@]}" --cache 16 --policy exact:evict=lru psr:lambda=0.3,n=1 \
  --json "$OUT/ar-16.json" > "$OUT/ar-16.md"
quiet
"$S" bench "${common[@]}" --cache 32 --policy exact:evict=lru psr:lambda=0.3,n=1 \
  --json "$OUT/ar-32.json" > "$OUT/ar-32.md"
for ms in $COSTS; do
  quiet
  "$S" bench "${common[@]}" --cache 16 --policy psr:lambda=0.3,n=1 --draft "synthetic:$A,$ms" \
    --draft-k "$K" --spec-select rollback --json "$OUT/sd-rollback-$ms.json" > "$OUT/sd-rollback-$ms.md"
  quiet
  "$S" bench "${common[@]}" --cache 16 --policy exact:evict=lru --draft "synthetic:$A,$ms" \
    --draft-k "$K" --spec-select block:conf --pool 16 --union-slots 16 \
    --json "$OUT/sd-block-conf-$ms.json" > "$OUT/sd-block-conf-$ms.md"
done
python3 - "$OUT" "$COSTS" <<'PY'
import json, os, statistics, sys
out, costs = sys.argv[1], [float(c) for c in sys.argv[2].split()]
def rows(name):
    doc = json.load(open(os.path.join(out, name)))
    res = []
    for c in doc["configurations"]:
        ms = [r["ms_per_token"]["mean"] for r in c["rounds"]]
        r0 = c["rounds"]
        res.append({"name": c["name"], "ms": statistics.fmean(ms),
                    "ms_rounds": ms,
                    "copies": statistics.fmean(r["copies_per_token"]["total"] for r in r0),
                    "stall": statistics.fmean(r["stall_ms_per_token"]["total"] for r in r0),
                    "tau": statistics.fmean(r.get("speculative", {}).get("tau", 0) for r in r0)})
    return res
table = {"ar-16": rows("ar-16.json"), "ar-32": rows("ar-32.json")}
for rule in ("rollback", "block-conf"):
    table[rule] = [dict(rows(f"sd-{rule}-{int(c) if c.is_integer() else c}.json")[0], cost=c)
                   for c in costs]
ar_psr = table["ar-16"][1]["ms"]
summary = {"schema": "steermoe.ssd-speculative/1", "runs": table, "break_even_ms_per_draft": {}}
lines = ["| decoding | drafting ms per draft | ms / committed token | tau | copies / token | stall ms |",
         "| --- | --- | --- | --- | --- | --- |"]
for key in ("ar-16", "ar-32"):
    for r in table[key]:
        lines.append(f"| {r['name']} | - | {r['ms']:.1f} | - | {r['copies']:.2f} | {r['stall']:.1f} |")
for rule in ("rollback", "block-conf"):
    pts = table[rule]
    for r in pts:
        lines.append(f"| {r['name']} | {r['cost']:g} | {r['ms']:.1f} | {r['tau']:.2f} | "
                     f"{r['copies']:.2f} | {r['stall']:.1f} |")
    # ms per committed token is linear in the drafting cost: least squares, then where it meets
    # AR PSR's ms per token.
    xs, ys = [r["cost"] for r in pts], [r["ms"] for r in pts]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    icept = my - slope * mx
    be = (ar_psr - icept) / slope if slope > 0 else None
    summary["break_even_ms_per_draft"][rule] = {"intercept_ms": icept, "slope": slope,
                                               "break_even": be, "ar_psr_ms": ar_psr}
    lines.append(f"\n{rule}: ms/token = {icept:.1f} + {slope:.2f} x MS; AR PSR {ar_psr:.1f} ms: "
                 + (f"break-even at {be:.1f} ms per draft" if be is not None else "no break-even"))
json.dump(summary, open(os.path.join(out, "summary.json"), "w"), indent=1)
open(os.path.join(out, "summary.md"), "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY
