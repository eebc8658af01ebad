#!/usr/bin/env python3
"""Malformed and hostile clients against `steermoe serve` on loopback, for S seconds (default
60): K clients send malformed requests (random bytes, truncated and deeply nested JSON, wrong
types, unknown fields, bad framing: conflicting Content-Length, Content-Length with chunked, a
header line without a colon) over keep-alive connections, while 64 slowloris connections
trickle a header byte per second, half-closing clients send a request and shut their writing
side, and one probe asks /health every second. Prints JSON: requests answered per second, p50
and p99 answer latency, statuses, probe latency (max), slowloris connections dropped by the
server, and the server's RSS every 10 s. Standard library only.

  python3 bench/server/hostile.py [--steermoe build/steermoe] [--seconds 60] [--clients 4]
"""
import argparse
import http.client
import json
import os
import random
import socket
import subprocess
import sys
import threading
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
PATHS = ["/v1/completions", "/v1/chat/completions", "/tokenize", "/detokenize"]
KEYS = ["prompt", "max_tokens", "temperature", "top_p", "top_k", "logprobs", "echo", "stop",
        "n", "stream", "seed", "messages", "tokens", "steermoe", "unknown_field", "model",
        "best_of", "content", "store", "min_p"]
VALUES = [None, True, -1, 0, 1, 21, -99999999999, 1e308, -0.5, 3.5, "", "x", "\u00e9", [], {},
          [1, 2], ["a"], {"k": 1}, 99999999999, [[1, 2], [3]]]


def rss_kb(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def malformed_body(rng):
    kind = rng.randrange(6)
    if kind == 0:
        return bytes(rng.randrange(256) for _ in range(rng.randrange(200)))
    if kind == 1:
        s = json.dumps({"prompt": "hello", "max_tokens": 1}).encode()
        return s[:rng.randrange(len(s))]
    if kind == 2:
        return b"[" * (100 + rng.randrange(2000))
    body = {KEYS[rng.randrange(len(KEYS))]: VALUES[rng.randrange(len(VALUES))]
            for _ in range(rng.randrange(5))}
    body["max_tokens"] = 0  # valid requests only process their prompt
    return json.dumps(body).encode()


def raw_exchange(port, data, timeout=10.0):
    """Sends bytes, half-closes, reads until the server closes; returns the status or None."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(data)
        s.shutdown(socket.SHUT_WR)
        got = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            got += chunk
    return int(got[9:12]) if got.startswith(b"HTTP/1.") else None


FRAMING = [
    b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n{}",
    b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n{}",
    b"GET /health HTTP/1.1\r\nHost: x\r\nno colon here\r\n\r\n",
    b"GET /health HTTP/1.1\r\n\r\n",
    b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n",
    b"POST /v1/completions HTTP/1.0\r\nContent-Length: 48\r\n\r\n" +
    b'{"prompt": "x", "max_tokens": 2, "stream": true}',
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steermoe", default=os.path.join(ROOT, "build", "steermoe"))
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "steer-olmoe-small"))
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--slowloris", type=int, default=64)
    a = ap.parse_args()
    srv = subprocess.Popen([a.steermoe, "serve", "-m", a.model, "--port", "0", "--quiet",
                            "--max-body-mb", "1"], stdout=subprocess.PIPE, text=True)
    port = int(srv.stdout.readline().split()[-1])
    t0 = time.time()
    t_end = t0 + a.seconds
    lock = threading.Lock()
    stats = {"answered": 0, "no_answer": 0, "statuses": {}, "latency": [], "probe_ms": [],
             "slowloris_dropped": 0}
    rss = [[0, rss_kb(srv.pid)]]

    def count(status, dt):
        with lock:
            if status is None:
                stats["no_answer"] += 1
                return
            stats["answered"] += 1
            stats["statuses"][str(status)] = stats["statuses"].get(str(status), 0) + 1
            stats["latency"].append(dt)

    def malformed_client(k):
        rng = random.Random(k)
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        while time.time() < t_end:
            t = time.time()
            if rng.random() < 0.05:  # framing corners and half-close, on their own connection
                try:
                    count(raw_exchange(port, FRAMING[rng.randrange(len(FRAMING))]), time.time() - t)
                except OSError:
                    count(None, 0)
                continue
            try:
                conn.request("POST", PATHS[rng.randrange(len(PATHS))], malformed_body(rng),
                             {"Content-Type": "application/json"})
                res = conn.getresponse()
                res.read()
                count(res.status, time.time() - t)
                if res.getheader("Connection", "").lower() == "close":
                    conn.close()
                    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            except (OSError, http.client.HTTPException):
                count(None, 0)
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)

    def slowloris():
        socks = []
        for _ in range(a.slowloris):
            try:
                socks.append(socket.create_connection(("127.0.0.1", port), timeout=5))
            except OSError:
                pass
        head = b"GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 1000
        i = 0
        while time.time() < t_end:
            for s in list(socks):
                try:
                    s.send(head[i % len(head):i % len(head) + 1])
                except OSError:
                    socks.remove(s)
                    with lock:
                        stats["slowloris_dropped"] += 1
                    try:  # a new one takes its place: the attack goes on
                        socks.append(socket.create_connection(("127.0.0.1", port), timeout=5))
                    except OSError:
                        pass
            i += 1
            time.sleep(1)
        for s in socks:
            s.close()

    def probe():
        while time.time() < t_end:
            t = time.time()
            try:
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=15)
                c.request("GET", "/health")
                c.getresponse().read()
                c.close()
                with lock:
                    stats["probe_ms"].append((time.time() - t) * 1e3)
            except OSError:
                with lock:
                    stats["probe_ms"].append(15000.0)
            time.sleep(1)

    def sample_rss():
        while time.time() < t_end:
            time.sleep(10)
            rss.append([round(time.time() - t0), rss_kb(srv.pid)])

    threads = [threading.Thread(target=malformed_client, args=(k,)) for k in range(a.clients)]
    threads += [threading.Thread(target=f) for f in (slowloris, probe, sample_rss)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.time() - t0
    rss.append([round(wall), rss_kb(srv.pid)])
    srv.terminate()
    srv.wait()
    lat = sorted(stats["latency"])
    pct = lambda p: lat[min(len(lat) - 1, int(p * len(lat)))] * 1e3 if lat else 0.0
    print(json.dumps({"seconds": round(wall, 1), "clients": a.clients,
                      "answered": stats["answered"],
                      "answered_per_s": round(stats["answered"] / wall, 1),
                      "no_answer": stats["no_answer"], "statuses": stats["statuses"],
                      "latency_ms_p50": round(pct(0.5), 2), "latency_ms_p99": round(pct(0.99), 2),
                      "probe_ms_max": round(max(stats["probe_ms"] or [0]), 1),
                      "slowloris_connections": a.slowloris,
                      "slowloris_dropped_by_server": stats["slowloris_dropped"],
                      "rss_kb_over_time": rss}, indent=1))
    sys.exit(1 if stats["no_answer"] or max(stats["probe_ms"] or [0]) > 2000 else 0)


if __name__ == "__main__":
    main()
