"""Seeded bootstrap draw counts: each resample of N samples as a vector of how often each sample was drawn,
so that a statistic of many resamples is one matrix operation (a weighted sum, a weighted cumulative sum)."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

DRAWS_PER_CHUNK = 4_000_000  # resample counts held at once (rows x samples): bounds the memory


def draw_counts(
    n: int, n_resamples: int, rng: np.random.Generator, rows: int | None = None, dtype: type | None = None
) -> Iterator[np.ndarray]:
    """Chunks of draw counts (rows, n), `n_resamples` rows in all, each row summing to n; `rows` per chunk
    (default: as many as DRAWS_PER_CHUNK allows); float64 unless `dtype` is given (the smallest unsigned integer
    that holds n, np.min_scalar_type(n), holds every count exactly)."""
    chunk = rows or max(1, DRAWS_PER_CHUNK // max(n, 1))
    for start in range(0, n_resamples, chunk):
        m = min(chunk, n_resamples - start)
        draws = rng.integers(0, n, size=(m, n))
        counts = np.bincount((draws + n * np.arange(m)[:, None]).ravel(), minlength=m * n).reshape(m, n)
        yield counts.astype(dtype or np.float64)
