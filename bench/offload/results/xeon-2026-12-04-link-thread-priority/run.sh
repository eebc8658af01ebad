#!/bin/bash
# NOT in the tree: apply experiment.patch (git apply) and rebuild before run.sh; STEERMOE_LINK_THREAD_PRIO=normal|fifo|nice sets the disk link copy thread's priority.
# Result (2026-12-04 night): 50% fifo/normal 0.945-0.979 (medians), 25% 1.13-1.26: not adopted.
cd /work/main
S=build/steermoe; M=/tmp/steermoe-ssd/olmoe-1b-7b-q4_k_m.gguf; T=/tmp/steermoe-ssd/real-trace; CAL=models/steer-olmoe-small/calib.smcal
RES=${1:-0.5}; O=${2:-/tmp/prio}; PAIRS=${3:-2}
for pair in $(seq 1 $PAIRS); do
  for mode in ${MODES:-normal fifo}; do
    echo "bench $mode pair $pair $(date) $(uptime)"
    STEERMOE_LINK_THREAD_PRIO=$mode $S bench -m $M --scores-from $T --calib $CAL --link disk --residency $RES -t 2 --moe-wait ready \
      --policy exact:evict=lru cacheprior:lambda=0.3 psr:lambda=0.3,n=1 psr:lambda=0.3,n=2,gate=bonus --rounds 2 --windows 2 --window-len 48 \
      --json $O/bench-$RES-$mode-$pair.json 2>&1 | grep -E "^\| [a-z]"
  done
done
echo "done $(date)"
