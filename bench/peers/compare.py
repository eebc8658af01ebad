#!/usr/bin/env python3
"""steermoe and llama.cpp side by side on the same GGUF files; prints ONE JSON on stdout.

For every weight type (an OLMoE-1B-7B-shaped model with random weights from `steermoe
make-model`, quantized by llama.cpp's own llama-quantize, or by `steermoe quantize` with
--quantizer steermoe), every thread count and both tests, the two engines run in turn, the
order alternating from round to round:

  decode  (tg): steermoe `bench_pp_tg -n N`  vs  `llama-bench -p 0 -n N`
  prefill (pp): steermoe `bench_pp_tg -p N`  vs  `llama-bench -p N -n 0`

Both take one untimed warm-up run and --reps timed runs from an empty context; a round's figure
is the median of its reps. Reported per (type, threads, test): each engine's tok/s (median and
range over rounds), the ratio steermoe / llama.cpp per round (median and range: the interval),
and for decode the fraction of the memory floor (tok/s x bytes one token reads / read
bandwidth with the same thread count): against the bandwidth measured at start, per round
against the bandwidth measured just before that round (a virtual machine's drifts by 10-20%
over minutes), and for steermoe per timed run against a probe just before it (`bench_pp_tg
--floor`: steermoe_fraction_of_paired_floor, per round the median of its runs). One type's file is read into the page
cache before its rounds, so the file sizes need not all fit in memory at once.

Measure on a quiet machine: --max-load (default 1.5) waits before each type until the 1-minute
load average is under it; the JSON records the load at the start and end of every type.

  bench/peers/build_llama.sh /work/llama
  python3 bench/peers/compare.py --llama /work/llama --build build --dir /tmp/peers --layers 8
"""
import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time

LLAMA_TYPES = {"bf16": None, "q8_0": "Q8_0", "q4_k_m": "Q4_K_M", "q6_k": "Q6_K", "q4_0": "Q4_0",
               "q4_k_s": "Q4_K_S", "q5_k_m": "Q5_K_M", "q2_k": "Q2_K", "q3_k_m": "Q3_K_M"}


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def run(cmd, env=None):
    log("+", " ".join(cmd))
    # errors="replace": llama-quantize prints tensor names byte-truncated (not always UTF-8).
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       errors="replace", env=env)
    if p.returncode != 0:
        raise RuntimeError(f"{cmd[0]} failed ({p.returncode}): {p.stderr[-2000:]}")
    return p.stdout


def machine():
    info = {"cpu": platform.processor(), "cores": os.cpu_count()}
    try:
        text = open("/proc/cpuinfo").read()
        m = re.search(r"model name\s*:\s*(.*)", text)
        if m:
            info["cpu"] = m.group(1).strip()
        flags = set(re.search(r"flags\s*:\s*(.*)", text).group(1).split())
        info["isa_flags"] = sorted(f for f in flags if f in {
            "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512_vnni",
            "avx512_bf16", "avx_vnni"})
    except (OSError, AttributeError):
        pass
    return info


def wait_for_quiet(max_load, max_wait_s):
    start = time.time()
    while os.getloadavg()[0] >= max_load and time.time() - start < max_wait_s:
        log(f"load {os.getloadavg()[0]:.2f} >= {max_load}: waiting")
        time.sleep(30)
    return os.getloadavg()[0]


def warm_file(path):
    with open(path, "rb") as f:
        while f.read(1 << 24):
            pass


def make_models(a, types):
    os.makedirs(a.dir, exist_ok=True)
    base = os.path.join(a.dir, f"olmoe-1b-7b-{a.layers}l-bf16.gguf")
    if not os.path.exists(base):
        run([a.steermoe, "make-model", "--arch", "olmoe", "--shape", "OLMoE-1B-7B", "--random",
             "--layers", str(a.layers), "-o", base])
    files = {}
    for t in types:
        if t == "bf16":
            files[t] = base
            continue
        out = os.path.join(a.dir, f"olmoe-1b-7b-{a.layers}l-{t}-{a.quantizer}.gguf")
        if not os.path.exists(out):
            if a.quantizer == "llama":
                run([os.path.join(a.llama_bin, "llama-quantize"), base, out, LLAMA_TYPES[t], "2"])
            else:
                run([a.steermoe, "quantize", "-m", base, "--type", t, "-o", out])
        files[t] = out
    return files


def steermoe_run(a, path, threads, test, n):
    flag = "-p" if test == "pp" else "-n"
    env = dict(os.environ)
    if a.kernels:
        env["STEERMOE_KERNELS"] = a.kernels
    # Decode: --floor probes the read bandwidth just before every timed run (paired floor).
    floor = ["--floor"] if test == "tg" else []
    out = json.loads(run([a.bench_pp_tg, "-m", path, "-t", str(threads), flag, str(n), "-r",
                          str(a.reps)] + floor, env))
    paired = statistics.median(out["fraction_of_floor"]) if floor else None
    return statistics.median(out["tok_s"]), out["bytes_per_token"], out["isa"], paired


def llama_run(a, path, threads, test, n):
    p, g = (n, 0) if test == "pp" else (0, n)
    out = json.loads(run([os.path.join(a.llama_bin, "llama-bench"), "-m", path, "-t",
                          str(threads), "-p", str(p), "-n", str(g), "-r", str(a.reps), "-o",
                          "json"]))
    samples = out[0].get("samples_ts") or [out[0]["avg_ts"]]
    return statistics.median(samples), out[0].get("build_commit", "?")


