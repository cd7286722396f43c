"""Smooth ECE (Blasiok and Nakkiran, 2023) on top-label (confidence, correct) pairs, and the smoothed
reliability curve: the residual r = correct - confidence smoothed by a Gaussian kernel reflected at 0 and 1
(folded back into [0, 1] as often as it leaves it, as in the paper), integrated against the kernel density of
the confidences, at the bandwidth sigma* where the estimate equals the bandwidth (the fixed point; it exists
because the estimate falls as sigma grows).

A bootstrap's resamples are solved all at once, from their residual masses (`prefix_residual_masses`, on the
equal-mass estimators' prefix sums, metrics/estimators.py) on the grid cells that hold samples (`CellCosines`).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from macs_audit.metrics.estimators import SortedPrefix

# Smooth ECE: confidences are binned onto GRID_CELLS cells of [0, 1] (a position error of at most
# 1e-4, against bandwidths of at least MIN_SIGMA = 5 cells), the kernel is applied in the Fourier
# domain (a cosine transform: GRID_CELLS is even, its reordering pairs the cells), and the bandwidth's fixed
# point is solved to ROOT_TOLERANCE.
GRID_CELLS = 5000
MIN_SIGMA = 1e-3
ROOT_TOLERANCE = 1e-9
# A bootstrap resample's root: to 1e-7, its value within 1e-7 of the exact root's (smECE's slope in sigma is below
# 1; tests/metrics/test_smooth_ece.py), against intervals reported to 1e-4: a fifth fewer smoothings than to 1e-9.
RESAMPLED_ROOT_TOLERANCE = 1e-7
MAX_ROOT_STEPS = 100
# Smooth ECE's DCT coefficients of masses on a bootstrap's cells made directly (`_Coefficients`) up to this many
# multiply-adds per row, by the FFT beyond: the FFT of every cell costs about as much as 500,000.
DIRECT_WORK = 500_000


def residual_masses(
    cells: np.ndarray, residual: np.ndarray, weights: np.ndarray | None = None, n_cells: int = GRID_CELLS
) -> np.ndarray:
    """Per grid cell of [0, 1]: the (weighted) sum of the residuals correct - confidence over N, the number
    of samples (the sum of the weights). `weights` (rows, N) gives one row per weighting (a bootstrap
    resample's draw counts); None weighs every sample once. `cells` may instead number the cells of a
    CellCosines (0 to `n_cells` - 1: `np.unique(..., return_inverse=True)`), for masses on those cells only."""
    if weights is None:
        return np.bincount(cells, weights=residual, minlength=n_cells)[None, :] / len(cells)
    # A bincount per row: its sums stay in cache, where one bincount of every row at once scatters into all of
    # them (five times slower for 50 rows of 10,000; the same sums).
    sums = np.empty((len(weights), n_cells))
    for row, weight in zip(sums, weights, strict=True):
        row[:] = np.bincount(cells, weights=weight * residual, minlength=n_cells)
    return sums / weights.sum(axis=1, keepdims=True)


def prefix_residual_masses(prefix: SortedPrefix, cells: np.ndarray) -> np.ndarray:
    """`residual_masses` of each row of a SortedPrefix on the grid cells that hold its samples (`cells`: each
    sample's grid cell, in the samples' own order), a column per cell of np.unique(cells), from its prefix sums:
    in sorted order the samples' cells never fall, so a cell's sum of correct - confidence is the difference of
    the prefix sums at its last sample and at the last sample of the cell before it, taken in the prefix sums'
    fixed point (exact: the same masses to about 1e-16 each, without another pass over the draws)."""
    in_order = cells[prefix.order]
    last = np.flatnonzero(np.diff(in_order, append=GRID_CELLS))  # the last sample of each cell that has one
    flat = ((np.arange(prefix.rows) * prefix.n)[:, None] + last[None, :]).ravel()
    fixed = (prefix.cum_hit[flat] << prefix.conf_bits) - prefix.cum_conf[flat]  # below 2**62: no overflow
    per_cell = np.diff(fixed.reshape(prefix.rows, len(last)), axis=1, prepend=0)
    return np.ldexp(per_cell.astype(np.float64), -prefix.conf_bits) / prefix.total


def grid_cells(confidence: np.ndarray) -> np.ndarray:
    """The grid cell of each confidence (GRID_CELLS equal cells of [0, 1], 1 in the last)."""
    return np.minimum((np.asarray(confidence, dtype=np.float64) * GRID_CELLS).astype(np.int64), GRID_CELLS - 1)


def _mirror_spectrum(masses: np.ndarray) -> np.ndarray:
    """Each row's DCT-II coefficients y_k = 2 sum_n m_n cos(pi k (2n + 1) / (2 GRID_CELLS)), k < GRID_CELLS: the
    DFT of the row's mirror-periodic extension (the masses, then reversed: period 2 in [0, 1] units) is
    exp(i pi k / (2 GRID_CELLS)) y_k, so they hold its whole spectrum in real numbers.

    One real FFT of GRID_CELLS points, half the mirror's (Makhoul 1980): of the masses reordered 0, 2, 4, ...,
    then ..., 5, 3, 1; y_k is twice the real part of its k-th term (or the conjugate of its (GRID_CELLS - k)-th
    past the middle) times exp(-i pi k / (2 GRID_CELLS))."""
    half = GRID_CELLS // 2
    spectrum = np.fft.rfft(np.concatenate([masses[:, 0::2], masses[:, ::-2]], axis=1), axis=1)
    twiddle = _twiddle(GRID_CELLS).conj()
    coefficients = np.empty((len(masses), GRID_CELLS))
    coefficients[:, : half + 1] = 2 * (spectrum * twiddle[: half + 1]).real
    coefficients[:, half + 1 :] = 2 * (spectrum[:, half - 1 : 0 : -1].conj() * twiddle[half + 1 :]).real
    return coefficients


def _twiddle(kept: int) -> np.ndarray:
    return np.exp(1j * np.pi * np.arange(kept) / (2 * GRID_CELLS))


def _kept(sigma: np.ndarray) -> np.ndarray:
    """How many of the lowest frequencies have a Gaussian gain above 1e-30 at each bandwidth of `sigma`."""
    return np.minimum(GRID_CELLS, np.ceil(math.sqrt(2 * 69.1) / (math.pi * np.asarray(sigma))).astype(np.int64) + 1)


class CellCosines:
    """The DCT-II basis 2 cos(pi k (2c + 1) / (2 GRID_CELLS)) on a fixed set of grid cells c (those that hold
    samples), for the frequencies k asked for so far: a bootstrap makes it once for all its resamples, whose
    residual masses lie on those cells only."""

    def __init__(self, cells: np.ndarray):
        self.cells = np.asarray(cells, dtype=np.int64)
        self.table = np.zeros((len(self.cells), 0))

    def first(self, kept: int) -> np.ndarray:
        """(cells, kept): the basis of the first `kept` frequencies. Safe in a bootstrap's piece threads: each call
        extends the table it read once, so a table two calls grow at once is either's, whole, never a mix."""
        table = self.table
        have = table.shape[1]
        if kept > have:
            k = np.arange(have, kept)
            more = 2 * np.cos(np.pi * k[None, :] * (2 * self.cells[:, None] + 1) / (2 * GRID_CELLS))
            self.table = table = np.hstack([table, more])
        return table[:, :kept]


class _Coefficients:
    """The DCT-II coefficients of rows of residual masses (`_mirror_spectrum`'s), made as a root search asks for
    them. Masses on every cell: all of them at once, by the FFT. Masses on the cells of a CellCosines: near its
    root a search smooths at bandwidths of a few hundredths, which read only the first hundred or so (`_kept`),
    made by one product of the masses with the basis up to DIRECT_WORK multiply-adds per row (several times
    faster than the FFT of every cell on the sample model's 1,765 cells), all of them by the FFT beyond (a
    search over the whole range)."""

    def __init__(self, masses: np.ndarray, cells: CellCosines | None):
        self.masses, self.cells = masses, cells
        self.known = np.zeros((len(masses), 0))

    def first(self, kept: int, rows: np.ndarray | None = None) -> np.ndarray:
        """The first `kept` coefficients of `rows` (default all)."""
        have = self.known.shape[1]
        if kept > have:
            if self.cells is None:
                self.known = _mirror_spectrum(self.masses)
            elif kept * len(self.cells.cells) > DIRECT_WORK:
                dense = np.zeros((len(self.masses), GRID_CELLS))
                dense[:, self.cells.cells] = self.masses
                self.known = _mirror_spectrum(dense)
            else:
                self.known = np.hstack([self.known, self.masses @ self.cells.first(kept)[:, have:]])
        return self.known[:, :kept] if rows is None else self.known[rows, :kept]


def _smoothed_shuffled(coefficients: np.ndarray, sigma: np.ndarray | float) -> np.ndarray:
    """(rows, GRID_CELLS): each row's masses, given by at least their first `_kept(min(sigma))` DCT coefficients,
    smoothed by the reflected Gaussian kernel at its bandwidth, with the
    cells in the order 0, 2, 4, ..., then ..., 5, 3, 1 (`_smoothed` puts them back).

    On the mirror-periodic extension the smoothing is a product with the Gaussian's transform,
    exp(-(pi f sigma)^2 / 2) at frequency f (exact to 1e-30 for bandwidths of 5 cells or more); back in [0, 1]
    it is the inverse DCT of the coefficients times that gain, one inverse real FFT of GRID_CELLS points (half
    the mirror's), whose output is the cells in that order (Makhoul 1980). Frequencies whose gain is below 1e-30
    for every row are left out."""
    count = len(coefficients)
    sigma = np.broadcast_to(np.asarray(sigma, dtype=np.float64), (count,))
    kept = int(_kept(sigma.min()))
    gain = np.exp(-0.5 * (np.pi * np.arange(kept)[None, :] * sigma[:, None]) ** 2)
    kept_coefficients = coefficients[:, :kept]
    half = GRID_CELLS // 2
    if kept <= half:  # y_{GRID_CELLS - k} is left out for every k <= half
        # Zero-padded here: numpy's irfft of a shorter input, which it pads itself, takes 1.7x as long (same values).
        spectrum = np.zeros((count, half + 1), dtype=np.complex128)
        spectrum[:, :kept] = 0.5 * _twiddle(kept) * (kept_coefficients * gain)
        return np.fft.irfft(spectrum, GRID_CELLS, axis=1)
    product = np.zeros((count, GRID_CELLS + 1))
    product[:, :kept] = kept_coefficients * gain
    k = np.arange(half + 1)
    return np.fft.irfft(
        0.5 * _twiddle(half + 1) * (product[:, k] - 1j * product[:, GRID_CELLS - k]), GRID_CELLS, axis=1
    )


def _smoothed(spectrum: np.ndarray, sigma: np.ndarray | float) -> np.ndarray:
    """`_smoothed_shuffled` with the cells in their order."""
    shuffled = _smoothed_shuffled(spectrum, sigma)
    cells = np.empty_like(shuffled)
    half = (GRID_CELLS + 1) // 2
    cells[:, 0::2], cells[:, 1::2] = shuffled[:, :half], shuffled[:, half:][:, ::-1]
    return cells


def _smooth_ece_of_spectrum(coefficients: np.ndarray, sigma: np.ndarray) -> np.ndarray:
    """smECE of each row (its DCT coefficients, as `_smoothed_shuffled` takes them) at its bandwidth: sum over
    the cells of |residual masses smoothed by the reflected Gaussian kernel| (the cells in any order:
    `_smoothed_shuffled`). Reflection at 0 and 1 folds the kernel back into [0, 1], so it keeps every sample's
    mass and the kernel density needs no normalisation."""
    return np.abs(_smoothed_shuffled(coefficients, sigma)).sum(axis=1)


def smooth_ece_at(confidence: np.ndarray, correct: np.ndarray, sigma: float) -> float:
    """smECE at bandwidth sigma: the integral over [0, 1] of |kernel-smoothed residual| times the kernel density."""
    conf = np.asarray(confidence, dtype=np.float64)
    masses = residual_masses(grid_cells(conf), np.asarray(correct, dtype=np.float64) - conf)
    return float(_smooth_ece_of_spectrum(_mirror_spectrum(masses), np.array([sigma]))[0])


def smooth_ece_of_masses(
    masses: np.ndarray,
    near: float | np.ndarray | None = None,
    tolerance: float = ROOT_TOLERANCE,
    cells: CellCosines | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """(smECE, sigma*) of each row of residual masses (per grid cell, or on the cells of `cells` only: a
    bootstrap's, `prefix_residual_masses`): the bandwidth where smECE_sigma = sigma, on
    [MIN_SIGMA, 1]. smECE_sigma - sigma falls as sigma grows, so the root is bracketed and found by the
    Illinois variant of regula falsi, all rows at once, to `tolerance`. A row calibrated to within
    MIN_SIGMA stops there.

    `near` (a bootstrap's point estimate of sigma*, or a guess per row) first tries a bracket per row between
    near and smECE_near (one fixed-point step): as smECE falls with sigma, excess(near) = smECE_near - near and
    excess(smECE_near) have opposite signs (or the second is 0: the root, where smECE does not change with
    sigma). The rows where they do start there, a few steps from their root; the others (checked) search
    [MIN_SIGMA, 1] as without `near`. Either way each root is found to `tolerance`."""
    coefficients = _Coefficients(masses, cells)
    rows = len(masses)

    def excess(sigma: np.ndarray, which: np.ndarray) -> np.ndarray:
        # Rows smoothed together read the frequencies of the narrowest bandwidth among them, so rows are grouped
        # by the power of two of the frequencies they need: a few resamples near MIN_SIGMA (of a calibrated
        # model) do not make every row read thousands.
        kept = _kept(sigma)
        need = np.ceil(np.log2(kept))
        out = np.empty(len(which))
        for bucket in np.unique(need):
            at = np.flatnonzero(need == bucket)
            whole = len(at) == len(which) and len(which) == rows
            part = coefficients.first(int(kept[at].max()), None if whole else which[at])  # _kept(min sigma)
            out[at] = _smooth_ece_of_spectrum(part, sigma[at]) - sigma[at]
        return out

    lo, hi = np.full(rows, MIN_SIGMA), np.ones(rows)
    g_lo, g_hi = np.empty(rows), np.empty(rows)
    wide = np.arange(rows)  # the rows that search the whole range
    found = np.zeros(rows, dtype=bool)  # the rows whose root the start from `near` hit (smECE flat in sigma)
    if near is not None and rows:
        start = np.broadcast_to(np.asarray(near, dtype=np.float64), (rows,))
        start = np.where(np.isfinite(start), np.clip(start, MIN_SIGMA, 1.0), 0.5)  # any start: the bracket is checked
        g_start = excess(start, wide)
        step = np.clip(start + g_start, MIN_SIGMA, 1.0)  # smECE at `near`: across the root, as smECE falls
        g_step = excess(step, wide)
        above = g_start > 0
        lo, hi = np.where(above, start, step), np.where(above, step, start)
        g_lo, g_hi = np.where(above, g_start, g_step), np.where(above, g_step, g_start)
        found = np.abs(g_step) <= tolerance
        wide = np.flatnonzero(~((g_lo > 0) & (g_hi < 0) | found))
        lo[wide], hi[wide] = MIN_SIGMA, 1.0
    if len(wide):
        g_lo[wide], g_hi[wide] = excess(lo[wide], wide), excess(hi[wide], wide)
    sigma = np.where(g_lo <= 0, lo, hi)  # the ends, where the root lies outside the range
    value = np.where(g_lo <= 0, g_lo + lo, g_hi + hi)
    active = (g_lo > 0) & (g_hi < 0) & ~found
    if found.any():
        sigma[found], value[found] = step[found], step[found] + g_step[found]
    last_side = np.zeros(rows, dtype=np.int8)  # Illinois: halve the end that stayed put twice running
    for _ in range(MAX_ROOT_STEPS):
        rows_left = np.flatnonzero(active)
        if len(rows_left) == 0:
            break
        a, b, ga, gb = lo[rows_left], hi[rows_left], g_lo[rows_left], g_hi[rows_left]
        c = (a * gb - b * ga) / (gb - ga)
        gc = excess(c, rows_left)
        sigma[rows_left], value[rows_left] = c, gc + c
        above = gc > 0
        move_lo, move_hi = rows_left[above], rows_left[~above]
        lo[move_lo], g_lo[move_lo] = c[above], gc[above]
        hi[move_hi], g_hi[move_hi] = c[~above], gc[~above]
        g_hi[move_lo[last_side[move_lo] == -1]] /= 2
        g_lo[move_hi[last_side[move_hi] == 1]] /= 2
        last_side[move_lo], last_side[move_hi] = -1, 1
        active[rows_left] = (np.abs(gc) > tolerance) & (hi[rows_left] - lo[rows_left] > tolerance)
    return value, sigma


def smooth_ece(confidence: np.ndarray, correct: np.ndarray) -> tuple[float, float]:
    """(smECE, sigma*) of top-label (confidence, correct) pairs; see `smooth_ece_of_masses`."""
    if len(confidence) == 0:
        return float("nan"), float("nan")
    conf = np.asarray(confidence, dtype=np.float64)
    masses = residual_masses(grid_cells(conf), np.asarray(correct, dtype=np.float64) - conf)
    value, sigma = smooth_ece_of_masses(masses)
    return float(value[0]), float(sigma[0])


class ResampledSmoothECE:
    """Smooth ECE on a bootstrap's resamples of one set of samples: `near`, the point estimate's bandwidth, where
    each resample's root search starts, and `held`, the grid cells that hold samples, on which every resample's
    residual masses lie (`prefix_residual_masses` of `cells`, or `residual_masses` of `cell_of_sample`)."""

    def __init__(self, confidence: np.ndarray, correct: np.ndarray):
        self.cells = grid_cells(confidence)  # each sample's grid cell
        self.near = smooth_ece(confidence, correct)[1]
        self.held, self.cell_of_sample = np.unique(self.cells, return_inverse=True)
        self.basis = CellCosines(self.held)  # one for every piece of resamples

    def of_masses(self, masses: np.ndarray, near: float | np.ndarray | None = None) -> np.ndarray:
        """Each row's smooth ECE (its masses on `held`), its root searched from `near` (default the point estimate's
        bandwidth; or a guess per row) to RESAMPLED_ROOT_TOLERANCE."""
        start = self.near if near is None else near
        return smooth_ece_of_masses(masses, start, RESAMPLED_ROOT_TOLERANCE, self.basis)[0]


CURVE_POINTS = 101  # where the smoothed reliability curve is reported: confidences 0, 0.01, ..., 1


def smooth_reliability(confidence: np.ndarray, correct: np.ndarray, sigma: float) -> dict[str, Any]:
    """The smoothed reliability curve at bandwidth `sigma` (smooth ECE's sigma*): at CURVE_POINTS confidences
    t, the kernel-smoothed accuracy t + r(t), where r is the kernel regression of correct - confidence on the
    confidence, and the kernel density of the confidences (the same reflected kernel and grid as smooth ECE).
    Where the density is below 1e-3 of its peak the accuracy is None: too few samples to draw it."""
    conf = np.asarray(confidence, dtype=np.float64)
    cells = grid_cells(conf)
    masses = np.vstack(
        [
            residual_masses(cells, np.asarray(correct, dtype=np.float64) - conf),
            residual_masses(cells, np.ones_like(conf)),  # the density's masses
        ]
    )
    residual, density = _smoothed(_mirror_spectrum(masses), sigma)
    at = np.minimum((np.linspace(0.0, 1.0, CURVE_POINTS) * GRID_CELLS).astype(np.int64), GRID_CELLS - 1)
    centres = (at + 0.5) / GRID_CELLS
    with np.errstate(divide="ignore", invalid="ignore"):
        accuracy = centres + residual[at] / density[at]
    enough = density[at] >= 1e-3 * density.max()
    return {
        "sigma": float(sigma),
        "confidence": [round(float(t), 6) for t in centres],
        "accuracy": [float(np.clip(a, 0.0, 1.0)) if ok else None for a, ok in zip(accuracy, enough, strict=True)],
        "density": [float(d * GRID_CELLS) for d in density[at]],  # per unit confidence, integrates to 1
    }
