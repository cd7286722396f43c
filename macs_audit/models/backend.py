"""What every backend shares: checking and converting the model's outputs, and the file hash the report records."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np

from macs_audit.errors import InputError


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


class OutputAdapter:
    """Checks model outputs and converts probabilities to log-probabilities.

    output='auto' inspects the first batch: rows that are non-negative and sum to 1 are taken as
    probabilities (and recorded as detected), anything else as logits.
    """

    def __init__(self, declared: str, num_classes: int | None):
        self.kind = None if declared == "auto" else declared
        self.detected = False
        self.num_classes = num_classes

    def __call__(self, out: np.ndarray) -> np.ndarray:
        out = np.asarray(out)
        if out.ndim != 2:
            raise InputError(f"the model returned an output of shape {out.shape}; expected (batch, classes)")
        if self.num_classes is not None and out.shape[1] != self.num_classes:
            raise InputError(
                f"the model returned {out.shape[1]} outputs per image but {self.num_classes} classes were declared"
            )
        if not np.isfinite(out).all():
            raise InputError("the model produced NaN or infinite outputs")
        if self.kind is None:
            looks_like_probs = out.min() >= 0 and np.allclose(out.sum(axis=1), 1.0, atol=1e-3)
            self.kind = "probabilities" if looks_like_probs else "logits"
            self.detected = True
        if self.kind == "probabilities":
            if out.min() < 0 or not np.allclose(out.sum(axis=1), 1.0, atol=1e-3):
                raise InputError("the model was declared to output probabilities but its rows do not sum to 1")
            return np.log(np.clip(out.astype(np.float64), 1e-300, None)).astype(np.float32)
        return out.astype(np.float32, copy=False)

    def describe(self) -> str:
        if self.kind is None:
            return "unknown (nothing evaluated)"
        return f"{self.kind} ({'detected' if self.detected else 'declared'})"
