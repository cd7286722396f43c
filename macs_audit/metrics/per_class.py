"""Each class's share of the clean view's calibration: of the images whose label is the class, how many the
model gets right, how confident it is on them, and their ECE (equal-width bins, as the view's own ECE).
Numpy only; the reports list the classes worst first."""

from __future__ import annotations

from typing import Any

import numpy as np

from macs_audit.metrics.conventions import N_BINS, softmax_with_log


def binned_ece(confidence: np.ndarray, correct: np.ndarray, n_bins: int = N_BINS) -> float:
    """The equal-width-bin ECE of (confidence, correct): sum over bins of n_b / N |acc_b - conf_b|."""
    if len(confidence) == 0:
        return float("nan")
    bins = np.minimum((confidence * n_bins).astype(np.int64), n_bins - 1)
    gap = np.bincount(bins, weights=correct - confidence, minlength=n_bins)
    return float(np.abs(gap).sum() / len(confidence))


def set_coverage(sets: Any, logits: np.ndarray) -> dict[int, tuple[float, int]]:
    """class -> (coverage, images) of the LAC conformal sets (`sets`, metrics.conformal.SplitConformal) on
    the scored part of the calibration split, by the images' true class; {} without LAC sets."""
    from macs_audit.metrics import conformal

    threshold = sets.thresholds.get("lac") if sets is not None else None
    if threshold is None:
        return {}
    probabilities, _ = softmax_with_log(logits[sets.scored])
    held = conformal.prediction_sets(probabilities, threshold, "lac")[np.arange(len(sets.labels)), sets.labels]
    out = {}
    for k in np.unique(sets.labels):
        mask = sets.labels == k
        out[int(k)] = (float(held[mask].mean()), int(mask.sum()))
    return out


def per_class_stats(
    logits: np.ndarray, labels: np.ndarray, class_names: list[str] | None = None, sets: Any = None
) -> list[dict]:
    """One row per class with images: {class, name, n, accuracy, mean_confidence, ece}, in class order, with
    `coverage` and `n_coverage` (the LAC sets' coverage of the class's scored images) where `sets` is given."""
    coverage = set_coverage(sets, logits)
    probabilities, _ = softmax_with_log(logits)
    confidence = probabilities.max(axis=1)
    correct = (probabilities.argmax(axis=1) == labels).astype(np.float64)
    rows = []
    for k in range(probabilities.shape[1]):
        mask = labels == k
        n = int(mask.sum())
        if n == 0:
            continue
        rows.append(
            {
                "class": k,
                "name": class_names[k] if class_names and k < len(class_names) else str(k),
                "n": n,
                "accuracy": float(correct[mask].mean()),
                "mean_confidence": float(confidence[mask].mean()),
                "ece": binned_ece(confidence[mask], correct[mask]),
                **({"coverage": coverage[k][0], "n_coverage": coverage[k][1]} if k in coverage else {}),
            }
        )
    return rows


def prediction_spread(logits: np.ndarray, class_names: list[str] | None = None) -> dict:
    """What the model predicts, whatever the labels: {classes_predicted, top_class, top_class_name,
    top_class_share, confidence_min, confidence_max}. A model that predicts one class for every image, or
    gives every image the same confidence, scores at chance however well its confidences match its accuracy
    (formats/summary.py names both as problems)."""
    probabilities, _ = softmax_with_log(logits)
    predicted = probabilities.argmax(axis=1)
    confidence = probabilities.max(axis=1)
    counts = np.bincount(predicted, minlength=probabilities.shape[1])
    top = int(counts.argmax())
    return {
        "classes_predicted": int((counts > 0).sum()),
        "top_class": top,
        "top_class_name": class_names[top] if class_names and top < len(class_names) else None,
        "top_class_share": float(counts[top] / len(predicted)),
        "confidence_min": float(confidence.min()),
        "confidence_max": float(confidence.max()),
    }
