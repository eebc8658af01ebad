#!/usr/bin/env python3
"""steermoe plots from the JSON that `steermoe bench`, `kl`, `sim` and `compare` write.

    plot.py frontier --kl KL.json --bench BENCH.json [...] -o frontier.png [-o frontier.svg]
    plot.py cdf      --bench BENCH.json [...]                 -o cdf.svg
    plot.py copies   --sim SIM.json [...] | --bench BENCH.json -o copies.png
    plot.py scatter  --sim SIM.json [...] --bench BENCH.json   -o sim_vs_measured.png
    plot.py forest   --compare COMPARE.json                    -o compare.png

The format of each output follows its extension (.png, .svg). Schemas: src/eval/README.md.
Configurations are matched across files by (policy, cache). Needs Debian's python3-matplotlib
and python3-scipy (Student t quantile for the latency intervals over rounds).
"""
import argparse
import json
import math
import sys

try:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: E402
    import scipy.stats  # noqa: E402
except ImportError as e:  # a python without them (a venv, pyenv): say which one has them
    sys.exit(f"plot.py: {e.name} is missing from {sys.executable}: install Debian's "
             "python3-matplotlib and python3-scipy and run /usr/bin/python3 tools/plot/plot.py")

FIGSIZE = (7.0, 4.5)  # inches; PNG at DPI 150 is 1050 x 675 pixels, SVG 504 x 324 pt
DPI = 150
FAMILY_COLOR = {"exact": "#555555", "cacheprior": "#d95f02", "psr": "#1b9e77", "spec": "#7570b3",
                "resident": "#000000"}


def load(path):
    with open(path) as f:
        return json.load(f)


def parse_policy(policy):
    name, _, rest = policy.partition(":")
    keys = {}
    for item in filter(None, rest.split(",")):
        k, _, v = item.partition("=")
        keys[k] = v
    return name, keys


# Defaults of every policy key (docs/commands.md, "Policy strings"); a key at its default is
# dropped so that "psr:lambda=0.30,n=1" and the canonical "psr:lambda=0.3,n=1,evict=a" name one
# configuration.
_DEFAULTS = {"exact": {"evict": "lru", "n": "0", "j": "0", "range": "fixed"},
             "cacheprior": {"evict": "lru", "n": "0", "j": "0", "range": "fixed",
                            "gate": "window"},
             "psr": {"evict": "a", "n": "1", "j": "0", "range": "fixed", "gate": "window"},
             "spec": {"evict": "a", "n": "1", "j": "0", "range": "fixed"}}


def policy_key(policy):
    """A normalized, hashable form of a policy string for matching across files."""
    name, keys = parse_policy(policy)
    norm = {}
    for k, v in keys.items():
        try:
            v = repr(float(v)) if k in ("lambda",) else str(int(v)) if k in ("n", "w", "j") else v
        except ValueError:
            pass
        if _DEFAULTS.get(name, {}).get(k) != v:
            norm[k] = v
    return name + ":" + ",".join(f"{k}={norm[k]}" for k in sorted(norm))


def label(policy, cache=None):
    name, k = parse_policy(policy)
    if name == "exact":
        text = "exact " + ("LRU" if k.get("evict", "lru") == "lru" else "A")
        if k.get("n", "0") != "0":
            text += f" + prefetch n={k['n']}"
    elif name == "cacheprior":
        text = f"Cache-Prior λ={k.get('lambda')}"
        if k.get("j", "0") != "0":
            text += f" J={k['j']}"
        if k.get("n", "0") != "0":
            text += f" n={k['n']}"
        if k.get("gate") == "bonus":
            text += " bonus-gate"
    elif name == "psr":
        text = f"PSR λ={k.get('lambda')} n={k.get('n', '1')}"
        if k.get("w"):
            text += f" w={k['w']}"
        if k.get("evict", "a") == "lru":
            text += " LRU"
        if k.get("gate") == "bonus":
            text += " bonus-gate"
    elif name == "spec":
        text = f"speculative n={k.get('n', '1')}"
    else:
        text = policy
    if cache:
        text += f" (C={cache})"
    return text


