DIR=/tmp/ssd bench/offload/ssd_tier.sh build bench/offload/results/xeon-m167-2026-12-07   # 2026-12-07, Intel Xeon family 6 model 167, 2 cores; the model made by make-model --type q4_k_m
