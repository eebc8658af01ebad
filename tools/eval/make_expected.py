#!/usr/bin/env python3
"""Writes the fixed inputs and the SciPy-computed expected values that tests/eval checks the C++
statistics of src/eval/ against (tests/data/eval/). Run once by hand after changing an input:

    apt-get install python3-scipy python3-numpy
    /usr/bin/python3 tools/eval/make_expected.py

CI never runs this script; it only reads what it wrote. Every expected value comes from SciPy
(scipy.stats) except Holm's adjustment, which SciPy 1.10 lacks and is written out below from its
definition, and the documented conventions for degenerate inputs (marked "convention").
SciPy 1.10's Student t quantile (t.ppf) is off by up to 4e-9 relative (df = 39: 2.022690911734728
against 2.0226909200367607 to 20 digits), so t quantiles and interval half-widths are also
computed with mpmath at 40 digits (python3-mpmath), and the tests hold the C++ code to those.
"""
import json
import math
import os
from pathlib import Path

import mpmath as mp
import numpy as np
import scipy
import scipy.stats as st

OUT = Path(__file__).resolve().parents[2] / "tests" / "data" / "eval"
NAN = float("nan")


def num(x):
    x = float(x)
    return None if math.isnan(x) else x


mp.mp.dps = 40


def mp_t_quantile(p, df):
    """Student t quantile to 40 digits: root of the regularized incomplete beta CDF."""
    p = mp.mpf(p)
    df = mp.mpf(df)

    def upper(t):
        return mp.betainc(df / 2, mp.mpf(1) / 2, 0, df / (df + t * t), regularized=True) / 2

    tail = p if p < 0.5 else 1 - p
    q = mp.findroot(lambda t: upper(t) - tail, mp.mpf(st.t.isf(float(tail), float(df))))
    return float(q if p > 0.5 else -q)


def t_interval(d, level=0.95):
    d = np.asarray(d, dtype=float)
    n = len(d)
    mean = float(np.mean(d))
    if n < 2:
        return dict(n=n, mean=mean, sd=None, se=None, ci_low=None, ci_high=None)
    sd = float(np.std(d, ddof=1))
    se = float(st.sem(d))
    if sd == 0.0:  # convention: SciPy gives NaN for a zero scale; we report [mean, mean]
        lo = hi = mean
    else:
        lo, hi = st.t.interval(level, n - 1, loc=mean, scale=se)
    half_mp = mp_t_quantile(0.5 * (1 + level), n - 1) * se
    return dict(n=n, mean=mean, sd=sd, se=se, ci_low=float(lo), ci_high=float(hi),
                half_width_mp=half_mp)


def mcnemar(b, c):
    if b + c == 0:
        return 1.0  # convention: no discordant pair
    return float(st.binomtest(b, b + c, 0.5).pvalue)


def sign_flip(d):
    d = np.asarray(d, dtype=float)
    if np.all(d == 0):
        return 1.0
    if len(d) == 1:  # convention (SciPy needs n >= 2): patterns +d and -d, 2 * min(1/2, 1) = 1
        return 1.0
    res = st.permutation_test((d,), lambda x, axis: np.mean(x, axis=axis),
                              permutation_type="samples", alternative="two-sided",
                              n_resamples=np.inf, vectorized=True)
    return float(res.pvalue)


def holm(p):
    # Holm (1979), from its definition: sort ascending, multiply the i-th smallest (0-based) by
    # (m - i), take the running maximum, cap at 1; NaN entries excluded from m.
    idx = [i for i, v in enumerate(p) if not math.isnan(v)]
    idx.sort(key=lambda i: p[i])  # Python's sort is stable, as std::stable_sort
    m = len(idx)
    out = [NAN] * len(p)
    running = 0.0
    for rank, i in enumerate(idx):
        running = max(running, min(1.0, (m - rank) * p[i]))
        out[i] = running
    return out


def ttest(d):
    d = np.asarray(d, dtype=float)
    if len(d) < 2 or np.all(d == 0):
        return dict(t=None, p=None)
    if np.all(d == d[0]):  # convention: zero variance, non-zero mean
        return dict(t="inf" if d[0] > 0 else "-inf", p=0.0)
    r = st.ttest_1samp(d, 0.0)
    return dict(t=float(r.statistic), p=float(r.pvalue))


