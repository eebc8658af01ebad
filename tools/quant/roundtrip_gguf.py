#!/usr/bin/env python3
"""Tool test: GGUFs written by `steermoe quantize` read back by the `gguf` package.

For each scheme: `steermoe quantize -m MODEL --type T -o q.gguf`, then `steermoe convert -m q.gguf
-o deq.gguf --dtype f32` (steermoe's own dequantization, stored as F32). The gguf package's
GGUFReader must parse q.gguf (metadata, tensor infos) and its numpy dequantizer must give, for
every tensor, the same float32 bits as steermoe's dequantization. Prints one line per scheme and
exits non-zero on any mismatch. Needs PyPI's gguf + numpy (not CI):

  /tmp/qv/bin/python tools/quant/roundtrip_gguf.py --steermoe build/steermoe \
      --model models/steer-olmoe-tiny --types q8_0 q4_0 q4_1 q5_0 q5_1 q4_k q5_k q6_k q4_k_m q5_k_m
"""
import argparse
import collections
import os
import subprocess
import sys
import tempfile

import numpy as np
from gguf import GGUFReader
from gguf import quants


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{r.stderr}")
    return r.stderr


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steermoe", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--types", nargs="+", required=True)
    ap.add_argument("--workdir", default=None)
    a = ap.parse_args()
    work = a.workdir or tempfile.mkdtemp(prefix="sm_quant_rt_")
    failures = 0
    for t in a.types:
        q = os.path.join(work, f"{t}.gguf")
        d = os.path.join(work, f"{t}_f32.gguf")
        run([a.steermoe, "quantize", "-m", a.model, "--type", t, "-o", q])
        run([a.steermoe, "convert", "-m", q, "-o", d, "--dtype", "f32"])
        rq, rd = GGUFReader(q), GGUFReader(d)
        ref = {x.name: x for x in rd.tensors}
        types = collections.Counter()
        bad = 0
        for x in rq.tensors:
            types[x.tensor_type.name] += 1
            got = quants.dequantize(x.data, x.tensor_type).astype(np.float32).reshape(-1)
            want = np.asarray(ref[x.name].data).astype(np.float32).reshape(-1)
            if got.shape != want.shape or not np.array_equal(got.view(np.uint32), want.view(np.uint32)):
                bad += 1
                if bad <= 3:
                    n = int(np.sum(got.view(np.uint32) != want.view(np.uint32))) if got.shape == want.shape else -1
                    print(f"  {t}: {x.name} ({x.tensor_type.name}): {n} elements differ")
        kv = len(rq.fields)
        mix = ", ".join(f"{k} x{v}" for k, v in sorted(types.items()))
        status = "OK" if bad == 0 else f"FAIL ({bad} tensors)"
        print(f"{t}: {len(rq.tensors)} tensors, {kv} metadata fields, types [{mix}]: gguf dequantize "
              f"== steermoe bit for bit: {status}")
        failures += bad
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
