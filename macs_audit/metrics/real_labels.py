"""Scores against multi-label ground truth (ImageNet ReaL): a top-1 prediction is right when it is any of the
image's labels; images with no label are left out. Accuracy beside the original labels' on the same images,
and calibration of the max-softmax confidence against "any ReaL label is right" (the binned ECE's 15 equal-width
bins, and the shift papers' RMS calibration error)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from macs_audit.metrics.accumulators import bin_index, bin_indicator, ece_from_bins
from macs_audit.metrics.bootstrap import percentile_interval
from macs_audit.metrics.conventions import N_BINS, softmax
from macs_audit.metrics.resampling import draw_counts
from macs_audit.metrics.rms_calibration import rms_calibration_error

CHUNK = 4096
CONVENTION = (
    "ReaL: a top-1 prediction is right when it is any of the image's ReaL labels; images without one are left "
    "out; ece_real and rms_calibration_error_real calibrate the max softmax against that rule, "
    "accuracy_original is the original labels' top-1 on the same images"
)


def real_scores(
    logits: np.ndarray, labels: np.ndarray, label_sets: Sequence[Sequence[int]], resamples: int = 0, seed: int = 0
) -> dict:
    """ReaL accuracy and calibration beside the original labels' (module docstring); with `resamples`, their 95%
    percentile-bootstrap intervals over the scored images (`intervals`)."""
    keep = np.array([len(s) > 0 for s in label_sets], dtype=bool)
    out: dict = {"n": int(keep.sum()), "n_without_labels": int((~keep).sum())}
    if not keep.any():
        return out
    kept_logits = logits[keep]
    top1 = kept_logits.argmax(axis=1)
    confidence = np.concatenate(  # max softmax, in pieces: a float64 softmax of 50,000 x 1,000 is 400 MB
        [softmax(kept_logits[i : i + CHUNK]).max(axis=1) for i in range(0, len(kept_logits), CHUNK)]
    )
    kept_sets = [s for s, k in zip(label_sets, keep.tolist(), strict=True) if k]
    right = np.array([p in s for p, s in zip(top1.tolist(), kept_sets, strict=True)], dtype=bool)
    original = top1 == np.asarray(labels)[keep]
    b = bin_index(confidence, N_BINS)
    count = np.bincount(b, minlength=N_BINS)
    conf_sum = np.bincount(b, weights=confidence, minlength=N_BINS)

    def ece(hit: np.ndarray) -> float:
        return ece_from_bins(count, conf_sum, np.bincount(b, weights=hit, minlength=N_BINS), len(hit))

    out.update(
        accuracy_real=float(right.mean()),
        accuracy_original=float(original.mean()),
        ece_real=ece(right),
        ece_original=ece(original),
    )
    rms = rms_calibration_error(confidence, right)
    if rms is not None:
        out["rms_calibration_error_real"] = rms
    if resamples > 0 and len(right) > 1:
        out["intervals"] = _intervals(confidence, right, original, resamples, seed)
        out["bootstrap_resamples"] = resamples
        out["seed"] = seed
    return out


def _intervals(
    confidence: np.ndarray, right: np.ndarray, original: np.ndarray, resamples: int, seed: int
) -> dict[str, list[float]]:
    """Percentile intervals of the two accuracies and ECEs: each resample's sums are its draw counts times the
    per-image columns (the bins' one-hot columns for the ECEs)."""
    n = len(confidence)
    onehot = bin_indicator(confidence, N_BINS)
    columns = np.column_stack(
        [right, original, onehot * confidence[:, None], onehot * right[:, None], onehot * original[:, None]]
    )
    found: dict[str, list[float]] = {k: [] for k in ("accuracy_real", "accuracy_original", "ece_real", "ece_original")}
    for counts in draw_counts(n, resamples, np.random.default_rng(seed)):
        sums = counts @ columns / n
        conf_b, real_b, orig_b = (sums[:, 2 + i * N_BINS : 2 + (i + 1) * N_BINS] for i in range(3))
        found["accuracy_real"].append(sums[:, 0])
        found["accuracy_original"].append(sums[:, 1])
        found["ece_real"].append(np.abs(real_b - conf_b).sum(axis=1))
        found["ece_original"].append(np.abs(orig_b - conf_b).sum(axis=1))
    return {k: percentile_interval(np.concatenate(v)) for k, v in found.items()}
