"""Parity of a candidate model with its reference on the same images: how far an export, an FP16 or an INT8
build moved the predictions and the calibration. Numpy only.

Per view: top-1 agreement, the flips (correct -> wrong, wrong -> correct), the mean and largest absolute
logit difference, the mean KL(reference || candidate) of the softmaxes, and the difference (candidate -
reference) of the view metrics in DIFFERENCE_METRICS and of the conformal sets' coverage and size.

The intervals are paired: both models' statistics are computed on the same resamples (the same draw counts,
metrics.resampling, from one seed) and the interval is that of their difference. The shared draws cancel
the sampling noise common to both models, so a model against itself, or against a copy of itself, gives a
difference and an interval of exactly zero. Means (accuracy, NLL, Brier, agreement, coverage, set size):
the percentile interval of the resampled differences. Calibration errors (ECE, smooth ECE): that interval
shifted down by the bootstrap bias of the difference, mean(resampled) - estimate, as metrics.bootstrap
corrects a single model's error (not clipped: a difference may be negative).
"""

from __future__ import annotations

import numpy as np

from macs_audit.metrics import bootstrap, conformal, estimators
from macs_audit.metrics.accumulators import CalibrationAccumulator, bin_index
from macs_audit.metrics.conventions import softmax64
from macs_audit.metrics.resampling import draw_counts, map_in_order, piece_threads

DIFFERENCE_METRICS = ("accuracy", "ece", "smooth_ece", "nll", "brier")
_MEANS = ("accuracy", "nll", "brier")  # the metrics of DIFFERENCE_METRICS that are means over the samples
CONVENTION = (
    "candidate - reference on the same images; paired 95% bootstrap intervals (the same resampled draw counts "
    "for both models): percentile intervals of the differences of means (accuracy, NLL, Brier, agreement, "
    "coverage, set size), bias-corrected ones of the differences of ECE and smooth ECE; corruption views: "
    "intervals of the means only; KL(reference || candidate) of the float64 softmaxes; conformal thresholds "
    "each model's own, fitted on the calibration split's fit part of the clean view, scored on its scored part"
)


def agreement(reference: np.ndarray, candidate: np.ndarray, labels: np.ndarray) -> dict[str, np.ndarray]:
    """Per-sample arrays of the two models' logits (N, K) on the same N images: `agree` (same top-1 class),
    `correct_to_wrong` and `wrong_to_correct` (the candidate's flips against the label), `abs_difference`
    (mean absolute logit difference of the row), `max_abs_difference` and `kl` (KL(reference || candidate))."""
    p_ref, log_ref = softmax64(reference)
    p_cand, log_cand = softmax64(candidate)
    labels = np.asarray(labels, dtype=np.int64)
    pred_ref, pred_cand = p_ref.argmax(axis=1), p_cand.argmax(axis=1)  # as the accumulators predict
    hit_ref, hit_cand = pred_ref == labels, pred_cand == labels
    gap = np.abs(np.asarray(candidate, dtype=np.float64) - np.asarray(reference, dtype=np.float64))
    return {
        "agree": pred_ref == pred_cand,
        "correct_to_wrong": hit_ref & ~hit_cand,
        "wrong_to_correct": ~hit_ref & hit_cand,
        "abs_difference": gap.mean(axis=1),
        "max_abs_difference": gap.max(axis=1),
        "kl": np.maximum((p_ref * (log_ref - log_cand)).sum(axis=1), 0.0),  # >= 0; rounding can give -1e-17
    }


def agreement_summary(per_sample: dict[str, np.ndarray]) -> dict[str, float | int]:
    """The view's agreement, flip counts, mean and max absolute logit difference and mean KL."""
    return {
        "agreement": float(per_sample["agree"].mean()),
        "correct_to_wrong": int(per_sample["correct_to_wrong"].sum()),
        "wrong_to_correct": int(per_sample["wrong_to_correct"].sum()),
        "mean_abs_logit_difference": float(per_sample["abs_difference"].mean()),
        "max_abs_logit_difference": float(per_sample["max_abs_difference"].max()),
        "mean_kl": float(per_sample["kl"].mean()),
    }