def ratio(a, b, level=0.95):
    a = np.asarray(a, float)
    b = np.asarray(b, float)
    d = np.log(b) - np.log(a)
    iv = t_interval(d, level)
    r = st.ttest_rel(np.log(b), np.log(a))
    out = dict(rounds=len(a), ratio=math.exp(iv["mean"]),
               ci_low=None if iv["ci_low"] is None else math.exp(iv["ci_low"]),
               ci_high=None if iv["ci_high"] is None else math.exp(iv["ci_high"]),
               p=num(r.pvalue), log_half_width_mp=iv.get("half_width_mp"))
    return out


def task_mean(means, ses, level=0.95):
    T = len(means)
    m = sum(means) / T
    se = math.sqrt(sum(s * s for s in ses)) / T
    z = st.norm.ppf(0.5 * (1 + level))
    return dict(mean=m, se=se, ci_low=m - z * se, ci_high=m + z * se,
                p=float(2 * st.norm.sf(abs(m / se))) if se > 0 else (1.0 if m == 0 else 0.0))


def main():
    rng = np.random.default_rng(20260101)
    expected = {"scipy": scipy.__version__, "numpy": np.__version__}

    # Distributions.
    expected["t_quantile"] = [
        dict(p=p, df=df, value=float(st.t.ppf(p, df)), mp=mp_t_quantile(p, df))
        for p, df in [(0.975, 1), (0.975, 2), (0.975, 3), (0.975, 9), (0.975, 29), (0.975, 1000),
                      (0.995, 4), (0.025, 7), (0.9, 2.5), (0.6, 15), (0.975, 39), (0.975, 13)]]
    expected["t_cdf"] = [
        dict(t=t, df=df, value=float(st.t.cdf(t, df)))
        for t, df in [(0.0, 3), (1.0, 1), (2.5, 4), (-2.5, 4), (10.0, 2), (-30.0, 9), (0.3, 100),
                      (5.0, 30)]]
    expected["t_sf"] = [dict(t=t, df=df, value=float(st.t.sf(t, df)))
                        for t, df in [(8.0, 5), (25.0, 20), (3.0, 1000)]]
    expected["normal_quantile"] = [dict(p=p, value=float(st.norm.ppf(p)))
                                   for p in [0.975, 0.5, 0.995, 0.001, 0.8413447460685429]]

    # Mean intervals on paired differences.
    cases = {
        "random10": list(np.round(rng.normal(0.3, 1.0, 10), 6)),
        "ties": [1.0, 1.0, -1.0, 0.0, 0.0, 1.0, 1.0, 0.5, 0.5],
        "binary_diffs": [1, 0, 0, -1, 1, 1, 0, 0, 0, 1, -1, 0],
        "all_equal": [0.25] * 6,
        "all_zero": [0.0] * 5,
        "n1": [0.7],
        "n2": [0.1, 0.4],
    }
    expected["mean_interval"] = [dict(name=k, d=[float(x) for x in v], **t_interval(v))
                                 for k, v in cases.items()]

    # Exact McNemar.
    expected["mcnemar"] = [dict(b=b, c=c, p=mcnemar(b, c)) for b, c in
                           [(0, 0), (5, 5), (0, 7), (7, 0), (1, 20), (3, 4), (30, 50), (200, 260),
                            (1000, 1100), (0, 1), (2, 9)]]

    # Sign-flip permutation test (exact enumeration).
    sf_cases = {
        "n1": [0.5],
        "n2": [0.5, -0.25],
        "ties": [1.0, 1.0, -1.0, 0.0, 0.0, 1.0, 1.0, 0.5, 0.5],
        "all_zero": [0.0] * 4,
        "all_equal": [0.25] * 8,
        "dyadic12": [0.75, -0.25, 1.5, 0.5, 0.125, -0.5, 1.0, 0.25, 0.0, 2.0, -0.125, 0.375],
        "random15": [float(x) for x in np.round(rng.normal(0.4, 1.0, 15), 6)],
        "dyadic20": [float(x) for x in rng.integers(-6, 9, 20) / 4.0],
    }
    expected["sign_flip"] = [dict(name=k, d=[float(x) for x in v], p=sign_flip(v))
                             for k, v in sf_cases.items()]

    expected["holm"] = [dict(p=p, adjusted=[num(x) for x in holm(p)]) for p in [
        [0.01, 0.04, 0.03, 0.005],
        [0.5, 0.5, 0.01],
        [0.2],
        [0.04, NAN, 0.01, 0.3],
        [0.9, 0.8, 0.7],
    ]]
    for case in expected["holm"]:
        case["p"] = [num(x) for x in case["p"]]

    expected["ttest"] = [dict(name=k, d=[float(x) for x in v], **ttest(v)) for k, v in {
        "random10": cases["random10"], "ties": cases["ties"], "n2": cases["n2"],
        "n1": cases["n1"], "all_zero": cases["all_zero"], "all_equal": cases["all_equal"]}.items()]

    lat_cases = {
        "three_rounds": ([24.7, 25.1, 24.4], [10.7, 10.9, 10.6]),
        "five_rounds": ([8.0, 8.2, 7.9, 8.1, 8.05], [8.3, 8.25, 8.4, 8.2, 8.31]),
        "two_rounds": ([5.0, 5.5], [4.0, 4.1]),
    }
    expected["latency_ratio"] = [dict(name=k, a=a, b=b, **ratio(a, b))
                                 for k, (a, b) in lat_cases.items()]

    expected["task_mean"] = [dict(means=m, ses=s, **task_mean(m, s)) for m, s in [
        ([0.001, 0.005, -0.002], [0.004, 0.003, 0.005]),
        ([1.7, 2.2], [0.5, 0.5]),
    ]]

    # End to end: score files of two configurations, three tasks.
    ids = list(range(40))
    a_bin = rng.integers(0, 2, 40)
    flip = rng.random(40) < 0.2
    b_bin = np.where(flip, 1, a_bin)  # B better on a fifth
    a_cont = np.round(rng.normal(3.0, 0.5, 14), 4)
    b_cont = np.round(a_cont + rng.normal(0.05, 0.1, 14), 4)
    small_a, small_b = [0.0, 1.0], [1.0, 1.0]
    lines_a, lines_b = [], []
    for i in ids:
        lines_a.append({"task": "binary", "id": f"q{i}", "score": int(a_bin[i])})
        lines_b.append({"task": "binary", "id": f"q{i}", "score": bool(b_bin[i])})
    for i in range(14):
        lines_a.append({"task": "continuous", "id": i, "score": float(a_cont[i])})
    for i in reversed(range(14)):  # B in another order: pairing is by id
        lines_b.append({"task": "continuous", "id": i, "score": float(b_cont[i])})
    for i in range(2):
        lines_a.append({"task": "tiny", "id": i, "score": small_a[i]})
        lines_b.append({"task": "tiny", "id": i, "score": small_b[i]})
    for name, lines in [("scores_a.jsonl", lines_a), ("scores_b.jsonl", lines_b)]:
        with open(OUT / name, "w") as f:
            for line in lines:
                f.write(json.dumps(line) + "\n")
    rows = []
    for task, a, b in [("binary", a_bin.astype(float), b_bin.astype(float)),
                       ("continuous", a_cont, b_cont),
                       ("tiny", np.array(small_a), np.array(small_b))]:
        d = b - a
        iv = t_interval(d)
        binary = bool(np.all(np.isin(a, [0, 1])) and np.all(np.isin(b, [0, 1])))
        if binary:
            p = mcnemar(int(np.sum((a == 1) & (b == 0))), int(np.sum((a == 0) & (b == 1))))
        else:
            p = sign_flip(d)
        rows.append(dict(task=task, n=len(d), test="mcnemar" if binary else "sign-flip",
                         mean_diff=iv["mean"], ci_low=iv["ci_low"], ci_high=iv["ci_high"], p=p,
                         se=iv["se"], half_width_mp=iv.get("half_width_mp")))
    adj = holm([r["p"] for r in rows])
    for r, q in zip(rows, adj):
        r["p_holm"] = q
    tm = task_mean([r["mean_diff"] for r in rows], [r["se"] for r in rows])
    rows.append(dict(task="mean", n=3, test="normal", mean_diff=tm["mean"], ci_low=tm["ci_low"],
                     ci_high=tm["ci_high"], p=tm["p"], p_holm=None, se=tm["se"]))
    expected["compare_scores"] = rows

    # lm-evaluation-harness --log_samples folders: two tasks, gsm8k-like with two filters and a
    # list-valued metric task (IFEval-like instruction level, averaged per document).
    def lm_eval_dir(root, acc, em_strict, em_flex, inst):
        d = OUT / root / "org__model"
        d.mkdir(parents=True, exist_ok=True)
        with open(d / "samples_arc_easy_2025-01-01T00-00-00.000000.jsonl", "w") as f:
            for i, v in enumerate(acc):
                f.write(json.dumps({"doc_id": i, "doc": {"q": f"question {i}"}, "target": "A",
                                    "arguments": {}, "resps": [], "filtered_resps": [],
                                    "filter": "none", "metrics": ["acc", "acc_norm"],
                                    "acc": float(v), "acc_norm": float(1 - v)}) + "\n")
        with open(d / "samples_gsm8k_2025-01-01T00-00-00.000000.jsonl", "w") as f:
            for i in range(len(em_strict)):
                for filt, vals in [("strict-match", em_strict), ("flexible-extract", em_flex)]:
                    f.write(json.dumps({"doc_id": i, "filter": filt, "metrics": ["exact_match"],
                                        "exact_match": float(vals[i])}) + "\n")
        with open(d / "samples_ifeval_2025-01-01T00-00-00.000000.jsonl", "w") as f:
            for i, v in enumerate(inst):
                f.write(json.dumps({"doc_id": i, "filter": "none",
                                    "metrics": ["inst_level_strict_acc"],
                                    "inst_level_strict_acc": [bool(x) for x in v]}) + "\n")
    n_arc, n_gsm, n_if = 30, 16, 12
    arc_a = rng.integers(0, 2, n_arc)
    arc_b = np.where(rng.random(n_arc) < 0.5, 1, arc_a)
    gs_a, gs_b = rng.integers(0, 2, n_gsm), rng.integers(0, 2, n_gsm)
    gf_a, gf_b = rng.integers(0, 2, n_gsm), rng.integers(0, 2, n_gsm)
    if_a = [list(rng.integers(0, 2, 1 + i % 3)) for i in range(n_if)]
    if_b = [list(rng.integers(0, 2, 1 + i % 3)) for i in range(n_if)]
    lm_eval_dir("lm_eval_a", arc_a, gs_a, gf_a, if_a)
    lm_eval_dir("lm_eval_b", arc_b, gs_b, gf_b, if_b)
    lm_rows = []
    for task, a, b in [("arc_easy", arc_a.astype(float), arc_b.astype(float)),
                       ("gsm8k", gs_a.astype(float), gs_b.astype(float)),
                       ("ifeval", np.array([np.mean(v) for v in if_a]),
                        np.array([np.mean(v) for v in if_b]))]:
        d = b - a
        iv = t_interval(d)
        binary = bool(np.all(np.isin(a, [0, 1])) and np.all(np.isin(b, [0, 1])))
        p = (mcnemar(int(np.sum((a == 1) & (b == 0))), int(np.sum((a == 0) & (b == 1))))
             if binary else sign_flip(d))
        lm_rows.append(dict(task=task, n=len(d), test="mcnemar" if binary else "sign-flip",
                            mean_diff=iv["mean"], ci_low=iv["ci_low"], ci_high=iv["ci_high"],
                            p=p, half_width_mp=iv.get("half_width_mp")))
    for r, q in zip(lm_rows, holm([r["p"] for r in lm_rows])):
        r["p_holm"] = q
    expected["compare_lm_eval"] = lm_rows

    # bench --json (steermoe.bench/1) with three configurations over three rounds.
    bench = {"schema": "steermoe.bench/1", "model": "fixture", "file": "fixture.txt",
             "rounds": 3, "tokens_per_round": 100, "configurations": []}
    lat = {"exact:evict=lru@32": [24.7, 25.1, 24.4], "psr:lambda=0.3,n=1@32": [10.7, 10.9, 10.6],
           "cacheprior:lambda=0.2@32": [14.3, 14.0, 14.6]}
    for name, ms in lat.items():
        bench["configurations"].append({
            "name": name, "policy": name.split("@")[0], "cache": 32, "residency": 0.5,
            "resident": False,
            "rounds": [{"round": r, "tokens": 100, "ms_per_token": {"mean": v, "p50": v, "p99": v}}
                       for r, v in enumerate(ms)]})
    with open(OUT / "bench_fixture.json", "w") as f:
        json.dump(bench, f, indent=1)
    names = list(lat)
    lat_rows = [dict(a=names[0], b=n, **ratio(lat[names[0]], lat[n])) for n in names[1:]]
    for r, q in zip(lat_rows, holm([r["p"] for r in lat_rows])):
        r["p_holm"] = q
    expected["compare_latency"] = lat_rows

    with open(OUT / "expected.json", "w") as f:
        json.dump(expected, f, indent=1, allow_nan=False)
    print(f"wrote {OUT}/expected.json (scipy {scipy.__version__})")


if __name__ == "__main__":
    main()
