"""Logits as another CPU would compute them: every logit multiplied by (1 + scale * n), n ~ N(0, 1).

onnxruntime picks its kernels (and so its summation orders) by the instruction set it finds, so a
model's float32 logits are reproducible on one machine but not across machines: on the sample
model, an AVX-512 and an AVX2 machine agree to about 1e-6 relative (the golden report's
perturbation views, whose images are the same bytes on both, differ by 1.2e-6 relative in the
mean margin). A relative noise of 1e-6 per logit stands in for that second machine, so the
goldens' tolerances can be tested on one.

`MACS_AUDIT_PERTURB_LOGITS=1e-6 pytest tests/test_goldens.py` runs the golden comparison under
it; `tests/test_goldens.py` also runs it at 1e-6 unconditionally.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import numpy as np

ENV = "MACS_AUDIT_PERTURB_LOGITS"
DEFAULT_SEED = 20260601


def scale_from_env() -> float:
    """The relative scale asked for in MACS_AUDIT_PERTURB_LOGITS (0 when unset or empty)."""
    value = os.environ.get(ENV, "").strip()
    if not value:
        return 0.0
    scale = float(value)
    if not 0 <= scale < 1:
        raise ValueError(f"{ENV}={value!r}: a relative scale in [0, 1) is expected, e.g. 1e-6")
    return scale


def perturb(logits: np.ndarray, scale: float, rng: np.random.Generator) -> np.ndarray:
    """logits * (1 + scale * n), n standard normal per element (float64), back in the input's dtype."""
    noise = rng.standard_normal(logits.shape)
    return (logits * (1.0 + scale * noise)).astype(logits.dtype, copy=False)


class PerturbedPredictor:
    """Delegates everything to the wrapped predictor; `predict` returns perturbed logits. The noise
    comes from one generator per loaded model, so a run in one process draws the same noise every time."""

    def __init__(self, predictor, scale: float, seed: int):
        self._predictor = predictor
        self._scale = scale
        self._rng = np.random.default_rng(seed)
        self.calls = 0

    def __getattr__(self, name):
        return getattr(self._predictor, name)

    def predict(self, images: np.ndarray) -> np.ndarray:
        self.calls += 1
        return perturb(self._predictor.predict(images), self._scale, self._rng)


@contextlib.contextmanager
def perturbed_logits(scale: float, seed: int = DEFAULT_SEED) -> Iterator[list[PerturbedPredictor]]:
    """While active, every model opened by `load_predictor` (the CLI's evaluate and calibrate import
    it at call time) returns perturbed logits; yields the list of the models so wrapped, so that a
    test can check the noise reached them. scale 0: nothing is changed (and the list stays empty)."""
    loaded: list[PerturbedPredictor] = []
    if scale == 0:
        yield loaded
        return
    from macs_audit.models import predictor as module

    original = module.load_predictor

    def load_perturbed(*args, **kwargs):
        wrapped = PerturbedPredictor(original(*args, **kwargs), scale, seed)
        loaded.append(wrapped)
        return wrapped

    module.load_predictor = load_perturbed
    try:
        yield loaded
    finally:
        module.load_predictor = original
