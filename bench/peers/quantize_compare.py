#!/usr/bin/env python3
"""`steermoe quantize` and llama.cpp's `llama-quantize` on the same BF16 GGUF; ONE JSON on stdout.

For every scheme, --rounds rounds; in each both tools quantize the source with the same thread
count, the order alternating from round to round. Per run: wall seconds, CPU seconds (user +
system of the tool's process, from wait4) and the output's bytes (the output is deleted after
each run). Per scheme: medians, and per round the ratios llama / steermoe of wall time and of
CPU time (> 1: steermoe faster). The CPU ratio is the per-thread comparison, the one that does
not depend on how well each tool keeps its threads busy.

The source is read once into the page cache first (both tools then read it from memory), and
--max-load (default 1.5) waits before each scheme until the 1-minute load is under it.

  python3 bench/peers/quantize_compare.py --llama /work/llama --build build \\
      --src /tmp/peers/olmoe-1b-7b-8l-bf16.gguf --types q3_k_m,q2_k,q4_k_m --threads 2
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare import LLAMA_TYPES, log, machine, wait_for_quiet, warm_file  # noqa: E402

LLAMA_QUANT_TYPES = dict(LLAMA_TYPES, q3_k_l="Q3_K_L", q3_k_s="Q3_K_S", q5_k_s="Q5_K_S",
                         q4_0="Q4_0", q5_0="Q5_0", q8_0="Q8_0")


def timed(cmd):
    """(wall s, CPU s) of cmd; raises naming the tool when it fails."""
    log("+", " ".join(cmd))
    start = time.monotonic()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    # wait4 gives the child's own rusage (not every child's so far, as RUSAGE_CHILDREN would).
    stderr = p.stderr.read()
    _, status, usage = os.wait4(p.pid, 0)
    wall = time.monotonic() - start
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode != 0:
        raise RuntimeError(f"{cmd[0]} failed ({p.returncode}): "
                           f"{stderr.decode(errors='replace')[-2000:]}")
    return wall, usage.ru_utime + usage.ru_stime


def one_run(a, engine, scheme):
    out = os.path.join(a.out_dir, f"quantize-compare-{engine}-{scheme}.gguf")
    if engine == "steermoe":
        cmd = [a.steermoe, "quantize", "-q", "-m", a.src, "--type", scheme, "-o", out,
               "-t", str(a.threads)]
    else:
        cmd = [a.llama_quantize, a.src, out, LLAMA_QUANT_TYPES[scheme], str(a.threads)]
    try:
        wall, cpu = timed(cmd)
        size = os.path.getsize(out)
    finally:
        if os.path.exists(out):
            os.remove(out)
    return {"engine": engine, "wall_s": round(wall, 2), "cpu_s": round(cpu, 2), "bytes": size}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--llama", required=True, help="llama.cpp tree built by build_llama.sh")
    ap.add_argument("--build", default="build", help="steermoe build folder (default: build)")
    ap.add_argument("--src", required=True, help="BF16 (or F32/F16) GGUF both tools quantize")
    ap.add_argument("--types", default="q3_k_m,q2_k,q4_k_m",
                    help="schemes, comma-separated (default: q3_k_m,q2_k,q4_k_m)")
    ap.add_argument("--threads", type=int, default=os.cpu_count(),
                    help="threads for both tools (default: every core)")
    ap.add_argument("--rounds", type=int, default=2, help="rounds per scheme (default: 2)")
    ap.add_argument("--out-dir", default="/tmp", help="where outputs are written, then deleted")
    ap.add_argument("--max-load", type=float, default=1.5,
                    help="wait before each scheme until the 1-minute load is below (default 1.5)")
    ap.add_argument("--max-wait", type=float, default=600, help="longest wait for quiet, s")
    a = ap.parse_args()
    a.steermoe = os.path.join(a.build, "steermoe")
    a.llama_quantize = os.path.join(a.llama, "build", "bin", "llama-quantize")
    types = [t for t in a.types.split(",") if t]
    for t in types:
        if t not in LLAMA_QUANT_TYPES or LLAMA_QUANT_TYPES[t] is None:
            ap.error(f"--types: '{t}' is not a scheme both tools write "
                     f"(one of {', '.join(sorted(k for k, v in LLAMA_QUANT_TYPES.items() if v))})")
    for path, what in ((a.steermoe, "--build"), (a.llama_quantize, "--llama"), (a.src, "--src")):
        if not os.path.exists(path):
            ap.error(f"{what}: {path} does not exist")
    if a.rounds < 1 or a.threads < 1:
        ap.error("--rounds and --threads must be at least 1")

    log(f"reading {a.src} into the page cache")
    warm_file(a.src)
    report = {"schema": "steermoe.quantize_compare/1",
              "command": " ".join(["python3"] + sys.argv), "machine": machine(), "src": a.src,
              "src_bytes": os.path.getsize(a.src), "threads": a.threads, "types": []}
    for t in types:
        load_start = wait_for_quiet(a.max_load, a.max_wait)
        runs = []
        for r in range(a.rounds):
            order = ["llama", "steermoe"] if r % 2 == 0 else ["steermoe", "llama"]
            got = {e: one_run(a, e, t) for e in order}
            for e in order:
                runs.append(dict(got[e], round=r))
            log(f"{t} round {r}: steermoe {got['steermoe']['wall_s']} s wall / "
                f"{got['steermoe']['cpu_s']} s CPU, llama-quantize {got['llama']['wall_s']} / "
                f"{got['llama']['cpu_s']}")
        def per(engine, key):
            return [x[key] for x in runs if x["engine"] == engine]
        cpu_ratios = [l / s for l, s in zip(per("llama", "cpu_s"), per("steermoe", "cpu_s"))]
        wall_ratios = [l / s for l, s in zip(per("llama", "wall_s"), per("steermoe", "wall_s"))]
        report["types"].append({
            "type": t, "runs": runs,
            "steermoe_wall_s": statistics.median(per("steermoe", "wall_s")),
            "llama_wall_s": statistics.median(per("llama", "wall_s")),
            "steermoe_cpu_s": statistics.median(per("steermoe", "cpu_s")),
            "llama_cpu_s": statistics.median(per("llama", "cpu_s")),
            "cpu_ratio_llama_over_steermoe": {"median": round(statistics.median(cpu_ratios), 3),
                                              "min": round(min(cpu_ratios), 3),
                                              "max": round(max(cpu_ratios), 3)},
            "wall_ratio_llama_over_steermoe": {"median": round(statistics.median(wall_ratios), 3),
                                               "min": round(min(wall_ratios), 3),
                                               "max": round(max(wall_ratios), 3)},
            "load_start": round(load_start, 2), "load_end": round(os.getloadavg()[0], 2)})
    json.dump(report, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
