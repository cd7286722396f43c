"""Calibration-error estimators beyond the binned ECE, on top-label (confidence, correct) pairs.

- smooth ECE: metrics/smooth_ece.py, on the same per-sample arrays.
- L2 ECE over equal-mass bins, plug-in and debiased: metrics/l2_ece.py, on this module's groups.
- ECE-sweep (Roelofs et al., 2022): the L1 ECE over the largest number of equal-mass bins for which
  the bins' accuracies still rise monotonically with confidence (searched upwards from one bin until
  the first count that is not monotone; `sweep_bins` says how without re-scanning the data per count).

Equal-mass bins are the adaptive ECE's: contiguous groups of the confidences sorted (ties broken by
correctness), sizes differing by at most one. Every function takes the per-sample arrays that the
accumulators keep, so merged batches and torch.distributed ranks give the same values.
"""

from __future__ import annotations

import functools

import numpy as np

# SortedPrefix.sums at more than total / DENSE_LOOKUP positions counts the samples below every position
# at once (linear) instead of a binary search per position.
DENSE_LOOKUP = 8
# ECE-sweep still searching past DEEP_BINS bins, with more than total / DENSE_LOOKUP positions between a
# row's first correct sample and its last wrong one, reads its hit counts from one table (UnitHits).
DEEP_BINS = 64


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

    @functools.cached_property
    def laid_out(self) -> np.ndarray:
        """The rows' cumulative counts laid end to end, row r's offset by r (total + 1): one sorted array, for one
        binary search of every row (made when first needed)."""
        return self.cum_count + np.repeat(np.arange(self.rows, dtype=np.int64) * (self.total + 1), self.n)

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
            queries = positions[None, :] + (rows * (self.total + 1))[:, None]  # into `laid_out`'s rows
            return np.searchsorted(self.laid_out, queries.ravel(), side="right").reshape(queries.shape)
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
            weights = prefix.weights(rows)
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
    first = cum_count[:, correct[0] - 1] if correct[0] > 0 else np.zeros(prefix.rows, np.int64)
    end = cum_count[:, wrong[-1]]
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