def mean_interval(values, level=0.95):
    """Mean and t interval over rounds (the round is the unit), its low end stopped at 0 as
    steermoe's own tables stop latency and KL intervals (a negative latency is impossible)."""
    n = len(values)
    m = sum(values) / n
    if n < 2:
        return m, m, m
    sd = math.sqrt(sum((v - m) ** 2 for v in values) / (n - 1))
    half = scipy.stats.t.ppf(0.5 * (1 + level), n - 1) * sd / math.sqrt(n)
    return m, max(0.0, m - half), m + half


def bench_configs(paths):
    """(policy, cache) -> configuration dict, from bench --json (steermoe.bench/1)."""
    out = {}
    for path in paths:
        doc = load(path)
        if doc.get("schema") != "steermoe.bench/1":
            sys.exit(f"{path}: schema: expected \"steermoe.bench/1\", found {doc.get('schema')!r}")
        for c in doc["configurations"]:
            out[(policy_key(c["policy"]), c.get("cache", 0))] = c
    return out


def round_means(config, key="ms_per_token"):
    return [r[key]["mean"] for r in config["rounds"]]


def save(fig, outputs):
    for out in outputs:
        fmt = out.rsplit(".", 1)[-1].lower()
        if fmt not in ("png", "svg"):
            sys.exit(f"{out}: expected a .png or .svg output")
        fig.savefig(out, format=fmt, dpi=DPI)
    plt.close(fig)


def pareto(points):
    """Indices of points not dominated (lower is better on both axes), sorted by x."""
    front = []
    for i, (x, y) in enumerate(points):
        if not any((x2 <= x and y2 <= y) and (x2 < x or y2 < y) for x2, y2 in points):
            front.append(i)
    return sorted(front, key=lambda i: points[i][0])


def source(doc):
    """What a report measured: its model and text (or trace), where it says."""
    what = doc.get("file") or doc.get("scores_from") or "?"
    return f"{doc.get('model', '?')} on {what}"


def cmd_frontier(args):
    bench = bench_configs(args.bench)
    kl = {}
    sources = set()
    for path in args.kl:
        doc = load(path)
        if doc.get("schema") != "steermoe.kl/1":
            sys.exit(f"{path}: schema: expected \"steermoe.kl/1\", found {doc.get('schema')!r}")
        sources.add(f"KL: {source(doc)}")
        for c in doc["configurations"]:
            kl[(policy_key(c["policy"]), c.get("cache", 0))] = c
    for path in args.bench:
        sources.add(f"latency: {source(load(path))}")
    # The two axes may come from different runs (KL of a model on a text, latency of another
    # shape replaying its routing): said, so that a mix-up is seen rather than drawn silently.
    for s in sorted(sources):
        print(f"plot: frontier: {s}", file=sys.stderr)
    fig, ax = plt.subplots(figsize=FIGSIZE)
    pts, names = [], []
    resident = [c for c in bench.values() if c.get("resident")]
    for key in sorted(kl):
        if key not in bench:
            print(f"plot: note: {label(*key)} has KL but no latency; not drawn", file=sys.stderr)
            continue
        c, k = bench[key], kl[key]
        m, lo, hi = mean_interval(round_means(c))
        x, xlo, xhi = k["kl"]["mean"], k["kl"].get("ci_low"), k["kl"].get("ci_high")
        family = parse_policy(key[0])[0]
        exact = family == "exact"
        marker = "*" if exact else ("o" if key[1] == max(kk[1] for kk in kl) else "s")
        ax.errorbar([x], [m], yerr=[[m - lo], [hi - m]],
                    xerr=None if xlo is None else [[x - xlo], [xhi - x]],
                    fmt=marker, ms=11 if exact else 6, color=FAMILY_COLOR.get(family, "C0"),
                    capsize=2, lw=1)
        ax.annotate(label(*key), (x, m), textcoords="offset points", xytext=(5, 4), fontsize=7)
        pts.append((x, m))
        names.append(key)
    # One Pareto front per cache size (lower latency and lower KL are better).
    caches = sorted({key[1] for key in names}, reverse=True)
    for ci, cache in enumerate(caches):
        idx = [i for i, key in enumerate(names) if key[1] == cache]
        front = [idx[j] for j in pareto([pts[i] for i in idx])]
        ax.plot([pts[i][0] for i in front], [pts[i][1] for i in front], "-" if ci == 0 else "--",
                color="#1f78b4", lw=1.2, alpha=0.7, label=f"Pareto front, C={cache}")
    for r in resident:
        m, lo, hi = mean_interval(round_means(r))
        ax.axhline(m, ls="--", color="black", lw=1, label=f"all experts resident ({m:.2f} ms)")
        ax.axhspan(lo, hi, color="black", alpha=0.08)
    handles = [plt.Line2D([], [], marker="*", ls="", color=FAMILY_COLOR["exact"], ms=11,
                          label="exact routing (KL 0)"),
               plt.Line2D([], [], marker="o", ls="", color=FAMILY_COLOR["cacheprior"],
                          label="Cache-Prior"),
               plt.Line2D([], [], marker="o", ls="", color=FAMILY_COLOR["psr"], label="PSR"),
               plt.Line2D([], [], marker="s", ls="", color="grey", label="smaller cache")]
    h2, l2 = ax.get_legend_handles_labels()
    ax.legend(handles=handles + h2, fontsize=7, loc="upper right")
    ax.set_xlabel("KL divergence from exact routing (nats/token, mean, 95% interval)")
    ax.set_ylabel("decode latency (ms/token, mean over rounds, 95% interval)")
    ax.set_title(args.title or "Latency-divergence frontier")
    ax.set_xscale("symlog", linthresh=1e-3)
    ax.set_xlim(left=-1.5e-4)  # exact routing (KL 0) fully visible
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    save(fig, args.output)


