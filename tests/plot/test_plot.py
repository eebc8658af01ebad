#!/usr/bin/env python3
"""Renders every plot of tools/plot/plot.py from the fixed inputs in tests/data/plot as PNG and
SVG and checks that each file is a valid image of the expected size. Fails (never skips) when
matplotlib or scipy is missing: scripts/install-deps.sh installs python3-matplotlib and
python3-scipy."""
import struct
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PLOT = ROOT / "tools" / "plot" / "plot.py"
DATA = ROOT / "tests" / "data" / "plot"
WIDTH_PX, HEIGHT_PX = 1050, 675  # 7 x 4.5 in at 150 dpi
WIDTH_PT, HEIGHT_PT = "504pt", "324pt"

try:
    import matplotlib  # noqa: F401
    import scipy  # noqa: F401
except ImportError as e:
    sys.exit(f"FAIL: {e}: install python3-matplotlib and python3-scipy (scripts/install-deps.sh)")


def png_size(path):
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path}: not a PNG"
    assert data[12:16] == b"IHDR", f"{path}: no IHDR chunk"
    assert data[-8:-4] == b"IEND", f"{path}: truncated (no IEND)"
    return struct.unpack(">II", data[16:24])


def svg_size(path):
    root = ET.parse(path).getroot()
    assert root.tag.endswith("svg"), f"{path}: root is {root.tag}"
    assert len(list(root.iter())) > 50, f"{path}: almost empty drawing"
    return root.get("width"), root.get("height")


CASES = {
    "frontier": ["--kl", DATA / "kl.json", "--bench", DATA / "bench.json"],
    "cdf": ["--bench", DATA / "bench.json"],
    "copies": ["--sim", DATA / "sim_c32.json", DATA / "sim_c16.json"],
    "scatter": ["--sim", DATA / "sim_c32.json", DATA / "sim_c16.json", "--bench",
                DATA / "bench.json"],
    "forest": ["--compare", DATA / "compare.json"],
}


def main():
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        for name, args in CASES.items():
            png, svg = Path(tmp) / f"{name}.png", Path(tmp) / f"{name}.svg"
            cmd = [sys.executable, str(PLOT), name, *map(str, args), "-o", str(png), "-o", str(svg)]
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode != 0:
                print(f"FAIL {name}: exit {r.returncode}\n{r.stderr}")
                failures += 1
                continue
            try:
                assert png_size(png) == (WIDTH_PX, HEIGHT_PX), f"PNG size {png_size(png)}"
                assert svg_size(svg) == (WIDTH_PT, HEIGHT_PT), f"SVG size {svg_size(svg)}"
                print(f"ok {name}: {png.stat().st_size} B PNG, {svg.stat().st_size} B SVG")
            except AssertionError as e:
                print(f"FAIL {name}: {e}")
                failures += 1
        # The frontier names where each axis came from (the two may be different runs).
        r = subprocess.run([sys.executable, str(PLOT), "frontier", "--kl", str(DATA / "kl.json"),
                            "--bench", str(DATA / "bench.json"), "-o",
                            str(Path(tmp) / "f2.png")], capture_output=True, text=True)
        if r.returncode != 0 or "plot: frontier: KL: synthetic fixture on fixture.txt" not in \
                r.stderr or "plot: frontier: latency: " not in r.stderr:
            print(f"FAIL frontier sources: exit {r.returncode}, {r.stderr!r}")
            failures += 1
        # A wrong schema is a clear error, not a plot.
        bad = Path(tmp) / "bad.json"
        bad.write_text('{"schema": "other", "configurations": []}')
        r = subprocess.run([sys.executable, str(PLOT), "cdf", "--bench", str(bad), "-o",
                            str(Path(tmp) / "x.png")], capture_output=True, text=True)
        if r.returncode == 0 or "steermoe.bench/1" not in r.stderr:
            print(f"FAIL schema check: exit {r.returncode}, {r.stderr!r}")
            failures += 1
        # compare --latency rows are not a forest: a clear error, not a KeyError traceback.
        lat = Path(tmp) / "latency.json"
        lat.write_text('[{"configuration": "a", "baseline": "b", "ratio": 1.1}]')
        r = subprocess.run([sys.executable, str(PLOT), "forest", "--compare", str(lat), "-o",
                            str(Path(tmp) / "f.png")], capture_output=True, text=True)
        if r.returncode == 0 or "compare --latency" not in r.stderr or "Traceback" in r.stderr:
            print(f"FAIL forest on latency rows: exit {r.returncode}, {r.stderr!r}")
            failures += 1
    # A python without matplotlib (-S: no site packages) is told which one has it.
    r = subprocess.run([sys.executable, "-S", str(PLOT), "--help"], capture_output=True, text=True)
    if r.returncode == 0 or "python3-matplotlib" not in r.stderr or "Traceback" in r.stderr:
        print(f"FAIL missing matplotlib: exit {r.returncode}, {r.stderr!r}")
        failures += 1
    # Configurations are matched across files by a normalized policy: a key at its default
    # (gate=window, n=1 for PSR) names the same configuration, gate=bonus another one.
    sys.path.insert(0, str(PLOT.parent))
    import plot  # noqa: E402
    same = [("psr:lambda=0.3", "psr:lambda=0.30,n=1,evict=a,gate=window"),
            ("cacheprior:lambda=0.2", "cacheprior:lambda=0.2,n=0,evict=lru,gate=window")]
    differ = [("psr:lambda=0.3", "psr:lambda=0.3,gate=bonus"),
              ("cacheprior:lambda=0.2,n=1", "cacheprior:lambda=0.2,n=1,gate=bonus")]
    for a, b in same:
        if plot.policy_key(a) != plot.policy_key(b):
            print(f"FAIL policy_key: {a} and {b} should match")
            failures += 1
    for a, b in differ:
        if plot.policy_key(a) == plot.policy_key(b):
            print(f"FAIL policy_key: {a} and {b} should differ")
            failures += 1
    # Latency intervals stop at 0, as steermoe's tables do (a spread round would go below).
    m, lo, hi = plot.mean_interval([1.0, 9.0, 0.5])
    if not (lo == 0.0 and hi > m):
        print(f"FAIL mean_interval: {m, lo, hi} (the low end should stop at 0)")
        failures += 1
    if "bonus-gate" not in plot.label("psr:lambda=0.3,gate=bonus"):
        print("FAIL label: the bonus gate is not named")
        failures += 1
    # A bench row without a link moving experts has no prefetch split (null): its logical
    # prefetches are drawn as their own part, not dropped.
    import argparse  # noqa: E402
    import json  # noqa: E402
    with tempfile.TemporaryDirectory() as tmp:
        logical = Path(tmp) / "logical.json"
        logical.write_text(json.dumps({"schema": "steermoe.bench/1", "configurations": [
            {"policy": "psr:lambda=0.3", "cache": 16, "resident": False, "rounds": [
                {"copies_per_token": {"demand": 2.0, "prefetch": 3.0, "total": 5.0},
                 "copies_source": "logical", "prefetch_per_token": None}]}]}))
        rows = plot.copy_rows(argparse.Namespace(sim=None, bench=[logical]))
        if [r[1:] for r in rows] != [(2.0, 0.0, 0.0, 0.0, 3.0)]:
            print(f"FAIL copies of a logical bench row: {rows}")
            failures += 1
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
