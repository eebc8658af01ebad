"""steermoe: the prefetch-steered routing policy library from Python.

The same C++ code as the steermoe engine (src/schedule, src/policy, src/trace) through pybind11;
numpy arrays in and out. See python/README.md.

    import numpy as np, steermoe
    trace = steermoe.Trace.open("data/traces/synth-olmoe")
    calib = steermoe.load_calibration("data/traces/synth-olmoe/calib.smcal")
    step = steermoe.Step(trace.router_spec(), "psr:lambda=0.3,n=1", calib, cache_slots=32)
    step.reset()
    selected = step.run_token(int(trace.tokens[0]), trace.scores[0], trace.pregate[0])  # [L, K]
"""
import json as _json

import numpy as _np

from . import _core

# pybind11 before 2.12 (Debian bookworm has 2.10) reads numpy 1.x array descriptors: under
# numpy 2 every array it returns would be silently wrong, so refuse to run instead.
if int(_np.__version__.split(".")[0]) >= 2 and tuple(_core.pybind11_version) < (2, 12):
    raise ImportError(f"steermoe was built with pybind11 {_core.pybind11_version[0]}."
                      f"{_core.pybind11_version[1]}, which needs numpy < 2 (found numpy "
                      f"{_np.__version__}); install numpy<2 or build with pybind11 >= 2.12")

from ._core import (  # noqa: F401
    Calibration,
    Error,
    RouterSpec,
    Step,
    ScoreMode,
    canonical_policy,
    parse_policy,
    uninformed_calibration,
)
from ._core import Trace as _Trace
from ._core import load_calibration as _load_calibration
from ._core import TraceWriter as _TraceWriter

__all__ = ["Calibration", "Error", "RouterSpec", "Step", "Trace", "TraceWriter",
           "canonical_policy", "load_calibration", "parse_policy", "uninformed_calibration",
           "replay"]


def load_calibration(path):
    """Reads a .smcal calibration file (warm sets, score ranges, token prior)."""
    return _load_calibration(str(path))


class Trace:
    """A trace folder (meta.json, tokens.npy, scores.npy, pregate.npy, ...), memory-mapped.

    scores, pregate, weights_scores: read-only float32 [T, L, E] views (weights_scores None when
    absent); tokens int32 [T]; sequence_starts int64 [S]; meta: the meta.json fields (dict)."""

    def __init__(self, core):
        self._core = core
        self.meta = _json.loads(core.meta_json)

    @classmethod
    def open(cls, path):
        return cls(_Trace.open(str(path)))

    def __getattr__(self, name):
        return getattr(self._core, name)


class TraceWriter:
    """Records a trace step by step: append_step(token, scores[L, E], pregate[L, E],
    weight_scores=None), begin_sequence() between requests, close() writes meta.json."""

    def __init__(self, path, meta, with_weights_scores=False):
        self._core = _TraceWriter(str(path), _json.dumps(meta), with_weights_scores)

    def __getattr__(self, name):
        return getattr(self._core, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if exc[0] is None:
            self._core.close()


def replay(trace, calibration, policy, cache_slots):
    """Runs `policy` over `trace` exactly as `steermoe replay` (the same C++ code): reset at each
    sequence start, then each token through every layer in the engine's order. Returns an
    iterator of (t, layer, selected, prefetch copies, demand copies, resident)."""
    core = trace._core if isinstance(trace, Trace) else trace
    return iter(_core.replay_decisions(core, calibration, policy, cache_slots))