def cmd_cdf(args):
    bench = bench_configs(args.bench)
    fig, ax = plt.subplots(figsize=FIGSIZE)
    drawn = 0
    for key, c in sorted(bench.items()):
        ms = sorted(v for r in c["rounds"] for v in r.get("token_ms", []))
        if not ms:
            continue
        y = [(i + 1) / len(ms) for i in range(len(ms))]
        name = "all experts resident" if c.get("resident") else label(*key)
        ax.step(ms, y, where="post", lw=1.2, label=name,
                color=FAMILY_COLOR.get("resident" if c.get("resident") else
                                       parse_policy(key[0])[0]) if args.family_colors else None)
        drawn += 1
    if not drawn:
        sys.exit("plot: cdf: expected rounds[].token_ms in the bench JSON (bench --json --token-ms)")
    ax.set_xlabel("per-token decode latency (ms)")
    ax.set_ylabel("fraction of tokens ≤ latency")
    ax.set_title(args.title or "Per-token latency CDF (all rounds)")
    ax.set_ylim(0, 1.0)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    save(fig, args.output)


def copy_rows(args):
    rows = []
    for path in args.sim or []:
        doc = load(path)
        for r in doc["results"]:
            p, c = r["prefetch_per_token"], r["copies_per_token"]
            rows.append((label(r["policy"], doc["cache_slots"]), c["demand"], p["late"],
                         p["in_time"], p["unused"], 0.0))
    for key, c in sorted(bench_configs(args.bench or []).items()):
        if c.get("resident"):
            continue
        s = c["rounds"][0]  # copies are identical in every round (logical routing)
        p, cp = s["prefetch_per_token"], s["copies_per_token"]
        if p is None:  # no link moved experts: logical insertions, never timed
            rows.append((label(*key), cp["demand"], 0.0, 0.0, 0.0, cp["prefetch"]))
        else:
            rows.append((label(*key), cp["demand"], p["late"], p["in_time"], p["unused"], 0.0))
    return rows


