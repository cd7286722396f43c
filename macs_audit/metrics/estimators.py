"""Calibration-error estimators beyond the binned ECE, on top-label (confidence, correct) pairs.

- smooth ECE (Blasiok and Nakkiran, 2023): the residual r = correct - confidence smoothed by a
  Gaussian kernel reflected at 0 and 1 (folded back into [0, 1] as often as it leaves it, as in the
  paper), integrated against the kernel density of the confidences, at the bandwidth sigma* where
  the estimate equals the bandwidth (the fixed point; it exists because the estimate falls as sigma
  grows).
- L2 ECE over equal-mass bins, plug-in and debiased: metrics/l2_ece.py, on this module's groups.
- ECE-sweep (Roelofs et al., 2022): the L1 ECE over the largest number of equal-mass bins for which
  the bins' accuracies still rise monotonically with confidence (searched upwards from one bin until
  the first count that is not monotone; `sweep_bins` says how without re-scanning the data per count).

Equal-mass bins are the adaptive ECE's: contiguous groups of the confidences sorted (ties broken by
correctness), sizes differing by at most one. Every function takes the per-sample arrays that the
accumulators keep, so merged batches and torch.distributed ranks give the same values.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

# Smooth ECE: confidences are binned onto GRID_CELLS cells of [0, 1] (a position error of at most
# 1e-4, against bandwidths of at least MIN_SIGMA = 5 cells), the kernel is applied in the Fourier
# domain (a cosine transform: GRID_CELLS is even, its reordering pairs the cells), and the bandwidth's fixed
# point is solved to ROOT_TOLERANCE.
GRID_CELLS = 5000
MIN_SIGMA = 1e-3
ROOT_TOLERANCE = 1e-9
# A bootstrap resample's root: to 1e-7, its value within 1e-7 of the exact root's (smECE's slope in sigma is below
# 1; tests/metrics/test_estimators.py), against intervals reported to 1e-4: a fifth fewer smoothings than to 1e-9.
RESAMPLED_ROOT_TOLERANCE = 1e-7
MAX_ROOT_STEPS = 100
# SortedPrefix.sums at more than total / DENSE_LOOKUP positions counts the samples below every position
# at once (linear) instead of a binary search per position.
DENSE_LOOKUP = 8
# ECE-sweep still searching past DEEP_BINS bins, with more than total / DENSE_LOOKUP positions between a
# row's first correct sample and its last wrong one, reads its hit counts from one table (UnitHits).
DEEP_BINS = 64
# Smooth ECE's DCT coefficients of masses on a bootstrap's cells made directly (`_Coefficients`) up to this many
# multiply-adds per row, by the FFT beyond: the FFT of every cell costs about as much as 500,000.
DIRECT_WORK = 500_000


def sorted_order(confidence: np.ndarray, correct: np.ndarray) -> np.ndarray:
    """The order of the equal-mass bins: by confidence, ties broken by correctness (deterministic)."""
    return np.lexsort((correct, confidence))


class SortedPrefix:
    """Prefix sums of (confidence, correct) in sorted order, for one or more weightings of the samples.

    `weights` (rows, N) are draw counts (a bootstrap resample per row, whole numbers; None: every sample once). A
    row stands for the data set in which sample i appears weights[i] times; `sums(bounds)` returns, per row, the
    confidence and correct sums of the first P samples of that data set for each position P, so equal-mass
    groups of a resample cost a lookup, not a sort. `order`: the samples' `sorted_order`, where the caller has it
    (a bootstrap sorts once for all its pieces of counts).

    The sums are kept in integers, which numpy accumulates several times faster than floats: the counts and the
    correct counts exactly, the confidences in fixed point (each a multiple of 2**-conf_bits, chosen so that no
    row's sum can overflow int64: 3.6e-15 for 10,000 samples), a sum off by at most N 2**-(conf_bits + 1), less
    than a float cumulative sum's own rounding."""

    def __init__(
        self,
        confidence: np.ndarray,
        correct: np.ndarray,
        weights: np.ndarray | None = None,
        order: np.ndarray | None = None,
    ):
        self.order = order = sorted_order(confidence, correct) if order is None else order
        self.conf = np.asarray(confidence, dtype=np.float64)[order]
        self.hit = np.asarray(correct, dtype=np.float64)[order]
        # C order (np.take, unlike w[:, order], gives it): the prefix sums are read flat, row after row.
        w = np.ones((1, len(order)), np.int64) if weights is None else np.take(weights, order, 1).astype(np.int64)
        self.rows, self.n = w.shape
        self.total = int(w[0].sum()) if self.n else 0  # samples per row
        self.conf_bits = 62 - max(self.total, 1).bit_length()
        fixed_conf = np.round(np.ldexp(self.conf, self.conf_bits)).astype(np.int64)
        # Each product then summed in place, and the counts last, into their own array: no more arrays alive at
        # once than the three kept (a bootstrap piece's arrays are its peak memory).
        self.cum_hit = np.cumsum(np.multiply(w, self.hit.astype(np.int64)), axis=1).ravel()
        conf_sums = np.multiply(w, fixed_conf)
        self.cum_conf = np.cumsum(conf_sums, axis=1, out=conf_sums).ravel()
        self.cum_count = np.cumsum(w, axis=1, out=w).ravel()
        self._laid_out: np.ndarray | None = None  # the binary search's counts, made when first needed

    def weights(self, rows: np.ndarray | None = None) -> np.ndarray:
        """The draw counts of `rows` (default all) in sorted order, from their cumulative counts."""
        cum = self.cum_count.reshape(self.rows, self.n)
        return np.diff(cum if rows is None else cum[rows], axis=1, prepend=0)

    def conf_sums(self, flat: np.ndarray) -> np.ndarray:
        """The cumulative confidence sums at flat indices (the rows laid end to end), as floats."""
        return np.ldexp(self.cum_conf[flat].astype(np.float64), -self.conf_bits)

    def sums(self, positions: np.ndarray, rows: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(confidence sums, correct sums), each (len(rows), len(positions)): of the first P samples per row."""
        rows = np.arange(self.rows) if rows is None else rows
        cut = some, last, following, partial = self._cut(positions, rows)
        conf = np.where(some, self.conf_sums(last), 0.0) + partial * self.conf[following]
        return conf, self._hit_summed(cut)

    def hit_sums(self, positions: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """The correct sums of `sums` alone (whole numbers, exact in float64)."""
        return self._hit_summed(self._cut(positions, rows))

    def _hit_summed(self, cut) -> np.ndarray:
        some, last, following, partial = cut
        return np.where(some, self.cum_hit[last], 0) + partial * self.hit[following]

    def _cut(self, positions: np.ndarray, rows: np.ndarray):
        """Where each position P cuts each row: (whether a whole sample lies before P, the flat index of the
        last whole one, the sample P cuts into, the copies of it that fall before P)."""
        found = self._found(positions, rows)
        some = found > (rows * self.n)[:, None]  # at least one whole sample of the row lies before P
        last = np.where(some, found - 1, 0)  # flat index of the last whole sample
        following = np.minimum(found - (rows * self.n)[:, None], self.n - 1)  # the sample P cuts into
        counted = np.where(some, self.cum_count[last], 0)
        return some, last, following, positions[None, :] - counted

    def _found(self, positions: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """Per row and position P, the flat index just past the row's samples whose cumulative count is at
        most P: a binary search per position, or for many positions one count of the samples at each
        cumulative count (the counts are whole draw counts), the same indices in time linear in the row."""
        if len(positions) * DENSE_LOOKUP <= self.total:
            # One searchsorted over the rows laid end to end: row r's counts offset by r * (total + 1) stay sorted.
            queries = positions[None, :] + (rows * (self.total + 1))[:, None]
            if self._laid_out is None:
                offsets = np.repeat(np.arange(self.rows, dtype=np.int64) * (self.total + 1), self.n)
                self._laid_out = self.cum_count + offsets
            return np.searchsorted(self._laid_out, queries.ravel(), side="right").reshape(queries.shape)
        width = self.total + 1
        counts = self.cum_count.reshape(self.rows, self.n)[rows]  # a copy: rows is an index array
        counts += (np.arange(len(rows)) * width)[:, None]
        at_most = np.bincount(counts.ravel(), minlength=len(rows) * width).reshape(len(rows), width).cumsum(axis=1)
        # Gathered flat, row after row (C order, as the binary search's).
        found = at_most.ravel()[positions[None, :] + (np.arange(len(rows)) * width)[:, None]]
        return found + (rows * self.n)[:, None]


class UnitHits:
    """The correct sums of the first P samples, P = 0..total, of some rows of a SortedPrefix, as one table
    (the row's data set written out: sample i repeated weights[i] times): a lookup is a gather. Built in
    time linear in the rows' samples."""

    def __init__(self, prefix: SortedPrefix, rows: np.ndarray):
        weights = prefix.weights(rows)
        hits = np.broadcast_to(prefix.hit.astype(np.int32), weights.shape)
        written_out = np.repeat(hits.ravel(), weights.ravel()).reshape(len(rows), prefix.total)
        self.table = np.zeros((len(rows), prefix.total + 1), dtype=np.int32)
        np.cumsum(written_out, axis=1, dtype=np.int32, out=self.table[:, 1:])
        self.slot = np.full(prefix.rows, -1)
        self.slot[rows] = np.arange(len(rows))

    def hit_sums(self, positions: np.ndarray, rows: np.ndarray) -> np.ndarray:
        return self.table[self.slot[rows][:, None], positions[None, :]]

    def unsorted_span(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per row (first, end): the position of its first correct sample and the position just past its last
        wrong one. Bins that meet only positions before `first` hold no correct sample, those after `end` only
        correct ones; the row is sorted (every wrong sample before every correct one) when end <= first."""
        table = self.table[self.slot[rows]]
        first = (table == 0).sum(axis=1) - 1
        wrong = np.arange(table.shape[1])[None, :] - table
        end = (wrong < wrong[:, -1:]).sum(axis=1)
        return first, end


def equal_mass_bounds(n: int, bins: int) -> np.ndarray:
    """Group boundaries 0 = P_0 < ... < P_bins = n of n sorted samples in `bins` contiguous groups whose
    sizes differ by at most one, the larger first (np.array_split's)."""
    j = np.arange(bins + 1)
    return j * (n // bins) + np.minimum(j, n % bins)


def group_sums(prefix: SortedPrefix, bins: int, rows: np.ndarray | None = None):
    """(counts (bins,), confidence sums, correct sums (rows, bins)) of `bins` equal-mass groups."""
    bounds = equal_mass_bounds(prefix.total, bins)
    conf, hit = prefix.sums(bounds, rows)
    return np.diff(bounds).astype(np.float64), np.diff(conf, axis=1), np.diff(hit, axis=1)


def ece_sweep_of(prefix: SortedPrefix) -> tuple[np.ndarray, np.ndarray]:
    """(ECE, bins) per row: the L1 equal-mass ECE at the largest bin count whose bin accuracies are monotone
    (non-decreasing in confidence), searched upwards from one bin until monotonicity first fails (`sweep_bins`)."""
    best = sweep_bins(prefix)
    ece = np.empty(prefix.rows)
    for bins in np.unique(best):
        rows = np.flatnonzero(best == bins)
        if bins == prefix.total:  # a bin per sample drawn: each sample's own gap, once per draw
            weights = prefix.weights(None if len(rows) == prefix.rows else rows)
            ece[rows] = (weights * np.abs(prefix.hit - prefix.conf)).sum(axis=1) / prefix.total
            continue
        _, conf_sum, hit_sum = group_sums(prefix, int(bins), rows)
        ece[rows] = np.abs(hit_sum - conf_sum).sum(axis=1) / prefix.total
    return ece, best


def sweep_bins(prefix: SortedPrefix) -> np.ndarray:
    """Per row, ECE-sweep's bin count: the largest b whose equal-mass bins' accuracies are non-decreasing, as
    are those of every count below it (the search upwards from one bin stops at the first count that fails).

    Without a scan of the data per count. b bins of n samples are r = n % b bins of q + 1 = n // b + 1, then
    b - r of q, so the boundaries between bins are j (q + 1) for 0 < j < r (bins of q + 1 on either side),
    the transition r (q + 1) (q + 1 before, q after) and n - m q for 0 < m < b - r (q on either side). The
    first and last families lie on two lattices fixed by q alone (stride q + 1 from 0, stride q from n) that
    every count with the same q shares: per q, whether each lattice point is a violation (the bin before it
    holds more correct samples than the bin after it) and whether one is among the first k points (a running
    or); a count then fails when one of the first r - 1 points of the first lattice, one of the first b - r - 1
    of the second, or its transition is a violation. That is O(n / q) lookups per q, O(n log n) over every q
    the search reaches, and O(1) per count; accuracies are compared as the bins' divided sums, exactly.

    Only boundaries strictly between a row's first correct sample and its last wrong one can fail (a bin that
    ends before the first holds no correct sample, one that starts after the last wrong one only correct
    ones), so only those are looked up. Where there are none (every sample right, every one wrong, every
    confidence tied: ties are broken by correctness) every count is monotone: n bins, without a search; a
    nearly sorted row costs little more. A row still searching past DEEP_BINS bins over a wide span reads its
    hit counts from a UnitHits table (a gather per lookup, not a binary search)."""
    n = prefix.total
    best = np.ones(prefix.rows, dtype=np.int64)
    if n < 2:
        return best
    correct, wrong = np.flatnonzero(prefix.hit), np.flatnonzero(prefix.hit == 0)
    if len(correct) == 0 or len(wrong) == 0 or wrong[-1] < correct[0]:  # sorted, and so is every resample
        return np.full(prefix.rows, n, dtype=np.int64)
    # Per row, positions outside which no boundary can fail: the units before the first correct sample and
    # up to the last wrong one (a row that drew neither still lies inside them).
    cum_count = prefix.cum_count.reshape(prefix.rows, prefix.n)
    first = cum_count[:, correct[0] - 1].astype(np.int64) if correct[0] > 0 else np.zeros(prefix.rows, np.int64)
    end = cum_count[:, wrong[-1]].astype(np.int64)
    searching = np.arange(prefix.rows)
    source: SortedPrefix | UnitHits = prefix
    bins = 2
    while len(searching) and bins <= n:
        if bins > DEEP_BINS and isinstance(source, SortedPrefix) and (end - first).max() * DENSE_LOOKUP > n:
            source = UnitHits(prefix, searching)
            first, end = source.unsorted_span(searching)  # the rows' own spans: some are sorted
            unsorted = end > first
            best[searching[~unsorted]] = n
            searching, first, end = searching[unsorted], first[unsorted], end[unsorted]
            if not len(searching):
                break
        q = n // bins
        counts = np.arange(bins, n // q + 1)  # every count with this q
        fail = _sweep_failures(source, searching, n, q, counts, int(first.min()), int(end.max()))
        failed = fail.any(axis=1)
        best[searching[failed]] = counts[fail[failed].argmax(axis=1)] - 1
        best[searching[~failed]] = counts[-1]
        searching, first, end = searching[~failed], first[~failed], end[~failed]
        bins = int(counts[-1]) + 1
    return best


def _sweep_failures(
    source: SortedPrefix | UnitHits, rows: np.ndarray, n: int, q: int, counts: np.ndarray, low: int, high: int
) -> np.ndarray:
    """(len(rows), len(counts)): whether the equal-mass bins of each count (all with n // count = q) have a
    falling accuracy, looking only at boundaries strictly between `low` and `high` (see sweep_bins)."""
    r = n - counts * q
    step = q + 1
    # Boundaries j (q + 1), 0 < j < r, from j = lo1 to hi1; n - m q, 0 < m < b - r, from m = lo2 to hi2; the
    # transitions r (q + 1) between a bin of q + 1 and one of q. Their windows' ends, looked up at once.
    lo1, hi1 = max(1, low // step + 1), min(int(r[0]) - 1, (high - 1) // step)
    lo2, hi2 = max(1, (n - high) // q + 1), min(int(counts[-1] - r[-1]) - 1, (n - low - 1) // q)
    at = r * step
    which = (r > 0) & (at > low) & (at < high)
    at = at[which]
    lattice1 = np.arange(lo1 - 1, hi1 + 2) * step if lo1 <= hi1 else np.zeros(0, dtype=np.int64)
    lattice2 = n - np.arange(lo2 - 1, hi2 + 2) * q if lo2 <= hi2 else np.zeros(0, dtype=np.int64)
    fail = np.zeros((len(rows), len(counts)), dtype=bool)
    if len(lattice1) + len(lattice2) + len(at) == 0:
        return fail
    hits = source.hit_sums(np.concatenate([lattice1, lattice2, at - step, at, at + q]), rows)
    hits1, hits2, edges = np.split(hits, [len(lattice1), len(lattice1) + len(lattice2)], axis=1)
    if len(lattice1):
        window = hits1[:, 1:] - hits1[:, :-1]  # column k: the bin just after (lo1 - 1 + k)(q + 1)
        seen = np.logical_or.accumulate(window[:, :-1] > window[:, 1:], axis=1)  # a violation at lo1..lo1 + k
        upto = np.minimum(r - 1, hi1) - lo1
        fail[:, upto >= 0] |= seen[:, upto[upto >= 0]]
    if len(lattice2):
        window = hits2[:, :-1] - hits2[:, 1:]  # column k: the bin just before n - (lo2 - 1 + k) q
        seen = np.logical_or.accumulate(window[:, 1:] > window[:, :-1], axis=1)  # a violation at lo2..lo2 + k
        upto = np.minimum(counts - r - 1, hi2) - lo2
        fail[:, upto >= 0] |= seen[:, upto[upto >= 0]]
    if len(at):
        k = len(at)
        before, after = edges[:, k : 2 * k] - edges[:, :k], edges[:, 2 * k :] - edges[:, k : 2 * k]
        fail[:, which] |= after / q < before / step
    return fail


def ece_sweep(confidence: np.ndarray, correct: np.ndarray) -> tuple[float, int]:
    """(ECE, bins) of ECE-sweep (`ece_sweep_of`) on one set of samples."""
    if len(confidence) == 0:
        return float("nan"), 0
    ece, bins = ece_sweep_of(SortedPrefix(confidence, correct))
    return float(ece[0]), int(bins[0])


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
        """(cells, kept): the basis of the first `kept` frequencies."""
        have = self.table.shape[1]
        if kept > have:
            k = np.arange(have, kept)
            more = 2 * np.cos(np.pi * k[None, :] * (2 * self.cells[:, None] + 1) / (2 * GRID_CELLS))
            self.table = np.hstack([self.table, more])
        return self.table[:, :kept]


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
        return np.fft.irfft(0.5 * _twiddle(kept) * (kept_coefficients * gain), GRID_CELLS, axis=1)
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
        # model) no longer make every row pay for thousands.
        need = np.ceil(np.log2(_kept(sigma)))
        out = np.empty(len(which))
        for bucket in np.unique(need):
            at = np.flatnonzero(need == bucket)
            whole = len(at) == len(which) and len(which) == rows
            part = coefficients.first(int(_kept(sigma[at].min())), None if whole else which[at])
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
