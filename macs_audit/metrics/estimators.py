"""Calibration-error estimators beyond the binned ECE, on top-label (confidence, correct) pairs.

- smooth ECE (Blasiok and Nakkiran, 2023): the residual r = correct - confidence smoothed by a
  Gaussian kernel reflected at 0 and 1, integrated against the kernel density of the confidences,
  at the bandwidth sigma* where the estimate equals the bandwidth (the fixed point; it exists
  because the estimate falls as sigma grows).
- L2 ECE over equal-mass bins, plug-in and debiased (Kumar, Liang and Ma, 2019): the debiased form
  subtracts each bin's sampling variance acc_b (1 - acc_b) / (n_b - 1) from its squared gap before
  the square root, which removes the upward bias of the plug-in estimate.
- ECE-sweep (Roelofs et al., 2022): the L1 ECE over the largest number of equal-mass bins for which
  the bins' accuracies still rise monotonically with confidence.

Equal-mass bins are the adaptive ECE's: contiguous groups of the confidences sorted (ties broken by
correctness), sizes differing by at most one. Every function takes the per-sample arrays that the
accumulators keep, so merged batches and torch.distributed ranks give the same values.
"""

from __future__ import annotations

import math

import numpy as np

N_BINS = 15
# Smooth ECE: confidences are binned onto GRID_CELLS cells of [0, 1] (a position error of at most
# 1e-4, against bandwidths of at least MIN_SIGMA = 5 cells), the kernel is applied by FFT convolution,
# and the bandwidth's fixed point is bisected to 2^-BISECTION_STEPS of [0, 1].
GRID_CELLS = 5000
MIN_SIGMA = 1e-3
BISECTION_STEPS = 20


def _sorted_pairs(confidence: np.ndarray, correct: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    order = np.lexsort((correct, confidence))
    return np.asarray(confidence, dtype=np.float64)[order], np.asarray(correct, dtype=np.float64)[order]


def _equal_mass_sums(conf: np.ndarray, hit: np.ndarray, n_bins: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(counts, confidence sums, correct sums) of `n_bins` contiguous groups of sorted pairs."""
    n = len(conf)
    bounds = np.array([len(g) for g in np.array_split(np.arange(n), n_bins)])
    starts = np.concatenate([[0], np.cumsum(bounds)[:-1]])
    return bounds, np.add.reduceat(conf, starts), np.add.reduceat(hit, starts)


def l2_ece(confidence: np.ndarray, correct: np.ndarray, n_bins: int = N_BINS, debiased: bool = True) -> float:
    """sqrt(sum_b (n_b / N) (acc_b - conf_b)^2) over equal-mass bins; debiased: each bin's squared gap
    less acc_b (1 - acc_b) / (n_b - 1) (bins of one sample contribute nothing), clipped at 0."""
    n = len(confidence)
    if n == 0:
        return float("nan")
    conf, hit = _sorted_pairs(confidence, correct)
    count, conf_sum, hit_sum = _equal_mass_sums(conf, hit, min(n_bins, n))
    acc, mean_conf = hit_sum / count, conf_sum / count
    squared = (acc - mean_conf) ** 2
    if debiased:
        with np.errstate(divide="ignore", invalid="ignore"):
            variance = np.where(count > 1, acc * (1 - acc) / (count - 1), 0.0)
        squared = np.where(count > 1, squared - variance, 0.0)
    return float(math.sqrt(max(0.0, float((count / n * squared).sum()))))


def ece_sweep(confidence: np.ndarray, correct: np.ndarray) -> tuple[float, int]:
    """(ECE, bins): the L1 equal-mass ECE at the largest bin count whose bin accuracies are monotone
    (non-decreasing in confidence), searched upwards from one bin until monotonicity first fails."""
    n = len(confidence)
    if n == 0:
        return float("nan"), 0
    conf, hit = _sorted_pairs(confidence, correct)
    best = 1
    for bins in range(2, n + 1):
        count, _, hit_sum = _equal_mass_sums(conf, hit, bins)
        if np.any(np.diff(hit_sum / count) < 0):
            break
        best = bins
    count, conf_sum, hit_sum = _equal_mass_sums(conf, hit, best)
    return float(np.abs(hit_sum - conf_sum).sum() / n), best


def _grid_masses(confidence: np.ndarray, correct: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per grid cell of [0, 1]: the fraction of samples, and the sum of their residuals over N."""
    conf = np.asarray(confidence, dtype=np.float64)
    cell = np.minimum((conf * GRID_CELLS).astype(np.int64), GRID_CELLS - 1)
    n = len(conf)
    density = np.bincount(cell, minlength=GRID_CELLS) / n
    residual = np.bincount(cell, weights=np.asarray(correct, dtype=np.float64) - conf, minlength=GRID_CELLS) / n
    return density, residual


def _reflected_smooth(masses: np.ndarray, sigma: float) -> np.ndarray:
    """Gaussian smoothing of per-cell masses with the kernel reflected at 0 and 1 (FFT convolution:
    numpy's, since importing scipy.signal costs more than the whole estimate)."""
    cells = len(masses)
    extended = np.concatenate([masses[::-1], masses, masses[::-1]])
    half = min(int(math.ceil(6 * sigma * cells)), cells + cells // 2)
    offsets = np.arange(-half, half + 1) / cells
    kernel = np.exp(-0.5 * (offsets / sigma) ** 2)
    size = len(extended) + len(kernel) - 1
    full = np.fft.irfft(np.fft.rfft(extended, size) * np.fft.rfft(kernel, size), size)
    return full[half + cells : half + 2 * cells]


def _smooth_ece_of_masses(density: np.ndarray, residual: np.ndarray, sigma: float) -> np.ndarray:
    # |smoothed residual| times the density is |kernel-weighted residual sum| / N: the smoother's
    # denominator cancels, and so does the kernel's normalisation in the ratio.
    return np.abs(_reflected_smooth(residual, sigma)).sum(axis=-1) / _reflected_smooth(density, sigma).sum(axis=-1)


def smooth_ece_at(confidence: np.ndarray, correct: np.ndarray, sigma: float) -> float:
    """smECE at bandwidth sigma: the integral over [0, 1] of |kernel-smoothed residual| times the kernel density."""
    density, residual = _grid_masses(confidence, correct)
    return float(_smooth_ece_of_masses(density, residual, sigma))


def smooth_ece(confidence: np.ndarray, correct: np.ndarray) -> tuple[float, float]:
    """(smECE, sigma*): smECE at the bandwidth where it equals the bandwidth, found by bisection on
    [MIN_SIGMA, 1] (smECE_sigma - sigma falls as sigma grows). A model calibrated to within MIN_SIGMA
    stops at MIN_SIGMA."""
    if len(confidence) == 0:
        return float("nan"), float("nan")
    density, residual = _grid_masses(confidence, correct)

    def at(sigma: float) -> float:
        return float(_smooth_ece_of_masses(density, residual, sigma))

    lo, hi = MIN_SIGMA, 1.0
    if at(lo) <= lo:
        return at(lo), lo
    if at(hi) >= hi:
        return at(hi), hi
    for _ in range(BISECTION_STEPS):
        mid = 0.5 * (lo + hi)
        if at(mid) > mid:
            lo = mid
        else:
            hi = mid
    return at(hi), hi
