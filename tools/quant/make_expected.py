#!/usr/bin/env python3
"""Expected dequantization outputs for tests/kernels/test_quant.cpp, from independent code.

GGUF block types: random blocks (random bytes, with every f16 scale field replaced by a random
finite f16 so no block holds inf/NaN), dequantized by the `gguf` package's numpy code
(gguf.quants.dequantize). FP8 E4M3: all 256 codes decoded by ml_dtypes.float8_e4m3fn.

Writes tests/data/quant/<TYPE>.blocks (raw block bytes) and <TYPE>.f32 (float32 little-endian).
Run (needs PyPI, not needed by CI):
  python3 -m venv /tmp/qv && /tmp/qv/bin/pip install gguf numpy ml_dtypes
  /tmp/qv/bin/python tools/quant/make_expected.py
"""
import os
import sys

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf import quants

OUT = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "data", "quant")

# type: (block bytes, offsets of f16 scale fields inside the block, blocks to write)
TYPES = {
    "Q8_0": (T.Q8_0, 34, [0], 16),
    "Q4_0": (T.Q4_0, 18, [0], 16),
    "Q4_1": (T.Q4_1, 20, [0, 2], 16),
    "Q5_0": (T.Q5_0, 22, [0], 16),
    "Q5_1": (T.Q5_1, 24, [0, 2], 16),
    "Q4_K": (T.Q4_K, 144, [0, 2], 6),
    "Q5_K": (T.Q5_K, 176, [0, 2], 6),
    "Q6_K": (T.Q6_K, 210, [208], 6),
    "Q2_K": (T.Q2_K, 84, [80, 82], 6),
    "Q3_K": (T.Q3_K, 110, [108], 6),
}


def random_f16(rng, n):
    # Magnitudes from 2^-20 (f16 subnormals included) to 2^4, both signs.
    mag = np.exp2(rng.uniform(-20, 4, size=n)).astype(np.float32)
    sign = rng.choice([-1.0, 1.0], size=n).astype(np.float32)
    return (mag * sign).astype(np.float16)


def main():
    rng = np.random.default_rng(20260101)
    os.makedirs(OUT, exist_ok=True)
    for name, (qtype, block_bytes, scale_offsets, n_blocks) in TYPES.items():
        blocks = rng.integers(0, 256, size=(n_blocks, block_bytes), dtype=np.uint8)
        for off in scale_offsets:
            blocks[:, off:off + 2] = random_f16(rng, n_blocks).view(np.uint8).reshape(n_blocks, 2)
        values = quants.dequantize(blocks.reshape(-1), qtype).astype(np.float32).reshape(-1)
        assert np.all(np.isfinite(values)), name
        blocks.tofile(os.path.join(OUT, f"{name}.blocks"))
        values.astype("<f4").tofile(os.path.join(OUT, f"{name}.f32"))
        print(f"{name}: {n_blocks} blocks, {values.size} values")
    try:
        import ml_dtypes
        codes = np.arange(256, dtype=np.uint8)
        values = codes.view(ml_dtypes.float8_e4m3fn).astype(np.float32)
        codes.tofile(os.path.join(OUT, "F8_E4M3.blocks"))
        values.astype("<f4").tofile(os.path.join(OUT, "F8_E4M3.f32"))
        print("F8_E4M3: 256 codes")
    except ImportError:
        print("ml_dtypes missing: F8_E4M3 not written", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
