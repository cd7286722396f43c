"""The conventions every metric and calibrator shares (docs/method.md §2): the bin count of the binned
estimators and reliability diagrams, the margin target, the view metrics with a bootstrap interval, and the
softmax, in float64 from the logits.

The softmax's two forms round differently and each keeps the bytes of what reads it: `softmax_with_log`
(the metrics) exponentiates the log-probabilities, `softmax` (the one-vs-rest calibrators)
divides the exponentials by their sum. Both start from the same shifted logits (`log_softmax`).
"""

from __future__ import annotations

import numpy as np

N_BINS = 15  # bins of the binned ECEs, the reliability diagram and histogram binning
# "Fraction of samples with margin below a target": the target is MaCS's Delta default (FinetuneOptions.delta
# reads it), so that the audit counts the margins the fine-tuning pushes up.
MARGIN_TARGET = 1.0
# The view metrics with a 95% bootstrap interval (metrics.bootstrap): percentile intervals of the means,
# bias-corrected ones of the calibration errors. Here, free of the accumulators, for the report's tables.
MEAN_METRICS = ("accuracy", "nll", "brier")
# rms_calibration_error (the shift papers' rule) only where a view has the 200 images it needs.
ERROR_METRICS = (
    "ece",
    "mce",
    "adaptive_ece",
    "smooth_ece",
    "l2_ece",
    "debiased_l2_ece",
    "ece_sweep",
    "rms_calibration_error",
)
INTERVAL_METRICS = MEAN_METRICS + ERROR_METRICS


def _shifted(logits: np.ndarray) -> np.ndarray:
    """Row-wise logits less their maximum, as a new float64 array."""
    z = np.array(logits, dtype=np.float64)  # copy
    z -= z.max(axis=1, keepdims=True)
    return z


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """Row-wise log-softmax in float64 (a new array)."""
    out = _shifted(logits)
    out -= np.log(np.exp(out).sum(axis=1, keepdims=True))
    return out


def softmax_with_log(logits: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(probabilities, log-probabilities) in float64: the probabilities are exp(log_softmax)."""
    log_p = log_softmax(logits)
    return np.exp(log_p), log_p


def softmax(logits: np.ndarray) -> np.ndarray:
    """Row-wise softmax in float64 (a new array): the exponentials of the shifted logits over their sum."""
    p = _shifted(logits)
    np.exp(p, out=p)
    p /= p.sum(axis=1, keepdims=True)
    return p


# The multiple-comparison corrections of the slice section (metrics/slices.py): the name and the error rate each
# controls; here, where a reader of saved reports may import them without the statistics.
SLICE_CORRECTIONS = {"holm": ("Holm", "family-wise error rate"), "bh": ("Benjamini-Hochberg", "false discovery rate")}
