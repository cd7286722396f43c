"""Parity of a candidate model with its reference on the same images: how far an export, an FP16 or an INT8
build moved the predictions and the calibration. Numpy only.

Per view: top-1 agreement, the flips (correct -> wrong, wrong -> correct), the mean and largest absolute
logit difference, the mean KL(reference || candidate) of the softmaxes, and the difference (candidate -
reference) of the view metrics in DIFFERENCE_METRICS and of the conformal sets' coverage and size.

The intervals are paired: both models' statistics are computed on the same resamples, the draw counts of the
candidate's own bootstrap of the view (metrics.bootstrap.paired_bootstrap: drawn once for its intervals and the
parity section, the candidate's resampled ECEs those of its own intervals), and the interval is that of their
difference (`paired_statistic`). A model against itself, or against a copy of itself, gives a difference and an
interval of exactly zero. Means (accuracy, NLL, Brier, agreement, coverage, set size): the percentile interval
of the resampled differences. Calibration errors (ECE, smooth ECE): that interval shifted down by the bootstrap
bias of the difference, mean(resampled) - estimate, as metrics.bootstrap corrects a single model's error (not
clipped: a difference may be negative).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from macs_audit.metrics import bootstrap, conformal, smooth_ece
from macs_audit.metrics.accumulators import CalibrationAccumulator, bin_indicator
from macs_audit.metrics.conventions import softmax_with_log
from macs_audit.metrics.resampling import PairedStatistic, Statistic, resampled

DIFFERENCE_METRICS = ("accuracy", "ece", "smooth_ece", "nll", "brier")
_MEANS = ("accuracy", "nll", "brier")  # the metrics of DIFFERENCE_METRICS that are means over the samples
_ERRORS = ("ece", "smooth_ece")
CONVENTION = (
    "candidate - reference on the same images; paired 95% bootstrap intervals on the candidate's own resamples "
    "of each view (the same draw counts for both models): percentile intervals of the differences of means "
    "(accuracy, NLL, Brier, agreement, coverage, set size), bias-corrected ones of the differences of ECE and "
    "smooth ECE; corruption views: intervals of the means only; KL(reference || candidate) of the float64 "
    "softmaxes; conformal thresholds each model's own, fitted on the calibration split's fit part of the clean "
    "view, scored on its scored part (shift sets: on every image); shift sets in the restricted convention "
    "(the softmax over the set's classes), their conformal sets on every output"
)


def agreement(reference: np.ndarray, candidate: np.ndarray, labels: np.ndarray) -> dict[str, np.ndarray]:
    """Per-sample arrays of the two models' logits (N, K) on the same N images: `agree` (same top-1 class),
    `correct_to_wrong` and `wrong_to_correct` (the candidate's flips against the label), `abs_difference`
    (mean absolute logit difference of the row), `max_abs_difference` and `kl` (KL(reference || candidate))."""
    p_ref, log_ref = softmax_with_log(reference)
    p_cand, log_cand = softmax_with_log(candidate)
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


def column_means(columns: dict[str, np.ndarray], within: dict[str, np.ndarray] | None = None) -> Statistic:
    """The mean of each per-sample column (length N) on each resample of a piece of counts, in one product with
    the counts: over every image, or for a column named in `within`, over the images of its boolean mask (the
    drawn images' values weighted by their draws over the draws of images in the mask; a resample that draws none
    of them gives NaN)."""
    names = list(columns)
    if not names:
        return lambda counts: {}
    within = within or {}
    masks = list({id(mask): mask for mask in within.values()}.values())
    mask_column = {name: masks.index(within[name]) for name in within}  # by identity: one column per mask
    block = np.column_stack(
        [mask.astype(np.float64) for mask in masks]
        + [np.asarray(columns[name], dtype=np.float64) * (within[name] if name in within else 1.0) for name in names]
    )

    def statistic(counts: np.ndarray) -> dict[str, np.ndarray]:
        sums = counts @ block
        out = {}
        with np.errstate(invalid="ignore", divide="ignore"):
            for k, name in enumerate(names, start=len(masks)):
                drawn = sums[:, mask_column[name]] if name in mask_column else counts.shape[1]
                out[name] = sums[:, k] / drawn
        return out

    return statistic


def resampled_errors(
    acc: CalibrationAccumulator, beside: CalibrationAccumulator | None = None
) -> Callable[..., dict[str, np.ndarray]]:
    """One model's ECE and smooth ECE on each resample of a piece of counts: the per-bin sums of the drawn
    residuals correct - confidence in one product with the counts (as metrics.bootstrap sums them), the per-grid-cell
    sums by smooth_ece.residual_masses, the smooth ECE's root bracketed from the model's own bandwidth; or, given
    `beside` (another model on the same images) and its smooth ECEs on the same resamples (the second argument),
    from those moved by the two point estimates' difference: a step or two from each root."""
    s = acc.samples()
    n = len(s["confidence"])
    residual = s["correct"] - s["confidence"]
    per_bin_residual = bin_indicator(s["confidence"], acc.n_bins) * residual[:, None]
    smooth = smooth_ece.ResampledSmoothECE(s["confidence"], s["correct"])

    shift = 0.0  # from `beside`'s bandwidths to this model's: the two point estimates' difference
    if beside is not None:
        other = beside.samples()
        shift = smooth.near - smooth_ece.smooth_ece(other["confidence"], other["correct"])[1]

    def statistic(counts: np.ndarray, beside_smooth_ece: np.ndarray | None = None) -> dict[str, np.ndarray]:
        masses = smooth_ece.residual_masses(smooth.cell_of_sample, residual, counts, len(smooth.held))
        return {
            "ece": np.abs(counts @ per_bin_residual).sum(axis=1) / n,
            "smooth_ece": smooth.of_masses(masses, None if beside_smooth_ece is None else beside_smooth_ece + shift),
        }

    return statistic


def paired_statistic(
    reference: CalibrationAccumulator,
    candidate: CalibrationAccumulator,
    *,
    errors: bool = True,
    columns: dict[str, np.ndarray] | None = None,
    within: dict[str, np.ndarray] | None = None,
) -> PairedStatistic:
    """candidate - reference of DIFFERENCE_METRICS (the ECEs only with `errors`) on each resample of a piece of
    draw counts of the two models' N images, and the mean of each per-sample column of `columns` (agreement, say;
    over the images of its mask in `within`, `column_means`); given the piece's counts and `own`, the candidate's
    own resampled metrics on those counts (handed over by metrics.bootstrap.paired_bootstrap).

    The means' differences are the means of the per-sample differences (one product with the counts). ECE and
    smooth ECE: the candidate's are its own, the reference's by `resampled_errors`, nothing else of it (the report
    shows no other); a reference with the candidate's (confidence, correct) pairs has the candidate's values, so a
    copy of the candidate differs by exactly 0."""
    r, c = reference.samples(), candidate.samples()
    deltas = {
        "accuracy": c["correct"].astype(np.float64) - r["correct"],
        "nll": c["nll"] - r["nll"],
        "brier": c["brier"] - r["brier"],
    }
    means = column_means({**deltas, **(columns or {})}, within)
    same = all(np.array_equal(r[key], c[key]) for key in ("confidence", "correct"))
    # The reference's root search on a resample starts from the candidate's smooth ECE on it.
    reference_errors = resampled_errors(reference, beside=candidate) if errors and not same else None

    def statistic(counts: np.ndarray, own: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        out = means(counts)
        if errors and all(name in own for name in _ERRORS):
            ref = own if reference_errors is None else reference_errors(counts, own["smooth_ece"])
            out.update({name: own[name] - ref[name] for name in _ERRORS})
        return out

    return statistic


def differences(
    reference: dict[str, float],
    candidate: dict[str, float],
    resampled: dict[str, np.ndarray],
    level: float = 0.95,
) -> dict[str, dict[str, Any]]:
    """metric -> {reference, candidate, difference, interval} for DIFFERENCE_METRICS, from both models' point
    estimates and the resampled differences (`paired_statistic`); the interval paired (module docstring), None
    for a metric without resampled differences."""
    out: dict[str, dict[str, Any]] = {}
    alpha = (1 - level) / 2
    for name in DIFFERENCE_METRICS:
        difference = candidate[name] - reference[name]
        entry: dict[str, Any] = {"reference": reference[name], "candidate": candidate[name], "difference": difference}
        entry["interval"] = None
        if name in resampled:
            if name in _MEANS:
                entry["interval"] = bootstrap.percentile_interval(resampled[name], level)
            else:
                bias = float(resampled[name].mean()) - difference
                low, high = np.quantile(resampled[name], [alpha, 1 - alpha]) - bias
                entry["interval"] = [float(low), float(high)]
        out[name] = entry
    return out


def metric_differences(
    reference: CalibrationAccumulator,
    candidate: CalibrationAccumulator,
    n_resamples: int,
    seed: int,
    *,
    errors: bool = True,
    columns: dict[str, np.ndarray] | None = None,
    level: float = 0.95,
) -> tuple[dict[str, dict], dict[str, list[float] | None]]:
    """`differences` of two models' accumulators on the same N images on the `n_resamples` resamples
    metrics.bootstrap draws for N and `seed` (two audits' outputs paired afterwards; the parity audit pairs on
    the candidate's own bootstrap's counts instead, auditing/parity.py); and the percentile interval of the mean of
    each per-sample column of `columns` on the same resamples."""
    resampled_values: dict[str, np.ndarray] = {}
    if n_resamples > 0 and reference.count >= bootstrap.MIN_BOOTSTRAP_SAMPLES:
        paired = paired_statistic(reference, candidate, errors=errors, columns=columns)
        own: Callable[..., dict[str, np.ndarray]] = resampled_errors(candidate) if errors else lambda counts: {}
        resampled_values = resampled(reference.count, n_resamples, seed, lambda counts: paired(counts, own(counts)))
    out = differences(reference.compute(), candidate.compute(), resampled_values, level)
    return out, {
        name: column_interval(resampled_values[name], level) for name in columns or {} if name in resampled_values
    }


def column_interval(resampled: np.ndarray, level: float = 0.95) -> list[float] | None:
    """The percentile interval of a column's resampled means (those of resamples that drew its images)."""
    drawn = resampled[np.isfinite(resampled)]
    return bootstrap.percentile_interval(drawn, level) if len(drawn) else None


def _set_columns(probabilities: np.ndarray, labels: np.ndarray, threshold: float, method: str) -> tuple:
    sets = conformal.prediction_sets(probabilities, threshold, method)
    return sets[np.arange(len(labels)), labels].astype(np.float64), sets.sum(axis=1).astype(np.float64)


def conformal_sets(
    reference: np.ndarray,
    candidate: np.ndarray,
    labels: np.ndarray,
    thresholds: dict[str, dict[str, float]],
    within: np.ndarray,
) -> tuple[dict[str, dict], dict[str, np.ndarray]]:
    """Per conformal method, on the images `within` (a boolean mask) of both models' logits: the reference's
    coverage and mean set size at its own threshold, the candidate's at the reference's threshold (the sets as
    deployed, fitted on the reference) and at its own, and each difference from the reference; and the
    per-image columns of those differences over all the images (0 outside `within`:
    `method.coverage_at_reference_threshold`, ...), for their paired intervals on the view's resamples
    (`column_means` with `within` for each, `add_set_intervals`). The sets are those of the images `within` on
    their own (the randomised scores' u by position among them, as the audit's sets score them). `thresholds`:
    {"reference": {method: q}, "candidate": {method: q}}."""
    labels = np.asarray(labels, dtype=np.int64)[within]
    p_ref, _ = softmax_with_log(reference[within])
    p_cand, _ = softmax_with_log(candidate[within])
    out: dict[str, dict] = {}
    columns: dict[str, np.ndarray] = {}
    for method, q_ref in thresholds["reference"].items():
        q_cand = thresholds["candidate"][method]
        covered, size = _set_columns(p_ref, labels, q_ref, method)
        entry: dict = {
            "reference_threshold": q_ref if np.isfinite(q_ref) else None,
            "candidate_threshold": q_cand if np.isfinite(q_cand) else None,
            "reference": {"coverage": float(covered.mean()), "mean_set_size": float(size.mean())},
            "differences": {},
        }
        for side, q in (("at_reference_threshold", q_ref), ("at_own_threshold", q_cand)):
            c_covered, c_size = _set_columns(p_cand, labels, q, method)
            entry[f"candidate_{side}"] = {"coverage": float(c_covered.mean()), "mean_set_size": float(c_size.mean())}
            for name, column in ((f"coverage_{side}", c_covered - covered), (f"set_size_{side}", c_size - size)):
                columns[f"{method}.{name}"] = np.zeros(len(within))
                columns[f"{method}.{name}"][within] = column
                entry["differences"][name] = {"difference": float(column.mean()), "interval": None}
        out[method] = entry
    return out, columns


def add_set_intervals(sets: dict[str, dict], resampled: dict[str, np.ndarray], level: float = 0.95) -> None:
    """Each conformal difference's paired interval from its column's resampled means (`conformal_sets`), in place."""
    for key, values in resampled.items():
        method, name = key.split(".", 1)
        if method in sets:
            sets[method]["differences"][name]["interval"] = column_interval(values, level)
