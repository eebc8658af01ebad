#!/usr/bin/env bash
# The speculative-decoding figures of docs/figures.md ("Speculative decoding on the shipped
# pair"): steer-olmoe-small verified with drafts of steer-drafter-small at P = C = 24 of 64 (the
# paper's Table 9 setup) and at 50% (C = 32), greedy, against autoregressive decoding.
#   - tau, copies per committed token by kind and ms per committed token: `bench --generate 64`
#     on 20 prompts cut from the evaluation split (experts resident: copies are the logical
#     insertions a link would make);
#   - KL to exact routing and perplexity: `kl` on the evaluation split, teacher forced (`kl
#     --draft`: drafts accepted while they equal the text, so its tau is the text's, lower);
#   - ms per committed token and the copies the link made on the disk link and on the RTX 4090
#     profile (`--link sim:rtx4090-olmoe`), with AR also at 2C slots (the P + U a verification
#     block holds);
#   then bench/speculative/summarize.py writes OUT/summary.{json,md}.
# Usage: bench/speculative/figures.sh [BUILD_DIR] [OUT_DIR]
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${1:-build}
OUT=${2:-speculative-figures}
M=${MODEL:-models/steer-olmoe-small}
D=${DRAFTER:-models/steer-drafter-small}
TEXT=${TEXT:-data/text-small/eval.txt}
K=${DRAFT_K:-4}
GEN=${GENERATE:-64}
ROUNDS=${ROUNDS:-3}
KL_WINDOWS=${KL_WINDOWS:-24}
mkdir -p "$OUT"
SM="$BUILD/steermoe"

# 20 prompts: evaluation-split lines of over 60 characters, evenly spaced through the file (every
# source of the split contributes).
awk 'length($0) > 60' "$TEXT" > "$OUT/long-lines.txt"
n=$(wc -l < "$OUT/long-lines.txt")
awk -v n="$n" 'BEGIN { step = int(n / 20) } (NR - 1) % step == 0 && c < 20 { print; c++ }' \
  "$OUT/long-lines.txt" > "$OUT/prompts.txt"
rm "$OUT/long-lines.txt"

AR=(exact:evict=lru psr:lambda=0.25,n=1 psr:lambda=0.3,n=1)
common=(-m "$M" --generate "$GEN" --prompts "$OUT/prompts.txt" --rounds "$ROUNDS" --warmup 1 --no-floor)
for C in 24 32; do
  echo "== C $C: bench (resident: logical copies) and kl" >&2
  "$SM" bench "${common[@]}" --cache "$C" --policy "${AR[@]}" --json "$OUT/bench-ar-$C.json" \
    > "$OUT/bench-ar-$C.md"
  "$SM" kl -m "$M" -f "$TEXT" --cache "$C" --policy "${AR[@]}" --window-len 256 \
    --max-windows "$KL_WINDOWS" --json "$OUT/kl-ar-$C.json" > "$OUT/kl-ar-$C.md"
  for rule in exact block block:conf rollback; do
    policy=exact:evict=lru
    [ "$rule" = rollback ] && policy=psr:lambda=0.3,n=1
    tag=${rule/:/-}
    spec=(--draft "$D" --draft-k "$K" --spec-select "$rule" --pool "$C" --union-slots "$C")
    "$SM" bench "${common[@]}" --cache "$C" --policy "$policy" "${spec[@]}" \
      --json "$OUT/bench-sd-$tag-$C.json" > "$OUT/bench-sd-$tag-$C.md"
    # Block rules: also the section-7 replay (each block verified again with the text's tokens
    # at the draft positions; the share of committed token-layers whose set the drafts changed).
    replay=()
    [ "$rule" != rollback ] && replay=(--counterfactual)
    "$SM" kl -m "$M" -f "$TEXT" --cache "$C" --policy "$policy" "${spec[@]}" "${replay[@]}" \
      --window-len 256 --max-windows "$KL_WINDOWS" --json "$OUT/kl-sd-$tag-$C.json" \
      > "$OUT/kl-sd-$tag-$C.md"
  done
  for link in disk sim:rtx4090-olmoe; do
    tag=${link%%:*}
    echo "== C $C: $link" >&2
    "$SM" bench "${common[@]}" --cache "$C" --policy "${AR[@]}" --link "$link" \
      --json "$OUT/time-$tag-ar-$C.json" > "$OUT/time-$tag-ar-$C.md"
    # Autoregressive decoding with the slots a verification block may use (P + U = 2C).
    "$SM" bench "${common[@]}" --cache "$((2 * C > 64 ? 64 : 2 * C))" \
      --policy exact:evict=lru psr:lambda=0.3,n=1 --link "$link" \
      --json "$OUT/time-$tag-ar2-$C.json" > "$OUT/time-$tag-ar2-$C.md"
    for rule in exact block block:conf rollback; do
      policy=exact:evict=lru
      [ "$rule" = rollback ] && policy=psr:lambda=0.3,n=1
      tag2=${rule/:/-}
      "$SM" bench "${common[@]}" --cache "$C" --policy "$policy" --link "$link" \
        --draft "$D" --draft-k "$K" --spec-select "$rule" --pool "$C" --union-slots "$C" \
        --json "$OUT/time-$tag-sd-$tag2-$C.json" > "$OUT/time-$tag-sd-$tag2-$C.md"
    done
  done
done
python3 bench/speculative/summarize.py "$OUT"
cat "$OUT/summary.md"