def mean_intervals(columns: dict[str, np.ndarray], n_resamples: int, seed: int, level: float = 0.95) -> dict:
    """The percentile interval of the mean of each per-sample column (all of one length N) over `n_resamples`
    resamples drawn from `seed`: the draws metrics.bootstrap makes for N samples and that seed. {} without
    resamples or with fewer than two samples."""
    names = list(columns)
    n = len(columns[names[0]]) if names else 0
    if n_resamples <= 0 or n < bootstrap.MIN_BOOTSTRAP_SAMPLES:
        return {}
    stacked = np.column_stack([np.asarray(columns[name], dtype=np.float64) for name in names])
    means = np.concatenate(
        [counts @ stacked / n for counts in draw_counts(n, n_resamples, np.random.default_rng(seed))]
    )
    return {name: bootstrap.percentile_interval(means[:, j], level) for j, name in enumerate(names)}


def _resampled_side(acc: CalibrationAccumulator) -> dict:
    """What one model's resampled statistics are computed from: its per-sample columns (correct, NLL, Brier, then
    the ECE's per-bin residuals) and, for smooth ECE, its grid cells, residuals and the point estimate's sigma."""
    s = acc.samples()
    n = len(s["confidence"])
    in_bin = np.zeros((n, acc.n_bins))
    in_bin[np.arange(n), bin_index(s["confidence"], acc.n_bins)] = 1.0
    residual = s["correct"] - s["confidence"]
    cells = estimators.grid_cells(s["confidence"])
    return {
        "columns": np.hstack(
            [np.column_stack([s["correct"].astype(np.float64), s["nll"], s["brier"]]), in_bin * residual[:, None]]
        ),
        "cells": cells,
        "residual": residual,
        "near": float(estimators.smooth_ece_of_masses(estimators.residual_masses(cells, residual))[1][0]),
    }


def paired_resamples(
    reference: CalibrationAccumulator,
    candidate: CalibrationAccumulator,
    n_resamples: int,
    seed: int,
    *,
    errors: bool = True,
    columns: dict[str, np.ndarray] | None = None,
) -> dict[str, np.ndarray]:
    """On each of `n_resamples` resamples of the N samples (the draw counts metrics.bootstrap draws for N and
    `seed`, made once for both models): candidate - reference of every metric of DIFFERENCE_METRICS (the ECEs
    only with `errors`), and the mean of each per-sample column of `columns` (agreement, say). One matrix product
    per model and piece of counts gives every mean and per-bin sum; smooth ECE needs its masses per model."""
    sides = [_resampled_side(acc) for acc in (reference, candidate)]
    extra = list(columns or {})
    # A product of its own for each model, of the same shape: the same sums, to the bit, for equal inputs (one
    # product of both side by side could sum a column differently by where BLAS's blocks fall).
    blocks = [side["columns"] if errors else side["columns"][:, : len(_MEANS)] for side in sides]
    extra_block = np.column_stack([np.asarray(columns[k], dtype=np.float64) for k in extra]) if columns else None
    n = reference.count

    def piece(counts: np.ndarray) -> dict[str, np.ndarray]:
        values = []
        for side, block in zip(sides, blocks, strict=True):
            sums = counts @ block
            out = dict(zip(_MEANS, (sums[:, : len(_MEANS)] / n).T, strict=True))
            if errors:
                out["ece"] = np.abs(sums[:, len(_MEANS) :]).sum(axis=1) / n
                masses = estimators.residual_masses(side["cells"], side["residual"], counts)
                out["smooth_ece"] = estimators.smooth_ece_of_masses(masses, side["near"])[0]
            values.append(out)
        result = {name: values[1][name] - values[0][name] for name in values[0]}
        if extra_block is not None:
            means = counts @ extra_block / n
            result.update({name: means[:, k] for k, name in enumerate(extra)})
        return result

    rng = np.random.default_rng(seed)
    pieces = list(map_in_order(piece, draw_counts(n, n_resamples, rng), piece_threads()))
    return {name: np.concatenate([p[name] for p in pieces]) for name in pieces[0]} if pieces else {}


