"""Seeded bootstrap draw counts: each resample of N samples as a vector of how often each sample was drawn,
so that a statistic of many resamples is one matrix operation (a weighted sum, a weighted cumulative sum).

`resampled` runs a statistic on the counts of one seed; a `PairedStatistic` is one that metrics.bootstrap runs on
the very pieces of counts of its intervals, beside its own statistics of each piece (`paired_bootstrap`)."""

from __future__ import annotations

import collections
import os
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

import numpy as np

T = TypeVar("T")
R = TypeVar("R")
# A statistic of a piece of draw counts (rows, N): named arrays of one value per row (resample).
Statistic = Callable[[np.ndarray], dict[str, np.ndarray]]
# One that also takes a bootstrap's own statistics of the same piece (metrics.bootstrap.paired_bootstrap).
PairedStatistic = Callable[[np.ndarray, dict[str, np.ndarray]], dict[str, np.ndarray]]

DRAWS_PER_CHUNK = 4_000_000  # resample draws made at once (rows x samples): bounds the memory
# Counts handed out at once (rows x samples) by default: a consumer's per-resample arrays (prefix sums, masses)
# are as many as the counts, several times over, so the counts go out in smaller pieces than they are drawn in.
# A quarter of a million: the pieces' arrays are the bootstrap's peak memory; the parity audit's paired bootstrap
# of 10,000 images ran as fast as with half a million (0.40 s) in 10 MiB less.
COUNTS_PER_PIECE = 250_000


def draw_counts(
    n: int, n_resamples: int, rng: np.random.Generator, rows: int | None = None, dtype: type | None = None
) -> Iterator[np.ndarray]:
    """Chunks of draw counts (rows, n), `n_resamples` rows in all, each row summing to n; `rows` per chunk
    (default: about as many as COUNTS_PER_PIECE allows); float64 unless `dtype` is given (the smallest unsigned integer
    that holds n, np.min_scalar_type(n), holds every count exactly).

    The draws are made DRAWS_PER_CHUNK at a time (or `rows` at a time) whatever the pieces handed out: the
    generator's stream depends on how many draws each call makes, so the counts stay those of that chunking."""
    chunk = rows or max(1, DRAWS_PER_CHUNK // max(n, 1))
    piece = rows or max(1, COUNTS_PER_PIECE // max(n, 1))
    for start in range(0, n_resamples, chunk):
        m = min(chunk, n_resamples - start)
        # int32 where it holds n: the same values as the default int64 (the generator draws 32 bits for a
        # range below 2**32 either way, tests/metrics/test_resampling.py), in half the memory.
        draws = rng.integers(0, n, size=(m, n), dtype=np.int32 if n <= np.iinfo(np.int32).max else np.int64)
        # Pieces of near-equal size, none much smaller than `piece` (a sliver of a few rows would take another
        # path through BLAS, whose sums can differ from the whole chunk's in the last bit).
        bounds = np.linspace(0, m, -(-m // piece) + 1).round().astype(int)
        for first, last in zip(bounds[:-1], bounds[1:], strict=True):
            counts = np.empty((last - first, n), dtype=dtype or np.float64)
            for row, drawn in zip(counts, draws[first:last], strict=True):  # a row's counts stay in cache
                row[:] = np.bincount(drawn, minlength=n)
            yield counts


# Pieces in flight at once. 1: on 2 cores two at a time made the parity audit's paired bootstrap of 10,000 images
# 1.3x faster (0.31 s against 0.40 s) for 23 MiB more at its peak, which took the default audit's peak memory
# to 2.0x the clean audit's, its target (benchmarks/RESULTS.md); raise it where cores and memory are to spare.
# Results do not depend on it (`map_in_order`).
MAX_PIECE_THREADS = 1


def piece_threads() -> int:
    """Threads for a bootstrap's pieces: MAX_PIECE_THREADS, fewer on fewer cores, and OMP_NUM_THREADS where it
    is set lower (torchrun sets 1 per process, and onnxruntime follows it too)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    limit = os.environ.get("OMP_NUM_THREADS", "")
    if limit.isdigit() and int(limit) > 0:
        cores = min(cores, int(limit))
    return max(1, min(MAX_PIECE_THREADS, cores))


def map_in_order(fn: Callable[[T], R], items: Iterable[T], threads: int) -> Iterator[R]:
    """fn of each item, in the items' order, `threads` at a time; the items are taken one at a time as
    results come back (the draw counts are made while the pieces before them are computed).

    BLAS runs single-threaded meanwhile, however many threads run the pieces: OpenBLAS splits a product
    differently on more threads (sums that differ in the last bit), so the values do not depend on the threads;
    and its own threads, which spin between calls, took the cores from the pieces' (two pieces at a time were no
    faster than one)."""
    from threadpoolctl import threadpool_limits

    with threadpool_limits(1, user_api="blas"):
        if threads <= 1:
            yield from map(fn, items)
            return
        with ThreadPoolExecutor(threads) as pool:
            pending: collections.deque[Future[R]] = collections.deque()
            for item in items:
                pending.append(pool.submit(fn, item))
                if len(pending) >= threads:
                    yield pending.popleft().result()
            while pending:
                yield pending.popleft().result()


def concatenated(pieces: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """The pieces' arrays joined per name (the names of the first piece); {} without pieces."""
    return {name: np.concatenate([piece[name] for piece in pieces]) for name in pieces[0]} if pieces else {}


def resampled(n: int, n_resamples: int, seed: int, statistic: Statistic) -> dict[str, np.ndarray]:
    """`statistic` on `n_resamples` resamples of `n` samples: the counts metrics.bootstrap draws for n and `seed`."""
    pieces = map_in_order(statistic, draw_counts(n, n_resamples, np.random.default_rng(seed)), piece_threads())
    return concatenated(list(pieces))
