#!/usr/bin/env python3
"""Writes the fixed bench/kl inputs of the plot tests (tests/data/plot/bench.json, kl.json).

The simulator reports (sim_c32.json, sim_c16.json) are real `steermoe sim` output on the shipped
synthetic trace:

    T=data/traces/synth-olmoe
    for C in 32 16; do steermoe sim --trace $T --calib $T/calib.smcal --profile rtx4090-olmoe \
      --cache $C --policy exact:evict=lru exact:evict=a,n=1 cacheprior:lambda=0.2 \
      psr:lambda=0.2,n=1 psr:lambda=0.3,n=1 --json tests/data/plot/sim_c$C.json; done

The bench and kl files are SYNTHETIC (seeded noise around the simulated latencies and made-up
KL values), in the schemas of src/eval/README.md, only so that every plot has fixed input.
"""
import json
import random
from pathlib import Path

DATA = Path(__file__).resolve().parents[2] / "tests" / "data" / "plot"
KL = {"exact:evict=lru": 0.0, "exact:n=1,evict=a": 0.0, "cacheprior:lambda=0.2,evict=lru": 0.05,
      "psr:lambda=0.2,n=1,evict=a": 0.02, "psr:lambda=0.3,n=1,evict=a": 0.035}


def main():
    rng = random.Random(13)
    bench = {"schema": "steermoe.bench/1", "model": "synthetic fixture", "file": "fixture.txt",
             "rounds": 3, "tokens_per_round": 64, "configurations": []}
    kl = {"schema": "steermoe.kl/1", "model": "synthetic fixture", "file": "fixture.txt",
          "window": 256, "tokens": 4096, "configurations": []}
    floor = None
    for cache in (32, 16):
        sim = json.loads((DATA / f"sim_c{cache}.json").read_text())
        for r in sim["results"]:
            floor = r["compute_floor_ms"]
            base = r["ms_per_token"]["mean"] * 1.04
            rounds = []
            for i in range(3):
                mean = base * (1 + rng.gauss(0, 0.01))
                token_ms = [round(mean * rng.lognormvariate(0, 0.25) / 1.03, 4) for _ in range(64)]
                rounds.append({"round": i, "tokens": 64,
                               "ms_per_token": {"mean": mean,
                                                "p50": sorted(token_ms)[32],
                                                "p99": max(token_ms)},
                               "copies_per_token": r["copies_per_token"],
                               "prefetch_per_token": r["prefetch_per_token"],
                               "stall_ms_per_token": r["stall_ms_per_token"],
                               "host_ms_per_token": r["host_ms_per_token"],
                               "token_ms": token_ms})
            name = f"{r['policy']}@{cache}"
            bench["configurations"].append({"name": name, "policy": r["policy"], "cache": cache,
                                            "residency": cache / 64, "resident": False,
                                            "rounds": rounds})
            k = KL[r["policy"]] * (1.0 if cache == 32 else 1.8)
            half = 0.15 * k
            kl["configurations"].append({"name": name, "policy": r["policy"], "cache": cache,
                                         "residency": cache / 64,
                                         "kl": {"mean": k, "se": half / 1.96,
                                                "ci_low": k - half, "ci_high": k + half},
                                         "perplexity": 66.12 * (1 + k), "perplexity_exact": 66.12,
                                         "top1_agreement": 1 - 2 * k, "replaced_fraction": 2 * k,
                                         "copies_per_token": r["copies_per_token"]})
    rounds = []
    for i in range(3):
        token_ms = [round(floor * rng.lognormvariate(0, 0.05), 4) for _ in range(64)]
        rounds.append({"round": i, "tokens": 64,
                       "ms_per_token": {"mean": sum(token_ms) / 64, "p50": sorted(token_ms)[32],
                                        "p99": max(token_ms)},
                       "copies_per_token": {"total": 0, "demand": 0, "prefetch": 0},
                       "prefetch_per_token": {"in_time": 0, "late": 0, "unused": 0,
                                              "dropped_stale": 0},
                       "token_ms": token_ms})
    bench["configurations"].append({"name": "resident", "policy": "exact:evict=lru", "cache": 0,
                                    "residency": 1.0, "resident": True, "rounds": rounds})
    (DATA / "bench.json").write_text(json.dumps(bench, indent=1) + "\n")
    (DATA / "kl.json").write_text(json.dumps(kl, indent=1) + "\n")


if __name__ == "__main__":
    main()