def metric_differences(
    reference: CalibrationAccumulator,
    candidate: CalibrationAccumulator,
    n_resamples: int,
    seed: int,
    *,
    errors: bool = True,
    columns: dict[str, np.ndarray] | None = None,
    level: float = 0.95,
) -> tuple[dict[str, dict], dict[str, list[float]]]:
    """(metric -> {reference, candidate, difference, interval} for DIFFERENCE_METRICS, the interval paired or None
    without resamples; column -> the percentile interval of its mean, for the per-sample `columns`), from one
    set of resamples (`paired_resamples`). `errors=False`: intervals for the means only (a corruption view: the
    grid's smooth ECEs resampled 95 times twice over would cost more than the grid)."""
    ref, cand = reference.compute(), candidate.compute()
    out: dict[str, dict] = {
        name: {"reference": ref[name], "candidate": cand[name], "difference": cand[name] - ref[name], "interval": None}
        for name in DIFFERENCE_METRICS
    }
    if n_resamples <= 0 or reference.count < bootstrap.MIN_BOOTSTRAP_SAMPLES:
        return out, {}
    resampled = paired_resamples(reference, candidate, n_resamples, seed, errors=errors, columns=columns)
    alpha = (1 - level) / 2
    for name in DIFFERENCE_METRICS:
        if name not in resampled:
            continue
        if name in _MEANS:
            out[name]["interval"] = bootstrap.percentile_interval(resampled[name], level)
        else:
            bias = float(resampled[name].mean()) - out[name]["difference"]
            low, high = np.quantile(resampled[name], [alpha, 1 - alpha]) - bias
            out[name]["interval"] = [float(low), float(high)]
    return out, {name: bootstrap.percentile_interval(resampled[name], level) for name in columns or {}}


def _set_columns(probabilities: np.ndarray, labels: np.ndarray, threshold: float, method: str) -> tuple:
    sets = conformal.prediction_sets(probabilities, threshold, method)
    return sets[np.arange(len(labels)), labels].astype(np.float64), sets.sum(axis=1).astype(np.float64)


def conformal_differences(
    reference: np.ndarray,
    candidate: np.ndarray,
    labels: np.ndarray,
    thresholds: dict[str, dict[str, float]],
    n_resamples: int,
    seed: int,
    level: float = 0.95,
) -> dict[str, dict]:
    """Per conformal method, on the scored images' logits of both models: the reference's coverage and mean set
    size at its own threshold, the candidate's at the reference's threshold (the sets as deployed, fitted on
    the reference) and at its own, and the two paired differences from the reference. `thresholds`:
    {"reference": {method: q}, "candidate": {method: q}}."""
    labels = np.asarray(labels, dtype=np.int64)
    p_ref, _ = softmax64(reference)
    p_cand, _ = softmax64(candidate)
    out: dict[str, dict] = {}
    columns: dict[str, np.ndarray] = {}
    for method, q_ref in thresholds["reference"].items():
        q_cand = thresholds["candidate"][method]
        covered, size = _set_columns(p_ref, labels, q_ref, method)
        entry: dict = {
            "reference_threshold": q_ref if np.isfinite(q_ref) else None,
            "candidate_threshold": q_cand if np.isfinite(q_cand) else None,
            "reference": {"coverage": float(covered.mean()), "mean_set_size": float(size.mean())},
        }
        for side, q in (("at_reference_threshold", q_ref), ("at_own_threshold", q_cand)):
            c_covered, c_size = _set_columns(p_cand, labels, q, method)
            entry[f"candidate_{side}"] = {"coverage": float(c_covered.mean()), "mean_set_size": float(c_size.mean())}
            columns[f"{method}.coverage_{side}"] = c_covered - covered
            columns[f"{method}.set_size_{side}"] = c_size - size
        out[method] = entry
    intervals = mean_intervals(columns, n_resamples, seed, level)
    for key, column in columns.items():
        method, name = key.split(".", 1)
        out[method].setdefault("differences", {})[name] = {
            "difference": float(column.mean()),
            "interval": intervals.get(key),
        }
    return out
