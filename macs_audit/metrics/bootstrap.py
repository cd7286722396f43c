"""95% bootstrap intervals for every calibration metric of a view, from one set of resamples.

Each resample is a vector of draw counts per sample (seeded; the same draws for every metric), and
every statistic of a resample is computed from the counts directly: means as matrix products, binned
ECE and MCE from per-bin sums, the equal-mass estimators (adaptive ECE, L2 ECEs, ECE-sweep) and the shift
papers' RMS calibration error (bins of 100, from 200 samples) from prefix sums in sorted order
(estimators.SortedPrefix), smooth ECE from the resample's residual masses.
The accumulators keep every per-sample array these need, so merged batches and torch.distributed
ranks give the intervals of one process exactly.

Two kinds of interval (docs/method.md, "Intervals"):

- means (accuracy, NLL, Brier): the percentile interval of the resampled values;
- calibration errors (ECE and every estimator like it): a resample's error is the error of a noisier
  data set, so it is biased upwards twice over (the estimate already is), and the percentile interval
  sits above the estimate. The interval given is the percentile interval shifted down by the bootstrap
  estimate of that bias, mean(resampled) - estimate (bias-corrected; Efron and Tibshirani 1993, 10.5),
  clipped to [0, 1]: centred on the bias-corrected estimate, it contains the point estimate and covers
  the true error at about its nominal level where the percentile interval does not (tests/metrics/
  test_bootstrap.py measures both).

Classwise ECE has no interval: it bins every (sample, class) pair, K x 15 sums per resample.

`paired_bootstrap` also runs a second statistic on the very resamples of the intervals, given each piece of draw
counts and the metrics of that piece: a paired analysis (metrics.parity) with no second draw and no second
computation of what the bootstrap computes.
"""

from __future__ import annotations

import numpy as np

from macs_audit.metrics import estimators, l2_ece, rms_calibration, smooth_ece
from macs_audit.metrics.accumulators import CalibrationAccumulator, bin_indicator
from macs_audit.metrics.conventions import ERROR_METRICS, MEAN_METRICS
from macs_audit.metrics.resampling import PairedStatistic, concatenated, draw_counts, map_in_order, piece_threads

MIN_BOOTSTRAP_SAMPLES = 2  # one sample resampled is always itself: a zero-width interval that claims certainty
CONVENTION = (
    "95% bootstrap intervals, one set of resampled draw counts for every metric: percentile intervals for "
    "accuracy, NLL and Brier; for the calibration errors the percentile interval shifted down by the bootstrap "
    "bias estimate mean(resampled) - estimate, clipped to [0, 1]; no interval for classwise ECE"
)


def bootstrap_note(n: int, n_resamples: int) -> str | None:
    """Why `n` samples get no intervals although `n_resamples` were asked for; None when they get them."""
    if n_resamples > 0 and n < MIN_BOOTSTRAP_SAMPLES:
        return f"no intervals: a bootstrap needs at least {MIN_BOOTSTRAP_SAMPLES} samples, got {n}"
    return None


def resampled_metrics(acc: CalibrationAccumulator, n_resamples: int, seed: int = 0) -> dict[str, np.ndarray]:
    """Every metric of MEAN_METRICS and ERROR_METRICS on each of `n_resamples` seeded resamples (the RMS
    calibration error only where the samples give it a value)."""
    return _resampled(acc, n_resamples, seed, None)[0]


