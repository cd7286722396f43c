"""Accuracy on unlabeled target data, estimated from the model's confidences alone.

- ATC, average thresholded confidence (Garg et al., ICLR 2022): on labelled source data, find the threshold t
  such that the fraction of source scores at or above t equals the source accuracy; the estimate is the fraction
  of target scores at or above t. t is the (E + 1)-th smallest source score, E the number of source errors, so
  exactly the N - E highest source scores clear it when scores are distinct (ties at t all clear it); with no
  correct source prediction t is infinite and the estimate 0. Two scores, as in the paper: the maximum softmax
  confidence (ATC-MC) and the negative entropy sum_j p_j log p_j (ATC-NE).
- DoC, difference of confidences (Guillory et al., ICCV 2021): source accuracy + (mean target confidence -
  mean source confidence), clipped to [0, 1].

Both take the source (labelled) data as given and fixed; the intervals are percentile bootstrap intervals over
the unlabeled target samples only (each resample redraws the target set with replacement).

Given a temperature T (the audit's, fitted on its calibration split, where it lowered the NLL on the split's
scored part: auditing/calibration.py, `helpful_temperature`), both are fitted on the temperature-scaled
scores, softmax(logits / T) for source and target alike, as Garg et al. fit ATC: on an overconfident model the
raw confidences cluster near 1, where a threshold or an offset tells little apart. The estimate records which.
"""

from __future__ import annotations

import math

import numpy as np

from macs_audit.errors import InputError
from macs_audit.metrics.conventions import softmax_with_log
from macs_audit.metrics.resampling import draw_counts

ESTIMATORS = ("atc_mc", "atc_ne", "doc")
CONVENTION = (
    "threshold / offset fitted on the labelled evaluation data (softmax of the logits / T where the audit fitted a "
    "temperature T on its calibration split that lowered the NLL on the split's scored part, else of the raw "
    "logits; float64): ATC = fraction of "
    "target scores >= t, t = the (E+1)-th smallest source score (E = source errors), scores max softmax (atc_mc) "
    "and negative entropy (atc_ne); DoC = source accuracy + mean target confidence - mean source confidence, "
    "clipped to [0, 1]; percentile bootstrap over the target samples"
)


def confidence_scores(logits: np.ndarray) -> dict[str, np.ndarray]:
    """(N,) scores per ATC variant: the max softmax probability and the negative entropy."""
    p, log_p = softmax_with_log(logits)
    return {"atc_mc": p.max(axis=1), "atc_ne": (p * log_p).sum(axis=1)}


def atc_threshold(source_scores: np.ndarray, source_correct: np.ndarray) -> float:
    """The threshold whose share of source scores at or above it is the source accuracy."""
    n_errors = int((~np.asarray(source_correct, dtype=bool)).sum())
    if n_errors >= len(source_scores):
        return math.inf
    return float(np.sort(source_scores)[n_errors])


def estimates(
    source_logits: np.ndarray,
    source_labels: np.ndarray,
    target_logits: np.ndarray,
    n_resamples: int,
    seed: int,
    temperature: float | None = None,
) -> dict[str, dict]:
    """Every estimator's accuracy estimate on the target, with its 95% interval and fitted constant; with a
    `temperature`, on the scores of logits / temperature (source and target)."""
    if len(source_labels) == 0 or len(target_logits) == 0:
        raise InputError("an accuracy estimate needs labelled source samples and unlabeled target samples")
    if temperature is not None:
        source_logits = np.asarray(source_logits, dtype=np.float64) / temperature
        target_logits = np.asarray(target_logits, dtype=np.float64) / temperature
    source_p, _ = softmax_with_log(source_logits)
    correct = source_p.argmax(axis=1) == np.asarray(source_labels)
    source_accuracy = float(correct.mean())
    source, target = confidence_scores(source_logits), confidence_scores(target_logits)
    columns, fitted, clip = {}, {}, {}
    for name in ("atc_mc", "atc_ne"):
        t = atc_threshold(source[name], correct)
        columns[name] = (target[name] >= t).astype(np.float64)
        fitted[name] = {"threshold": t if math.isfinite(t) else None}
    offset = source_accuracy - float(source["atc_mc"].mean())
    columns["doc"] = target["atc_mc"] + offset
    fitted["doc"] = {"offset": offset}
    clip["doc"] = True
    values = np.column_stack([columns[name] for name in ESTIMATORS])
    point = values.mean(axis=0)
    intervals = _intervals(values, n_resamples, seed)
    out = {}
    for i, name in enumerate(ESTIMATORS):
        lo_hi = intervals[i] if intervals is not None else None
        if clip.get(name):
            point[i] = np.clip(point[i], 0.0, 1.0)
            lo_hi = [float(np.clip(v, 0.0, 1.0)) for v in lo_hi] if lo_hi is not None else None
        out[name] = {"accuracy": float(point[i]), "interval": lo_hi, **fitted[name], "temperature": temperature}
    return out


def _intervals(values: np.ndarray, n_resamples: int, seed: int, level: float = 0.95) -> list[list[float]] | None:
    """Percentile intervals of the column means of `values` over resamples of its rows; None without them."""
    n = len(values)
    if n_resamples <= 0 or n < 2:
        return None
    means = np.concatenate([counts @ values / n for counts in draw_counts(n, n_resamples, np.random.default_rng(seed))])
    alpha = (1 - level) / 2
    return np.quantile(means, [alpha, 1 - alpha], axis=0).T.tolist()
