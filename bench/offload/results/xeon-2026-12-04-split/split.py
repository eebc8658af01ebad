#!/usr/bin/env python3
"""Measured against simulated, per probed round: stall and compute (ms/token).

   split.py BENCH.json   (a `bench --probe-rounds N --predict PROFILE --json` file)
"""
import json
import sys

doc = json.load(open(sys.argv[1]))
print(f"compute scale {doc.get('compute_scale', 0):.3f}")
print("| row | measured ms | stall | compute | simulated ms | stall | compute | probe GB/s | late/token |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
for c in doc["configurations"]:
    if c.get("resident"):
        continue
    for r in c["rounds"]:
        mean = r["ms_per_token"]["mean"]
        stall = r["stall_ms_per_token"]["total"]
        compute = mean - stall - r["host_ms_per_token"]
        print(f"| {c['name']} | {mean:.2f} | {stall:.2f} | {compute:.2f} | "
              f"{r['simulated_probed_ms_per_token']:.2f} | "
              f"{r['simulated_probed_stall_ms_per_token']:.2f} | "
              f"{r['simulated_probed_compute_ms_per_token']:.2f} | "
              f"{r['probe']['gb_per_s']:.2f} | {r['prefetch_per_token']['late']:.2f} |")
