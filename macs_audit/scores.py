"""A classifier's scores as logits: the one rule for reading probabilities, and a binary classifier's one column,
wherever they come in (a predictions file, a calibration map's inputs, a model that outputs probabilities).

- Probabilities become log-probabilities, log max(p, PROBABILITY_FLOOR): the softmax of them is p again, and a 0
  costs a large finite NLL rather than an infinite one. They must lie in [0, 1] and, for two or more columns, each
  row sum to 1 within SUM_TOLERANCE.
- One column is a binary classifier's positive class (label 1): a logit z becomes the logits (0, z), whose softmax
  gives class 1 the sigmoid of z; a probability p becomes log (1 - p, p).
- NaN and infinite values are refused with their count and the first one's place.
"""

from __future__ import annotations

import numpy as np

from macs_audit.errors import InputError

LOGITS, PROBABILITIES = "logits", "probabilities"
SUM_TOLERANCE = 1e-3  # how far a row of probabilities may sum from 1
PROBABILITY_FLOOR = 1e-300  # the clip under the log: float64's log of it is finite (-690.8)


def check_finite(what: str, array: np.ndarray) -> None:
    """InputError with the count and the first (row, column) of the NaN or infinite values in a 2-D `array`."""
    bad = ~np.isfinite(array)
    if bad.any():
        row, column = (int(i) for i in np.argwhere(bad.reshape(len(array), -1))[0])
        raise InputError(
            f"{what} hold {int(bad.sum()):,} NaN or infinite values, the first at row {row}, column {column}"
        )


def check_probabilities(what: str, p: np.ndarray) -> None:
    """InputError where rows of `p` (N, K) lie outside [0, 1] or, for K >= 2, do not sum to 1 within SUM_TOLERANCE."""
    outside = np.flatnonzero(((p < 0) | (p > 1)).any(axis=1))
    if len(outside):
        row = int(outside[0])
        raise InputError(
            f"{what}: probabilities must lie in [0, 1]; {len(outside):,} rows do not, the first row {row} "
            f"(min {p[row].min():.6g}, max {p[row].max():.6g})"
        )
    if p.shape[1] < 2:
        return
    sums = p.sum(axis=1)
    off = np.flatnonzero(np.abs(sums - 1) > SUM_TOLERANCE)
    if len(off):
        row = int(off[0])
        raise InputError(
            f"{what}: probabilities must sum to 1 per row (within {SUM_TOLERANCE:g}); {len(off):,} rows do not, the "
            f"first row {row} sums to {sums[row]:.6g}; give logits or normalised rows"
        )


def as_logits(what: str, kind: str, scores: np.ndarray) -> tuple[np.ndarray, bool]:
    """(logits (N, K), binary) of `scores` of `kind` (LOGITS or PROBABILITIES): (N, K) with K >= 2, or (N,) / (N, 1)
    for a binary classifier's positive class (then K = 2 and binary True). Logits keep their floating dtype;
    probabilities become float64 log-probabilities. InputError (one line, starting with `what`) for scores that
    are not numbers, not (N,) or (N, K), empty, not finite, or not probabilities where they should be."""
    array = np.asarray(scores)
    if array.dtype.kind not in "fiu":
        raise InputError(f"{what}: {kind} must be numbers, got {array.dtype}")
    if array.ndim == 1:
        array = array[:, None]
    if array.ndim != 2:
        raise InputError(f"{what}: {kind} must be (samples, classes), got shape {array.shape}")
    if len(array) == 0:
        raise InputError(f"{what}: {kind} hold no samples")
    if array.dtype.kind != "f":
        array = array.astype(np.float64)
    check_finite(f"{what}: {kind}", array)
    binary = array.shape[1] == 1
    if kind == LOGITS:  # softmax((0, z)) = (1 - sigmoid(z), sigmoid(z))
        return (np.concatenate([np.zeros_like(array), array], axis=1) if binary else array), binary
    p = array.astype(np.float64)
    check_probabilities(what, p)
    if binary:
        p = np.concatenate([1 - p, p], axis=1)
    return np.log(np.clip(p, PROBABILITY_FLOOR, None)), binary
