"""Bootstrap draw counts: handed out in pieces that bound the consumers' memory, drawn as one chunk."""

import numpy as np
import pytest

from macs_audit.metrics import resampling


def drawn_whole(n: int, n_resamples: int, seed: int) -> np.ndarray:
    """The counts of DRAWS_PER_CHUNK draws at a time, as one array (the stream the pieces must keep)."""
    rng, chunk, out = np.random.default_rng(seed), max(1, resampling.DRAWS_PER_CHUNK // n), []
    for start in range(0, n_resamples, chunk):
        m = min(chunk, n_resamples - start)
        draws = rng.integers(0, n, size=(m, n))
        out.append(np.bincount((draws + n * np.arange(m)[:, None]).ravel(), minlength=m * n).reshape(m, n))
    return np.concatenate(out).astype(np.float64)


@pytest.mark.parametrize(("n", "n_resamples"), [(10_000, 1000), (9_999, 1000), (3_001, 1000), (101, 333), (3, 7)])
def test_pieces_are_the_counts_drawn_whole_and_bounded(n, n_resamples):
    pieces = list(resampling.draw_counts(n, n_resamples, np.random.default_rng(7)))
    np.testing.assert_array_equal(np.concatenate(pieces), drawn_whole(n, n_resamples, 7))
    rows = max(1, resampling.COUNTS_PER_PIECE // n)
    assert all(len(p) <= rows for p in pieces)
    assert all(len(p) >= min(rows, n_resamples) // 2 for p in pieces)  # no sliver of a few rows
    assert all((p.sum(axis=1) == n).all() for p in pieces)


def test_explicit_rows_are_the_pieces():
    pieces = list(resampling.draw_counts(50, 25, np.random.default_rng(0), rows=10, dtype=np.uint8))
    assert [len(p) for p in pieces] == [10, 10, 5] and pieces[0].dtype == np.uint8


def test_map_in_order_keeps_the_order_and_takes_items_as_results_come_back():
    taken = []

    def items():
        for i in range(7):
            taken.append(i)
            yield i

    seen_in_flight = []

    def slow_square(i):
        seen_in_flight.append(len(taken) - i)  # items taken beyond this one when it runs
        return i * i

    assert list(resampling.map_in_order(slow_square, items(), threads=2)) == [i * i for i in range(7)]
    assert max(seen_in_flight) <= 2  # never more than `threads` pieces taken ahead
    assert list(resampling.map_in_order(slow_square, iter(range(4)), threads=1)) == [0, 1, 4, 9]


def test_piece_threads_follow_omp_num_threads(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert resampling.piece_threads() == 1
    monkeypatch.delenv("OMP_NUM_THREADS")
    assert 1 <= resampling.piece_threads() <= resampling.MAX_PIECE_THREADS


@pytest.mark.parametrize("threads", [1, 2])
def test_a_paired_statistic_sees_the_bootstraps_counts_and_values_and_changes_nothing(threads, monkeypatch):
    from macs_audit.metrics import bootstrap
    from macs_audit.metrics.accumulators import CalibrationAccumulator

    monkeypatch.setattr(resampling, "COUNTS_PER_PIECE", 4_000)  # several pieces of 200 samples' counts
    monkeypatch.setattr(resampling, "MAX_PIECE_THREADS", threads)
    rng = np.random.default_rng(1)
    acc = CalibrationAccumulator(4)
    acc.update(rng.normal(size=(200, 4)).astype(np.float32), rng.integers(0, 4, 200))
    alone = bootstrap.resampled_metrics(acc, 90, seed=3)
    pieces = []

    def statistic(counts, own):
        pieces.append(len(counts))
        return {"counts": counts.copy(), "ece": own["ece"]}

    intervals, paired = bootstrap.paired_bootstrap(acc, 90, 3, statistic)
    assert len(pieces) > 1 and sum(pieces) == 90
    np.testing.assert_array_equal(paired["counts"], drawn_whole(200, 90, 3))
    np.testing.assert_array_equal(paired["ece"], alone["ece"])  # the bootstrap's own, handed over
    assert intervals == bootstrap.bootstrap_intervals(acc, 90, seed=3)
    assert bootstrap.paired_bootstrap(acc, 0, 3, statistic) == ({}, {})  # no resamples: nothing to pair with
    assert resampling.resampled(200, 90, 3, lambda c: {"rows": c[:, :2].copy()})["rows"].shape == (90, 2)
    assert resampling.concatenated([]) == {}
