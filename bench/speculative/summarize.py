#!/usr/bin/env python3
"""Joins the files bench/speculative/figures.sh wrote into OUT/summary.json and OUT/summary.md:
one row per (decoding, cache size) with tau, copies per committed token by kind, ms per committed
token (resident, disk, sim), KL to exact routing and perplexity."""
import json
import os
import statistics
import sys


def load(path):
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def mean_over_rounds(config, get):
    vals = [get(r) for r in config["rounds"]]
    vals = [v for v in vals if v is not None]
    return statistics.fmean(vals) if vals else None


def bench_rows(doc):
    out = []
    for c in doc["configurations"]:
        if c.get("resident") or c.get("unavailable"):
            continue
        copies = {k: mean_over_rounds(c, lambda r, k=k: r["copies_per_token"].get(k, 0.0))
                  for k in ("demand", "prefetch", "block", "restore")}
        copies["total"] = sum(copies.values())
        out.append({
            "policy": c["policy"],
            "ms": mean_over_rounds(c, lambda r: r["ms_per_token"]["mean"]),
            "sim_ms": mean_over_rounds(c, lambda r: r.get("sim_ms_per_token")),
            "stall_ms": mean_over_rounds(c, lambda r: r["stall_ms_per_token"]["total"]),
            "copies": copies,
            "copies_source": c["rounds"][0]["copies_source"],
            "tau": mean_over_rounds(c, lambda r: r.get("speculative", {}).get("tau")),
            "acceptance": c["rounds"][0].get("speculative", {}).get("acceptance_per_depth"),
        })
    return out


def kl_rows(doc):
    out = []
    for c in doc["configurations"]:
        cp = c["copies_per_token"]
        out.append({
            "policy": c["policy"],
            "kl": c["kl"]["mean"], "kl_ci": [c["kl"]["ci_low"], c["kl"]["ci_high"]],
            "ppl": c["perplexity"], "exact_ppl": c["exact_perplexity"],
            "copies_tf": cp.get("total", 0.0),
            "tau_tf": c.get("speculative", {}).get("tau"),
            "wrong_draft_set_change": c.get("speculative", {}).get("counterfactual", {}).get(
                "differing_share"),
        })
    return out


def first_or_none(doc, i=0):
    return bench_rows(doc)[i] if doc else None


