"""ECE-sweep's search without a scan per bin count: the same bins and values as the definition, written out by
brute force, on many small inputs (ties, rounded confidences, nearly sorted correctness, bootstrap weights) and
along every path of the search; and work that grows as N log N, not N^2, where the search runs to N bins."""

import numpy as np
import pytest
from references import sweep_by_brute_force

from macs_audit.metrics import estimators as E
from macs_audit.metrics.resampling import draw_counts


def random_case(rng, kind):
    n = int(rng.integers(1, 120))
    confidence = rng.random(n)
    if kind == "rounded":  # few distinct confidences: ties, broken by correctness
        confidence = np.round(confidence * rng.integers(1, 9)) / 8
    elif kind == "tied":
        confidence[:] = 0.5
    if kind == "nearly_sorted":  # right above a threshold, wrong below, a few exceptions
        correct = np.sort(confidence) >= np.quantile(confidence, rng.random())
        correct = correct[np.argsort(np.argsort(confidence))]
        flip = rng.integers(0, n, rng.integers(1, 4))
        correct[flip] = ~correct[flip]
    elif kind == "constant":
        correct = np.full(n, rng.random() < 0.5)
    else:
        correct = rng.random(n) < confidence
    return confidence, correct


KINDS = ("continuous", "rounded", "tied", "nearly_sorted", "constant")


@pytest.mark.parametrize(
    "deep_bins, dense_lookup",
    [(E.DEEP_BINS, E.DENSE_LOOKUP), (1, E.DENSE_LOOKUP), (1, 1), (3, 10**9), (2, 0)],
    ids=["defaults", "deep-at-once", "deep-without-table", "dense-and-table", "binary-search-only"],
)
def test_the_sweep_equals_its_definition_on_random_inputs(monkeypatch, deep_bins, dense_lookup):
    """Every path: the search's table and its binary searches, narrow and wide spans, dense and sparse lookups."""
    monkeypatch.setattr(E, "DEEP_BINS", deep_bins)
    monkeypatch.setattr(E, "DENSE_LOOKUP", dense_lookup)
    rng = np.random.default_rng(deep_bins * 1000 + dense_lookup % 997)
    for trial in range(150):
        confidence, correct = random_case(rng, KINDS[trial % len(KINDS)])
        n = len(confidence)
        weights = rng.multinomial(n, np.full(n, 1 / n), size=int(rng.integers(1, 5))) if trial % 2 else np.ones((1, n))
        ece, bins = E.ece_sweep_of(E.SortedPrefix(confidence, correct, weights.astype(np.float64)))
        for row, w in enumerate(weights.astype(int)):
            expected, expected_bins = sweep_by_brute_force(confidence, correct, w)
            assert bins[row] == expected_bins, (trial, row)
            assert ece[row] == pytest.approx(expected, rel=1e-12, abs=1e-15), (trial, row)


def test_dense_lookups_and_the_hit_table_are_the_binary_search_exactly(monkeypatch):
    rng = np.random.default_rng(3)
    confidence = np.round(rng.random(200) * 16) / 16
    correct = rng.random(200) < confidence
    counts = next(draw_counts(200, 7, rng)).astype(np.float64)
    prefix = E.SortedPrefix(confidence, correct, counts)
    positions, rows = np.sort(rng.integers(0, 201, 60)), np.array([5, 0, 3])
    monkeypatch.setattr(E, "DENSE_LOOKUP", 10**9)
    dense = prefix.sums(positions, rows)
    monkeypatch.setattr(E, "DENSE_LOOKUP", 0)
    searched = prefix.sums(positions, rows)
    assert np.array_equal(dense[0], searched[0]) and np.array_equal(dense[1], searched[1])
    table = E.UnitHits(prefix, np.array([0, 3, 5]))
    assert np.array_equal(table.hit_sums(positions, rows), searched[1])


def perfect_ties_and_nearly(n, rng):
    """Inputs on which the sweep keeps N bins or runs deep: every prediction right, every one wrong, every
    confidence tied, confidences in 256 levels with every prediction right; right but for the second least
    confident (N - 1 bins: only a bin of one sample before it finds the fall), and right but for 5 of the 10
    least confident."""
    confidence = rng.uniform(0.5, 1.0, n)
    right, wrong = np.ones(n, bool), np.zeros(n, bool)
    but_one, nearly = right.copy(), right.copy()
    but_one[np.argsort(confidence)[1]] = False
    nearly[np.argsort(confidence)[:10:2]] = False
    return {
        "all_correct": (confidence, right),
        "all_wrong": (confidence, wrong),
        "tied": (np.full(n, 0.7), rng.random(n) < 0.7),
        "rounded_8bit": (np.round(confidence * 256) / 256, right),
        "all_but_one": (confidence, but_one),
        "nearly_correct": (confidence, nearly),
    }


def counted_work(monkeypatch, confidence, correct, resamples):
    """Positions looked up (rows x positions, binary search or gather) and hit-table entries built by the sweep."""
    work = [0]
    cut, table_init, table_sums = E.SortedPrefix._cut, E.UnitHits.__init__, E.UnitHits.hit_sums

    def counting_cut(self, positions, rows):
        work[0] += len(rows) * len(positions)
        return cut(self, positions, rows)

    def counting_init(self, prefix, rows):
        work[0] += len(rows) * (prefix.total + 1)
        table_init(self, prefix, rows)

    def counting_sums(self, positions, rows):
        work[0] += len(rows) * len(positions)
        return table_sums(self, positions, rows)

    n = len(confidence)
    weights = next(draw_counts(n, resamples, np.random.default_rng(0))) if resamples else None
    with monkeypatch.context() as patched:
        patched.setattr(E.SortedPrefix, "_cut", counting_cut)
        patched.setattr(E.UnitHits, "__init__", counting_init)
        patched.setattr(E.UnitHits, "hit_sums", counting_sums)
        E.ece_sweep_of(E.SortedPrefix(confidence, correct, weights))
    return work[0]


@pytest.mark.parametrize("resamples", [0, 32], ids=["point", "bootstrap"])
def test_the_sweep_costs_n_log_n_where_it_runs_deep(monkeypatch, resamples):
    """Four times the samples: about four times the work (N log N: 4.8x; the resamples that keep N bins, which
    look nothing up, vary in number), never the sixteen of a scan per count (which the search upwards from one
    bin would do here: up to N bins, each O(N))."""
    small = perfect_ties_and_nearly(1_000, np.random.default_rng(1))
    large = perfect_ties_and_nearly(4_000, np.random.default_rng(1))
    for case in small:
        before = counted_work(monkeypatch, *small[case], resamples)
        after = counted_work(monkeypatch, *large[case], resamples)
        assert after <= 8 * max(before, 1), (case, before, after)
    for case, bins in {"all_correct": 4_000, "tied": 4_000, "rounded_8bit": 4_000, "all_but_one": 3_999}.items():
        assert E.ece_sweep(*large[case])[1] == bins, case
    assert E.ece_sweep(*large["nearly_correct"])[1] > 1_000  # deep, not sorted
