#!/usr/bin/env python3
"""steermoe and llama.cpp decoding the same GGUF file under the same memory budget; one JSON.

A model bigger than the budget: each engine runs in a cgroup v1 memory cgroup of --budget bytes
(page cache charged there, as on a machine with that little RAM), page cache dropped before every
run (cold for both), the engines alternating from round to round, same threads, same number of
generated tokens. What each runs:

  llama.cpp: llama-bench -m FILE -p 0 -n N -t T -r 1 --load-mode mmap --repack 0 -o json
             (mmap: the page cache is its expert cache; repacking copies the weights into
             anonymous memory, which no budget under the file size holds)
  steermoe:  steermoe run -m FILE -p PROMPT -n N -t T --link disk --residency R --policy P
             (experts read from the file with O_DIRECT into R of each layer's experts in RAM)

Both route by the random weights' own routers (exact routing for llama.cpp); steermoe's PSR
routes cache-aware, so its text differs from exact routing (`kl` measures by how much on a real
model). Decode tok/s is each engine's own figure (llama-bench: tg; steermoe run: its decode
line), ms/token = 1000 / tok/s. Needs root (cgroup and drop_caches).

  python3 bench/peers/budget_compare.py --model /tmp/steermoe-ssd/olmoe-1b-7b-q4_k_m.gguf \
      --budget 2.6G --residency 0.25 --policy psr:lambda=0.3,n=1 exact:evict=lru
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time

CG = "/sys/fs/cgroup/memory"


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def parse_bytes(text):
    m = re.fullmatch(r"([0-9.]+)\s*([KMGT]?)(i?B?)", text.strip())
    if not m:
        raise SystemExit(f"--budget: expected bytes like 2.6G, found '{text}'")
    scale = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}[m.group(2)]
    if m.group(3) == "B" and m.group(2):
        scale = {"K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}[m.group(2)]
    return int(float(m.group(1)) * scale)


def drop_caches():
    subprocess.run(["sync"], check=True)
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def in_cgroup(name, limit, cmd):
    """Runs cmd inside a fresh memory cgroup limited to `limit`; returns (stdout, stderr, rc, peak)."""
    path = os.path.join(CG, name)
    if os.path.isdir(path):
        os.rmdir(path)
    os.mkdir(path)
    try:
        with open(os.path.join(path, "memory.limit_in_bytes"), "w") as f:
            f.write(str(limit))
        # Swap would let the budget leak; these machines have none, say so when they do.
        shell = f"echo $$ > {path}/cgroup.procs && exec \"$@\""
        p = subprocess.run(["bash", "-c", shell, "x"] + cmd, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
        peak = int(open(os.path.join(path, "memory.max_usage_in_bytes")).read())
        oom = open(os.path.join(path, "memory.oom_control")).read()
        killed = "oom_kill 0" not in oom and "oom_kill" in oom
        return p.stdout, p.stderr, p.returncode, peak, killed
    finally:
        for _ in range(50):
            try:
                os.rmdir(path)
                break
            except OSError:
                time.sleep(0.1)


def run_llama(a):
    cmd = [os.path.join(a.llama, "build/bin/llama-bench"), "-m", a.model, "-p", "0", "-n",
           str(a.n), "-t", str(a.threads), "-r", "1", "--load-mode", "mmap", "--repack", "0",
           "-o", "json"]
    log("+", " ".join(cmd))
    out, err, rc, peak, killed = in_cgroup("steermoe-peer-llama", a.budget_bytes, cmd)
    if rc != 0:
        return {"error": f"exit {rc}{' (out of memory)' if killed else ''}: {err[-500:]}",
                "peak_bytes": peak}
    rows = json.loads(out)
    return {"tok_s": rows[0]["avg_ts"], "peak_bytes": peak}


def run_steermoe(a, policy):
    cmd = [os.path.join(a.build, "steermoe"), "run", "-m", a.model, "-p", a.prompt, "-n",
           str(a.n), "-t", str(a.threads), "--link", "disk", "--residency", str(a.residency),
           "--policy", policy, "--temp", "0", "--ignore-eos", "-c", "256"]
    if a.calib:
        cmd += ["--calib", a.calib]
    log("+", " ".join(cmd))
    out, err, rc, peak, killed = in_cgroup("steermoe-peer-steermoe", a.budget_bytes, cmd)
    if rc != 0:
        return {"error": f"exit {rc}{' (out of memory)' if killed else ''}: {err[-500:]}",
                "peak_bytes": peak}
    m = re.search(r"decode: (\d+) tokens in [0-9.]+ ms \(([0-9.]+) tok/s", err)
    copies = re.search(r"copies/token: ([0-9.]+) demand \+ ([0-9.]+) prefetch", err)
    stall = re.search(r"stall ([0-9.]+) ms/token", err)
    return {"tok_s": float(m.group(2)), "peak_bytes": peak,
            "demand_per_token": float(copies.group(1)) if copies else None,
            "prefetch_per_token": float(copies.group(2)) if copies else None,
            "stall_ms_per_token": float(stall.group(1)) if stall else None}


def summary(values):
    return {"median": statistics.median(values), "min": min(values), "max": max(values),
            "n": len(values)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True, help="GGUF file both engines read")
    ap.add_argument("--budget", required=True, help="memory budget, e.g. 2.6G (page cache counted)")
    ap.add_argument("--residency", type=float, default=0.25)
    ap.add_argument("--policy", nargs="+", default=["psr:lambda=0.3,n=1"])
    ap.add_argument("--calib", default="", help="steermoe calibration (.smcal)")
    ap.add_argument("--llama", default="/work/llama", help="build_llama.sh's folder")
    ap.add_argument("--build", default="build")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("-n", type=int, default=32, help="tokens generated per run")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--prompt", default="The experts of a mixture")
    a = ap.parse_args()
    a.budget_bytes = parse_bytes(a.budget)
    if os.geteuid() != 0:
        raise SystemExit("needs root: a memory cgroup per run and drop_caches")
    swap = [l for l in open("/proc/swaps").read().splitlines()[1:] if l.strip()]
    result = {"model": a.model, "model_bytes": os.path.getsize(a.model),
              "budget_bytes": a.budget_bytes, "threads": a.threads, "tokens": a.n,
              "residency": a.residency, "swap": bool(swap),
              "cpu": re.search(r"model name\s*:\s*(.*)", open("/proc/cpuinfo").read()).group(1),
              "rounds": []}
    engines = [("llama.cpp", None)] + [(f"steermoe {p}", p) for p in a.policy]
    for r in range(a.rounds):
        order = engines if r % 2 == 0 else list(reversed(engines))
        row = {"load": os.getloadavg()[0]}
        for name, policy in order:
            drop_caches()
            row[name] = run_llama(a) if policy is None else run_steermoe(a, policy)
            log(name, row[name])
        result["rounds"].append(row)
    per = {}
    for name, _ in engines:
        ok = [x[name]["tok_s"] for x in result["rounds"] if "tok_s" in x[name]]
        per[name] = {"tok_s": summary(ok) if ok else None,
                     "peak_bytes_max": max(x[name]["peak_bytes"] for x in result["rounds"])}
        if ok and name != "llama.cpp":
            ratios = [x[name]["tok_s"] / x["llama.cpp"]["tok_s"] for x in result["rounds"]
                      if "tok_s" in x[name] and "tok_s" in x["llama.cpp"]]
            if ratios:
                per[name]["speed_vs_llama_cpp"] = summary(ratios)
    result["summary"] = per
    json.dump(result, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