def read_bandwidth(a, threads):
    """Read bytes per second of this machine with `threads` threads (bench_pp_tg --bandwidth)."""
    return json.loads(run([a.bench_pp_tg, "--bandwidth", "-t", str(threads)]))["read_bytes_per_s"]


def summary(values):
    return {"median": statistics.median(values), "min": min(values), "max": max(values),
            "values": values}


def bench_type(a, t, path, bandwidth, results, meta):
    load0 = wait_for_quiet(a.max_load, a.max_wait)
    warm_file(path)
    for threads in a.threads:
        for test, n in (("tg", a.tg), ("pp", a.pp)):
            if n <= 0:  # --tg 0 / --pp 0: that test is not run
                continue
            ours, theirs, round_bw, paired = [], [], [], []
            bytes_per_token = 0
            for r in range(a.rounds):
                order = ("steermoe", "llama") if r % 2 == 0 else ("llama", "steermoe")
                if test == "tg":  # the floor of this round: a VM's bandwidth drifts over minutes
                    round_bw.append(read_bandwidth(a, threads))
                for who in order:
                    if who == "steermoe":
                        v, bytes_per_token, meta["steermoe_isa"], f = steermoe_run(
                            a, path, threads, test, n)
                        ours.append(v)
                        paired.append(f)
                    else:
                        v, meta["llama_commit"] = llama_run(a, path, threads, test, n)
                        theirs.append(v)
            ratios = [o / l for o, l in zip(ours, theirs)]
            row = {"type": t, "threads": threads, "test": f"{test}{n}",
                   "steermoe_tok_s": summary(ours), "llama_tok_s": summary(theirs),
                   "ratio": summary(ratios), "bytes_per_token": bytes_per_token}
            if test == "tg":
                bw = bandwidth[threads]
                row["steermoe_fraction_of_floor"] = statistics.median(ours) * bytes_per_token / bw
                row["llama_fraction_of_floor"] = statistics.median(theirs) * bytes_per_token / bw
                # Each round against the bandwidth measured just before it.
                row["read_bandwidth_gb_s_per_round"] = [b / 1e9 for b in round_bw]
                row["steermoe_fraction_of_round_floor"] = summary(
                    [o * bytes_per_token / b for o, b in zip(ours, round_bw)])
                row["llama_fraction_of_round_floor"] = summary(
                    [o * bytes_per_token / b for o, b in zip(theirs, round_bw)])
                # steermoe's runs each against a probe just before it (bench_pp_tg --floor):
                # per round the median over its reps. llama-bench cannot be paired this way.
                row["steermoe_fraction_of_paired_floor"] = summary(paired)
            results.append(row)
            log(json.dumps({k: row[k] for k in ("type", "threads", "test")}),
                f"ratio {row['ratio']['median']:.3f}")
    meta["load"].append({"type": t, "start": load0, "end": os.getloadavg()[0]})


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--llama", default="/work/llama", help="llama.cpp dir (build_llama.sh's)")
    ap.add_argument("--build", default="build", help="steermoe build dir")
    ap.add_argument("--dir", default="/tmp/steermoe-peers", help="where the GGUF files go")
    ap.add_argument("--layers", type=int, default=8, help="OLMoE-1B-7B layers kept (16: all)")
    ap.add_argument("--types", default="bf16,q8_0,q4_k_m,q6_k")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=3, help="timed runs per engine per round")
    ap.add_argument("--tg", type=int, default=48, help="decode tokens (0: no decode test)")
    ap.add_argument("--pp", type=int, default=128, help="prefill tokens (0: no prefill test)")
    ap.add_argument("--quantizer", choices=("llama", "steermoe"), default="llama")
    ap.add_argument("--kernels", default="", help="STEERMOE_KERNELS for steermoe (e.g. avx2)")
    ap.add_argument("--max-load", type=float, default=1.5)
    ap.add_argument("--max-wait", type=float, default=3600, help="seconds to wait for quiet")
    a = ap.parse_args()
    a.threads = [int(x) for x in a.threads.split(",")]
    a.llama_bin = os.path.join(a.llama, "build", "bin")
    a.steermoe = os.path.join(a.build, "steermoe")
    a.bench_pp_tg = os.path.join(a.build, "bench", "peers", "bench_pp_tg")
    types = a.types.split(",")
    files = make_models(a, types)
    bandwidth = {threads: read_bandwidth(a, threads) for threads in a.threads}
    meta = {"load": []}
    results = []
    for t in types:
        bench_type(a, t, files[t], bandwidth, results, meta)
    version = open(os.path.join(a.llama, "VERSION")).read().strip() if os.path.exists(
        os.path.join(a.llama, "VERSION")) else "?"
    report = {
        "machine": machine(),
        "model": f"OLMoE-1B-7B shape, random weights, {a.layers} layers",
        "quantizer": a.quantizer,
        "steermoe_kernels": a.kernels or "default",
        "steermoe_isa": meta.get("steermoe_isa"),
        "llama_cpp": {"version": version, "commit": meta.get("llama_commit")},
        "rounds": a.rounds, "reps": a.reps,
        "read_bandwidth_gb_s": {str(k): v / 1e9 for k, v in bandwidth.items()},
        "load_1min": meta["load"],
        "results": results,
    }
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