def main():
    out_dir = sys.argv[1]
    rows = []
    for C in (24, 32):
        def p(name):
            return os.path.join(out_dir, name)
        entries = []
        ar_b, ar_k = load(p(f"bench-ar-{C}.json")), load(p(f"kl-ar-{C}.json"))
        if ar_b and ar_k:
            disk, sim = load(p(f"time-disk-ar-{C}.json")), load(p(f"time-sim-ar-{C}.json"))
            for i, (b, k) in enumerate(zip(bench_rows(ar_b), kl_rows(ar_k))):
                name = "AR " + ("exact LRU" if b["policy"].startswith("exact") else
                                "PSR " + b["policy"].split("lambda=")[1].split(",")[0])
                entries.append((name, C, b, k, first_or_none(disk, i), first_or_none(sim, i)))
            disk2, sim2 = load(p(f"time-disk-ar2-{C}.json")), load(p(f"time-sim-ar2-{C}.json"))
            if disk2 or sim2:
                for i, name in enumerate(("AR exact LRU", "AR PSR 0.3")):
                    entries.append((name, min(2 * C, 64), None, None, first_or_none(disk2, i),
                                    first_or_none(sim2, i)))
        for rule in ("exact", "block", "block-conf", "rollback"):
            b, k = load(p(f"bench-sd-{rule}-{C}.json")), load(p(f"kl-sd-{rule}-{C}.json"))
            if not (b and k):
                continue
            entries.append(("SD " + rule.replace("-", ":"), C, bench_rows(b)[0], kl_rows(k)[0],
                            first_or_none(load(p(f"time-disk-sd-{rule}-{C}.json"))),
                            first_or_none(load(p(f"time-sim-sd-{rule}-{C}.json")))))
        for name, cache, b, k, disk, sim in entries:
            rows.append({
                "decoding": name, "cache": cache,
                "pool_and_union": name in ("SD exact", "SD block", "SD block:conf"),
                "policy": (b or disk or sim)["policy"],
                "tau": b["tau"] if b else None,
                "acceptance_per_depth": b["acceptance"] if b else None,
                "copies_per_committed_token": b["copies"] if b else None,
                "ms_per_token_resident": b["ms"] if b else None,
                "ms_per_token_disk": disk["ms"] if disk else None,
                "copies_per_token_disk": disk["copies"] if disk else None,
                "stall_ms_disk": disk["stall_ms"] if disk else None,
                "ms_per_token_sim_rtx4090": sim["sim_ms"] if sim else None,
                "kl": k["kl"] if k else None, "kl_ci": k["kl_ci"] if k else None,
                "perplexity": k["ppl"] if k else None,
                "exact_perplexity": k["exact_ppl"] if k else None,
                "teacher_forced_tau": k["tau_tf"] if k else None,
                "teacher_forced_copies_per_token": k["copies_tf"] if k else None,
                "wrong_draft_set_change": k["wrong_draft_set_change"] if k else None,
            })
    # The goal: SD block:conf copies per committed token <= 0.6x AR PSR's (lambda 0.3).
    ratios = {}
    for C in (24, 32):
        by = {r["decoding"]: r for r in rows if r["cache"] == C and r["tau"] is not None}
        if "SD block:conf" in by and "AR PSR 0.3" in by:
            ratios[str(C)] = (by["SD block:conf"]["copies_per_committed_token"]["total"] /
                              by["AR PSR 0.3"]["copies_per_committed_token"]["total"])
    doc = {"schema": "steermoe.speculative-figures/1", "rows": rows,
           "block_conf_over_ar_psr_copies": ratios}
    with open(os.path.join(out_dir, "summary.json"), "w") as f:
        json.dump(doc, f, indent=1)

    def fmt(v, spec=".2f", suffix=""):
        return "-" if v is None else format(v, spec) + suffix
    lines = ["| decoding | slots | tau | copies / committed token, logical (demand + prefetch + "
             "block + restore = total) | KL [95% CI] | ppl | ms/token resident | disk: ms, "
             "copies | sim rtx4090 ms | teacher-forced tau, copies | sets changed by wrong "
             "drafts |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        c = r["copies_per_committed_token"]
        copies = "-" if c is None else (
            f"{c['demand']:.2f} + {c['prefetch']:.2f} + {c['block']:.2f} + {c['restore']:.2f} = "
            f"**{c['total']:.2f}**")
        kl = "-" if r["kl"] is None else (
            f"{r['kl']:.4f} [{r['kl_ci'][0]:.4f}, {r['kl_ci'][1]:.4f}]")
        slots = f"P {r['cache']} + U {r['cache']}" if r["pool_and_union"] else f"C {r['cache']}"
        disk = "-" if r["ms_per_token_disk"] is None else (
            f"{r['ms_per_token_disk']:.3f}, {r['copies_per_token_disk']['total']:.2f}")
        tf = "-" if r["teacher_forced_copies_per_token"] is None else (
            f"{fmt(r['teacher_forced_tau'])}, {r['teacher_forced_copies_per_token']:.2f}")
        wrong = r["wrong_draft_set_change"]
        lines.append(
            f"| {r['decoding']} | {slots} | {fmt(r['tau'])} | {copies} | {kl} | "
            f"{fmt(r['perplexity'])} | {fmt(r['ms_per_token_resident'], '.3f')} | {disk} | "
            f"{fmt(r['ms_per_token_sim_rtx4090'], '.3f')} | {tf} | "
            f"{fmt(None if wrong is None else 100 * wrong, '.1f', '%')} |")
    for C, ratio in ratios.items():
        lines.append(f"\nC {C}: SD block:conf / AR PSR 0.3 copies per committed token = {ratio:.2f}")
    with open(os.path.join(out_dir, "summary.md"), "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
