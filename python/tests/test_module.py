#!/usr/bin/env python3
"""The steermoe Python module against `steermoe replay` on the shipped trace
(data/traces/synth-olmoe): every decision (S, prefetch, demand, evicted, resident) identical for
several policies and cache sizes, the step's token-major (run_token) and layer-major
(route_layer) schedules, totals equal to replay's summary, trace write/read round trip, clear
errors.

    test_module.py BUILD/python BUILD/steermoe      (CTest passes both)
"""
import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, sys.argv[1])
STEERMOE = sys.argv[2]
ROOT = Path(__file__).resolve().parents[2]
TRACE = ROOT / "data" / "traces" / "synth-olmoe"
CALIB = TRACE / "calib.smcal"

import numpy as np  # noqa: E402

import steermoe  # noqa: E402

POLICIES = [("exact:evict=lru", 32), ("exact:evict=a,n=1", 32), ("cacheprior:lambda=0.2", 16),
            ("psr:lambda=0.3,n=1", 32), ("psr:lambda=0.2,n=8", 16), ("spec:n=1", 24),
            ("cacheprior:lambda=0.2,evict=lru,j=2,range=running", 32)]
failures = []


def check(cond, msg):
    if not cond:
        failures.append(msg)
        print("FAIL", msg)


def engine_decisions(policy, cache):
    with tempfile.NamedTemporaryFile(suffix=".jsonl") as f:
        subprocess.run([STEERMOE, "replay", "--trace", str(TRACE), "--calib", str(CALIB),
                        "--policy", policy, "--cache", str(cache), "--decisions", f.name],
                       check=True, capture_output=True)
        lines = [json.loads(x) for x in Path(f.name).read_text().splitlines() if x.strip()]
    return [x for x in lines if not x.get("summary")], [x for x in lines if x.get("summary")][0]


def as_pairs(a):
    return [[int(e), int(s)] for e, s in np.asarray(a).reshape(-1, 2)]


def layer_major(trace, calib, policy, cache):
    """The same policy driven layer by layer (every token of layer l before layer l + 1), one
    Step.route_layer call per (layer, sequence), as the engine's prefill and the HF harness do."""
    spec = trace.router_spec()
    step = steermoe.Step(spec, policy, calib, cache)
    starts = [int(s) for s in trace.sequence_starts] + [trace.steps]
    out = {}
    for layer in range(spec.layers):
        for a, b in zip(starts[:-1], starts[1:]):
            # Resets every layer: those before `layer` are done, those after it have not
            # started, so only this layer's state is affected.
            step.reset()
            sel, _ = step.route_layer(layer, trace.tokens[a:b], trace.scores[a:b, layer],
                                      trace.pregate[a:b, layer] if layer >= 1 else None)
            for t in range(a, b):
                out[(t, layer)] = [int(x) for x in sel[t - a]]
    return out


