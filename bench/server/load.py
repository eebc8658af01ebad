#!/usr/bin/env python3
"""Load test of `steermoe serve`: N concurrent clients for S seconds (default 8 clients, 60 s)
against the shipped model on loopback; half the requests stream. Prints JSON: requests/s,
completed, 503s, malformed, p50/p99 latency of completed requests, and the server's RSS at
start, after 5 s (warm), every 10 s and at the end. Standard library only.

  python3 bench/server/load.py [--steermoe build/steermoe] [--clients 8] [--seconds 60]
"""
import argparse
import http.client
import json
import os
import random
import subprocess
import sys
import threading
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")


def rss_kb(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steermoe", default=os.path.join(ROOT, "build", "steermoe"))
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "steer-olmoe-small"))
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--queue", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=16)
    a = ap.parse_args()
    srv = subprocess.Popen([a.steermoe, "serve", "-m", a.model, "--port", "0", "--quiet",
                            "--queue", str(a.queue)], stdout=subprocess.PIPE, text=True)
    port = int(srv.stdout.readline().split()[-1])
    rss_before = rss_kb(srv.pid)
    lock = threading.Lock()
    stats = {"completed": 0, "busy_503": 0, "malformed": 0, "errors": 0, "latency": []}
    t_end = time.time() + a.seconds

    def client(k):
        rng = random.Random(k)
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        while time.time() < t_end:
            stream = rng.random() < 0.5
            body = json.dumps({"prompt": "import os\ndef main(", "temperature": 0.7, "seed": rng.randrange(1 << 30),
                               "max_tokens": rng.randint(1, a.max_tokens), "stream": stream})
            t0 = time.time()
            try:
                conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
                res = conn.getresponse()
                data = res.read()
            except Exception:
                with lock:
                    stats["errors"] += 1
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
                continue
            dt = time.time() - t0
            ok = False
            if res.status == 200:
                if stream:
                    ok = data.endswith(b"data: [DONE]\n\n")
                else:
                    try:
                        ok = isinstance(json.loads(data)["choices"][0]["text"], str)
                    except Exception:
                        ok = False
                key = "completed" if ok else "malformed"
            elif res.status == 503:
                key = "busy_503" if b'"error"' in data and res.getheader("Retry-After") else "malformed"
                time.sleep(0.01)
            else:
                key = "malformed"
            with lock:
                stats[key] += 1
                if key == "completed":
                    stats["latency"].append(dt)

    threads = [threading.Thread(target=client, args=(k,)) for k in range(a.clients)]
    t0 = time.time()
    rss_over_time = []

    def sample_rss():
        while time.time() < t_end:
            rss_over_time.append([round(time.time() - t0), rss_kb(srv.pid)])
            time.sleep(10)

    sampler = threading.Thread(target=sample_rss, daemon=True)
    for t in threads:
        t.start()
    sampler.start()
    time.sleep(min(5.0, a.seconds / 2))
    rss_warm = rss_kb(srv.pid)  # after every engine buffer has been touched once
    for t in threads:
        t.join()
    wall = time.time() - t0
    rss_after = rss_kb(srv.pid)
    srv.terminate()
    srv.wait()
    lat = sorted(stats["latency"])
    pct = lambda p: lat[min(len(lat) - 1, int(p * len(lat)))] * 1e3 if lat else 0.0
    total = stats["completed"] + stats["busy_503"] + stats["malformed"] + stats["errors"]
    print(json.dumps({"clients": a.clients, "seconds": round(wall, 1), "requests": total,
                      "requests_per_s": round(total / wall, 1),
                      "completed_per_s": round(stats["completed"] / wall, 1),
                      "completed": stats["completed"], "busy_503": stats["busy_503"],
                      "malformed": stats["malformed"], "connection_errors": stats["errors"],
                      "latency_ms_p50": round(pct(0.5), 1), "latency_ms_p99": round(pct(0.99), 1),
                      "rss_kb_at_start": rss_before, "rss_kb_after_5s": rss_warm,
                      "rss_kb_at_end": rss_after, "rss_kb_over_time": rss_over_time}, indent=1))
    sys.exit(1 if stats["malformed"] or stats["errors"] else 0)


if __name__ == "__main__":
    main()