def cmd_copies(args):
    rows = copy_rows(args)
    if not rows:
        sys.exit("plot: copies: expected --sim or --bench input")
    fig, ax = plt.subplots(figsize=FIGSIZE)
    y = list(range(len(rows)))
    left = [0.0] * len(rows)
    parts = [("demand (stalls the layer)", 1, "#e41a1c"), ("prefetch, late", 2, "#ff7f00"),
             ("prefetch, in time", 3, "#4daf4a"), ("prefetch, unused", 4, "#bdbdbd")]
    if any(r[5] > 0 for r in rows):
        parts.append(("prefetch, no link (not timed)", 5, "#80b1d3"))
    for name, col, color in parts:
        vals = [r[col] for r in rows]
        ax.barh(y, vals, left=left, color=color, label=name, height=0.7)
        left = [a + b for a, b in zip(left, vals)]
    ax.set_yticks(y)
    ax.set_yticklabels([r[0] for r in rows], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("expert copies per token")
    ax.set_title(args.title or "Copies per token by kind")
    ax.legend(fontsize=7, loc="lower right")
    ax.grid(True, axis="x", alpha=0.3)
    fig.tight_layout()
    save(fig, args.output)


def cmd_scatter(args):
    bench = bench_configs(args.bench)
    fig, ax = plt.subplots(figsize=FIGSIZE)
    xs, ys = [], []
    for path in args.sim:
        doc = load(path)
        for r in doc["results"]:
            key = (policy_key(r["policy"]), doc["cache_slots"])
            if key not in bench:
                continue
            m, lo, hi = mean_interval(round_means(bench[key]))
            x = r["ms_per_token"]["mean"]
            fam = parse_policy(key[0])[0]
            ax.errorbar([x], [m], yerr=[[m - lo], [hi - m]], fmt="o",
                        color=FAMILY_COLOR.get(fam, "C0"), capsize=2)
            ax.annotate(label(*key), (x, m), textcoords="offset points", xytext=(5, -8),
                        fontsize=7)
            xs.append(x)
            ys.append(m)
    if not xs:
        sys.exit("plot: scatter: no configuration is in both the sim and the bench JSON")
    hi = max(xs + ys) * 1.1
    ax.plot([0, hi], [0, hi], "-", color="black", lw=0.8, label="measured = simulated")
    ax.fill_between([0, hi], [0, hi * 0.9], [0, hi * 1.1], color="black", alpha=0.07,
                    label="±10%")
    ax.set_xlim(0, hi)
    ax.set_ylim(0, hi)
    ax.set_xlabel("simulated latency (ms/token, steermoe sim)")
    ax.set_ylabel("measured latency (ms/token, steermoe bench, 95% interval)")
    ax.set_title(args.title or "Simulator vs measurement")
    ax.legend(fontsize=7, loc="upper left")
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    save(fig, args.output)


def cmd_forest(args):
    rows = load(args.compare)
    if not isinstance(rows, list) or any("mean_diff" not in r for r in rows):
        sys.exit(f"{args.compare}: expected `steermoe compare` score rows (task, mean_diff, ...); "
                 "latency ratios (compare --latency) are a table, not a forest plot")
    fig, ax = plt.subplots(figsize=FIGSIZE)
    for i, r in enumerate(rows):
        m, lo, hi = r["mean_diff"], r["ci_low"], r["ci_high"]
        is_mean = r["task"] == "mean"
        sig = r.get("p_holm") is not None and r["p_holm"] < 0.05
        color = "black" if is_mean else ("#1b9e77" if sig else "#777777")
        if lo is not None and hi is not None:
            ax.plot([lo, hi], [i, i], "-", color=color, lw=2 if is_mean else 1.2)
        ax.plot([m], [i], "D" if is_mean else "o", color=color, ms=7 if is_mean else 5)
    ax.axvline(0, color="black", lw=0.8)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([("mean over tasks" if r["task"] == "mean" else
                         f"{r['task']} (n={r['n']}, {r['test']})") for r in rows], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel(args.xlabel or "paired difference B − A (95% interval)")
    ax.set_title(args.title or "Paired comparison per task (green: significant after Holm)")
    ax.grid(True, axis="x", alpha=0.3)
    fig.tight_layout()
    save(fig, args.output)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)

    def add(name, fn):
        p = sub.add_parser(name)
        p.add_argument("-o", "--output", action="append", required=True,
                       help="output file (.png or .svg); repeat for both")
        p.add_argument("--title")
        p.set_defaults(fn=fn)
        return p

    p = add("frontier", cmd_frontier)
    p.add_argument("--kl", nargs="+", required=True)
    p.add_argument("--bench", nargs="+", required=True)
    p = add("cdf", cmd_cdf)
    p.add_argument("--bench", nargs="+", required=True)
    p.add_argument("--family-colors", action="store_true")
    p = add("copies", cmd_copies)
    p.add_argument("--sim", nargs="+")
    p.add_argument("--bench", nargs="+")
    p = add("scatter", cmd_scatter)
    p.add_argument("--sim", nargs="+", required=True)
    p.add_argument("--bench", nargs="+", required=True)
    p = add("forest", cmd_forest)
    p.add_argument("--compare", required=True)
    p.add_argument("--xlabel")
    args = ap.parse_args(argv)
    args.fn(args)


if __name__ == "__main__":
    main()