def _resampled(
    acc: CalibrationAccumulator, n_resamples: int, seed: int, paired: PairedStatistic | None
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """`resampled_metrics`, and `paired` of each piece of counts and those metrics of it ({} without `paired`)."""
    s = acc.samples()
    n = len(s["confidence"])
    rng = np.random.default_rng(seed)
    residual = s["correct"] - s["confidence"]
    in_bin = bin_indicator(s["confidence"], acc.n_bins)
    per_bin_gap = in_bin * residual[:, None]  # summed: n_b (acc_b - conf_b)
    means = np.column_stack([s["correct"].astype(np.float64), s["nll"], s["brier"]])
    # One product per piece of counts for the means and the per-bin sums (the counts read once, not three times).
    summed = np.hstack([means, per_bin_gap, in_bin])
    split = np.cumsum([means.shape[1], acc.n_bins])
    order = estimators.sorted_order(s["confidence"], s["correct"])  # one sort for every piece
    smooth = smooth_ece.ResampledSmoothECE(s["confidence"], s["correct"])

    def piece_metrics(counts: np.ndarray) -> dict[str, np.ndarray]:
        """The metrics of one piece of resamples (a row of draw counts each)."""
        mean_sums, gap, size = np.split(counts @ summed, split, axis=1)
        out = dict(zip(MEAN_METRICS, (mean_sums / n).T, strict=True))
        out["ece"] = np.abs(gap).sum(axis=1) / n
        with np.errstate(invalid="ignore", divide="ignore"):
            out["mce"] = np.nanmax(np.where(size > 0, np.abs(gap) / size, np.nan), axis=1)
        prefix = estimators.SortedPrefix(s["confidence"], s["correct"], counts, order)
        size15, conf_sum, hit_sum = estimators.group_sums(prefix, min(acc.n_bins, n))
        out["adaptive_ece"] = np.abs(hit_sum - conf_sum).sum(axis=1) / n
        out["l2_ece"] = l2_ece.l2_of_groups(size15, conf_sum, hit_sum, debiased=False)
        out["debiased_l2_ece"] = l2_ece.l2_of_groups(size15, conf_sum, hit_sum, debiased=True)
        out["ece_sweep"] = estimators.ece_sweep_of(prefix)[0]
        if (rms := rms_calibration.rms_of_prefix(prefix)) is not None:
            out["rms_calibration_error"] = rms
        out["smooth_ece"] = smooth.of_masses(smooth_ece.prefix_residual_masses(prefix, smooth.cells))
        return out

    def both(counts: np.ndarray) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        own = piece_metrics(counts)
        return own, {} if paired is None else paired(counts, own)

    # The pieces are independent and numpy releases the GIL in their array work: two threads use two cores.
    pieces = list(map_in_order(both, draw_counts(n, n_resamples, rng), piece_threads()))
    return concatenated([own for own, _ in pieces]), concatenated([other for _, other in pieces])


def bias_corrected_interval(estimate: float, resampled: np.ndarray, level: float = 0.95) -> list[float]:
    """The percentile interval of `resampled` less the bootstrap bias mean(resampled) - estimate, in [0, 1]."""
    low, high = bias_corrected_ends(np.asarray(estimate), resampled, level)
    return [float(low), float(high)]


def bias_corrected_ends(estimates: np.ndarray, resampled: np.ndarray, level: float = 0.95) -> np.ndarray:
    """`bias_corrected_interval` of several estimates at once: `resampled` (resamples, ...) the resampled values of
    `estimates` (...); (2, ...) the intervals' ends."""
    bias = resampled.mean(axis=0) - estimates
    return np.clip(percentile_ends(resampled, level) - bias, 0.0, 1.0)


def percentile_interval(resampled: np.ndarray, level: float = 0.95) -> list[float]:
    return [float(v) for v in percentile_ends(resampled.reshape(-1), level)]


def percentile_ends(resampled: np.ndarray, level: float = 0.95) -> np.ndarray:
    """The percentile intervals of several statistics at once: `resampled` (resamples, ...); (2, ...) their ends."""
    alpha = (1 - level) / 2
    return np.quantile(resampled, [alpha, 1 - alpha], axis=0)


def bootstrap_intervals(
    acc: CalibrationAccumulator,
    n_resamples: int = 1000,
    seed: int = 0,
    level: float = 0.95,
    estimates: dict[str, float] | None = None,
) -> dict[str, list[float]]:
    """Intervals for MEAN_METRICS and ERROR_METRICS over the accumulated samples (see the module's
    docstring); `estimates` are the point estimates (acc.compute(), computed here when not given).
    {} when `n_resamples` is 0 or there are fewer than MIN_BOOTSTRAP_SAMPLES samples (bootstrap_note says why)."""
    return paired_bootstrap(acc, n_resamples, seed, None, level=level, estimates=estimates)[0]


def paired_bootstrap(
    acc: CalibrationAccumulator,
    n_resamples: int,
    seed: int,
    paired: PairedStatistic | None,
    *,
    level: float = 0.95,
    estimates: dict[str, float] | None = None,
) -> tuple[dict[str, list[float]], dict[str, np.ndarray]]:
    """`bootstrap_intervals`, and `paired`'s values on the same resamples: it is given each piece of draw counts
    and the resampled metrics of that piece the intervals are made from, and its values of the pieces are joined
    in order ({} where there are no intervals, or without `paired`)."""
    if n_resamples <= 0 or acc.count < MIN_BOOTSTRAP_SAMPLES:
        return {}, {}
    estimates = acc.compute() if estimates is None else estimates
    resampled, paired_values = _resampled(acc, n_resamples, seed, paired)
    intervals = {name: percentile_interval(resampled[name], level) for name in MEAN_METRICS}
    for name in (m for m in ERROR_METRICS if m in resampled):
        intervals[name] = bias_corrected_interval(float(estimates[name]), resampled[name], level)
    return intervals, paired_values