def main():
    trace = steermoe.Trace.open(TRACE)
    calib = steermoe.load_calibration(CALIB)
    check(trace.scores.shape == (128, 16, 64), f"scores shape {trace.scores.shape}")
    check(not trace.scores.flags.writeable, "trace arrays are read-only views")
    check(trace.meta["layers"] == 16, "meta dict")
    for policy, cache in POLICIES:
        want, summary = engine_decisions(policy, cache)
        got = list(steermoe.replay(trace, calib, policy, cache))
        check(len(got) == len(want), f"{policy}: {len(got)} decisions vs {len(want)}")
        bad = 0
        for (t, layer, sel, pre, dem, res), w in zip(got, want):
            ok = (t == w["t"] and layer == w["l"] and [int(x) for x in sel] == w["S"]
                  and as_pairs(pre) == w["prefetch"] and as_pairs(dem) == w["demand"]
                  and [int(x) for x in res] == w["resident"])
            bad += not ok
        check(bad == 0, f"{policy} C={cache}: {bad} of {len(want)} decisions differ from replay")
        # Totals through Step.stats() on a token-major run.
        router = steermoe.Step(trace.router_spec(), policy, calib, cache)
        starts = set(int(s) for s in trace.sequence_starts)
        want_s = {(w["t"], w["l"]): w["S"] for w in want}
        tm_diff = 0
        for t in range(trace.steps):
            if t in starts:
                router.reset()
            sel = router.run_token(int(trace.tokens[t]), trace.scores[t], trace.pregate[t])
            check(sel.shape == (16, 8), f"run_token shape {sel.shape}")
            tm_diff += sum([int(x) for x in sel[layer]] != want_s[(t, layer)] for layer in range(16))
        check(tm_diff == 0, f"{policy}: token-major run_token differs in {tm_diff} decisions")
        st = router.stats()
        tot = summary["totals"]
        check((st["demand"], st["prefetch"], st["replaced"]) ==
              (tot["demand"], tot["prefetch"], tot["replaced"]),
              f"{policy}: stats {st['demand'], st['prefetch'], st['replaced']} vs replay {tot}")
        check(st["tokens"] == 128, "stats tokens")
        check(router.policy == summary["policy"], f"canonical {router.policy} vs {summary['policy']}")
        # Layer-major: the same selections.
        lm = layer_major(trace, calib, policy, cache)
        diff = sum(lm[(w["t"], w["l"])] != w["S"] for w in want)
        check(diff == 0, f"{policy}: layer-major drive differs in {diff} decisions")
        print(f"ok {policy} C={cache}: {len(want)} decisions identical to replay")

    # Trace write/read round trip.
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "copy"
        meta = dict(trace.meta)
        with steermoe.TraceWriter(out, meta) as w:
            starts = set(int(s) for s in trace.sequence_starts)
            for t in range(trace.steps):
                if t in starts and t > 0:
                    w.begin_sequence()
                w.append_step(int(trace.tokens[t]), trace.scores[t], trace.pregate[t])
        back = steermoe.Trace.open(out)
        check(np.array_equal(back.scores, trace.scores), "round trip scores")
        check(np.array_equal(back.pregate, trace.pregate), "round trip pregate")
        check(np.array_equal(back.tokens, trace.tokens), "round trip tokens")
        check(np.array_equal(back.sequence_starts, trace.sequence_starts), "round trip sequences")
        print("ok trace round trip")
        # A NaN score is refused when appended, not after the trace is written.
        try:
            with steermoe.TraceWriter(Path(tmp) / "nan", meta) as w:
                bad = np.array(trace.scores[0], copy=True)
                bad.flat[5] = np.nan
                w.append_step(int(trace.tokens[0]), bad, trace.pregate[0])
            check(False, "NaN score appended")
        except steermoe.Error as e:
            check("finite" in str(e), f"NaN score: message {e}")

    # Errors are steermoe.Error (a ValueError) with the key named, never a crash.
    for bad_policy, needle in [("psr:lambda=0.3,bogus=1", "bogus"), ("nonesuch", "nonesuch"),
                               ("psr", "lambda")]:
        try:
            steermoe.Step(trace.router_spec(), bad_policy, calib, 32)
            check(False, f"{bad_policy} accepted")
        except steermoe.Error as e:
            check(needle in str(e), f"{bad_policy}: message {e}")
    # A prefetching policy without pre-gate scores would silently run without part 1.
    for call in (lambda s: s.run_token(1, np.zeros((16, 64), np.float32)),
                 lambda s: s.route_layer(1, np.array([1]), np.zeros((1, 64), np.float32))):
        try:
            call(steermoe.Step(trace.router_spec(), "psr:lambda=0.3,n=1", calib, 32))
            check(False, "a prefetching policy ran without pregate")
        except steermoe.Error as e:
            check("pregate" in str(e), f"no pregate: message {e}")
    steermoe.Step(trace.router_spec(), "cacheprior:lambda=0.2", calib, 32).run_token(
        1, np.zeros((16, 64), np.float32))  # no part 1: none needed
    # parse_policy: lambda as written (the shortest decimal of its float32, not
    # 0.30000001192092896), every key of the canonical form, the bonus gate among them.
    d = steermoe.parse_policy("psr:lambda=0.3,n=2,gate=bonus")
    check(d["lambda"] == 0.3 and np.float32(d["lambda"]) == np.float32(0.3), f"lambda {d}")
    check(d["gate"] == "bonus" and d["n"] == 2, f"gate / n {d}")
    check(steermoe.parse_policy("cacheprior:lambda=0.2")["gate"] == "window", "default gate")
    router = steermoe.Step(trace.router_spec(), "psr:lambda=0.3", calib, 32)
    one = np.array([1])
    for call, needle in [(lambda: router.route_layer(0, one, np.zeros((1, 10), np.float32)), "64"),
                         (lambda: router.route_layer(99, one, np.zeros((1, 64), np.float32)),
                          "layer"),
                         (lambda: router.route_layer(0, one, np.zeros((1, 64), np.float32),
                                                     np.zeros((1, 64), np.float32)), ">= 1"),
                         (lambda: router.run_token(1, np.zeros((3, 64), np.float32)), "16"),
                         (lambda: steermoe.Step(trace.router_spec(), "psr:lambda=0.3", calib, 4),
                          ""),
                         # Non-finite scores would rank arbitrarily and weigh NaN.
                         (lambda: router.run_token(1, np.full((16, 64), np.nan, np.float32)),
                          "finite"),
                         (lambda: router.route_layer(0, one, np.full((1, 64), np.inf, np.float32)),
                          "finite"),
                         (lambda: steermoe.RouterSpec(experts=-4, top_k=2, layers=2), "experts"),
                         (lambda: steermoe.RouterSpec(experts=8, top_k=9, layers=2), "top_k"),
                         # Sized from input: refused before anything that big is allocated.
                         (lambda: steermoe.RouterSpec(experts=65535, top_k=8, layers=1 << 30),
                          "layers x experts"),
                         (lambda: steermoe.RouterSpec(experts=1 << 20, top_k=8, layers=2),
                          "65535")]:
        try:
            call()
            check(False, f"no error ({needle})")
        except steermoe.Error as e:
            check(needle in str(e), f"message {e}")
    print("ok errors")
    if failures:
        print(f"{len(failures)} failures")
        sys.exit(1)


if __name__ == "__main__":
    main()
