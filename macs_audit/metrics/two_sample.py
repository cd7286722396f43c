"""Representation shift: are the features of a view drawn from the distribution of the clean evaluation features?

A kernel two-sample test (Gretton et al. 2012), numpy only:

- each side subsampled without replacement to at most MAX_SAMPLES samples (seeded), so that the kernel matrix
  is at most (2 MAX_SAMPLES)^2 whatever the set sizes;
- Gaussian kernel k(x, y) = exp(-||x - y||^2 / (2 sigma^2)), sigma the median Euclidean distance between
  distinct samples of the pooled (subsampled) set (the median heuristic);
- the unbiased estimate of MMD^2 (the diagonal terms left out; it can fall below 0);
- a permutation p-value: (1 + #{permuted MMD^2 >= observed}) / (1 + PERMUTATIONS), the pooled samples split at
  random into sets of the two sizes (seeded), the observed split computed by the same code;
- effect size: the MMD itself, sqrt(max(MMD^2, 0)), in the kernel's units (0 for one distribution, at most
  sqrt(2)).

Arithmetic in float64, the features centred on the pooled mean before the distances.
"""

from __future__ import annotations

import numpy as np

from macs_audit.errors import InputError

MAX_SAMPLES = 2000  # per side: the kernel matrix is at most 4,000 x 4,000 (128 MiB in float64)
PERMUTATIONS = 1000
PERMUTATION_CHUNK = 100  # permuted splits evaluated together: an (n, 100) indicator times the kernel

CONVENTION = (
    "kernel two-sample test of the view's features against the clean evaluation features: each side subsampled "
    "without replacement to at most 2,000 samples (seeded); Gaussian kernel exp(-||x - y||^2 / (2 sigma^2)), "
    "sigma = median distance between distinct pooled samples; unbiased MMD^2; permutation p-value "
    "(1 + #{permuted >= observed}) / (1 + permutations); effect size = MMD = sqrt(max(MMD^2, 0))"
)


def mmd_test(
    a: np.ndarray,
    b: np.ndarray,
    *,
    seed: int,
    permutations: int = PERMUTATIONS,
    max_samples: int = MAX_SAMPLES,
) -> dict[str, float | int]:
    """Two-sample MMD test of features `a` (N_a, D) against `b` (N_b, D); JSON-ready: mmd2, mmd (the effect
    size), p_value, n_a and n_b (the samples used), bandwidth, permutations, max_samples, seed."""
    x, y = _sample(a, "a"), _sample(b, "b")
    if x.shape[1] != y.shape[1]:
        raise InputError(f"the two feature sets differ in dimension: {x.shape[1]} and {y.shape[1]}")
    if max_samples < 2 or permutations < 0:
        raise InputError(
            f"max_samples must be at least 2 and permutations at least 0, got {max_samples}, {permutations}"
        )
    rng_a, rng_b, rng_split = (np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(3))
    x, y = _subsample(x, max_samples, rng_a), _subsample(y, max_samples, rng_b)
    kernel, bandwidth = gaussian_kernel(np.concatenate([x, y]))
    m = len(x)
    observed = float(_split_mmd2(kernel, np.arange(m)[:, None])[0])
    exceed = 0
    for start in range(0, permutations, PERMUTATION_CHUNK):
        count = min(PERMUTATION_CHUNK, permutations - start)
        firsts = np.argsort(rng_split.random((len(kernel), count)), axis=0)[:m]  # a random m-subset per column
        exceed += int((_split_mmd2(kernel, firsts) >= observed).sum())
    return {
        "mmd2": observed,
        "mmd": float(np.sqrt(max(observed, 0.0))),
        "p_value": (1 + exceed) / (1 + permutations),
        "n_a": m,
        "n_b": len(y),
        "bandwidth": bandwidth,
        "permutations": permutations,
        "max_samples": max_samples,
        "seed": seed,
    }


def gaussian_kernel(pooled: np.ndarray) -> tuple[np.ndarray, float]:
    """(n, n) Gaussian kernel of the pooled samples and its bandwidth sigma, the median distance between distinct
    samples (the mean distance where that median is 0; 1 where every sample is the same)."""
    z = pooled.astype(np.float64)
    z -= z.mean(axis=0)
    norms = (z**2).sum(axis=1)
    squared = z @ z.T
    squared *= -2
    squared += norms[:, None]
    squared += norms[None, :]
    np.maximum(squared, 0, out=squared)
    np.fill_diagonal(squared, 0)
    distances = np.sqrt(squared[np.triu(np.ones(squared.shape, dtype=bool), 1)])
    bandwidth = float(np.median(distances)) or float(distances.mean()) or 1.0
    squared /= -2 * bandwidth**2
    return np.exp(squared, out=squared), bandwidth


def _split_mmd2(kernel: np.ndarray, firsts: np.ndarray) -> np.ndarray:
    """Unbiased MMD^2 of each split of the pooled samples: column j of `firsts` (m, P) holds the indices of the
    first set, the rest form the second. With s the first set's indicator: s'Ks, s'K1 and 1'K1 give the three
    block sums; the kernel's diagonal (1) is left out of the within-set ones."""
    n, (m, count) = len(kernel), firsts.shape
    r = n - m
    indicator = np.zeros((n, count))
    np.put_along_axis(indicator, firsts, 1.0, axis=0)
    row_sums = kernel.sum(axis=1)
    within_a = (indicator * (kernel @ indicator)).sum(axis=0)
    a_to_all = indicator.T @ row_sums
    within_b = row_sums.sum() - 2 * a_to_all + within_a
    between = a_to_all - within_a
    return (within_a - m) / (m * (m - 1)) + (within_b - r) / (r * (r - 1)) - 2 * between / (m * r)


def _sample(features: np.ndarray, what: str) -> np.ndarray:
    x = np.asarray(features)
    if x.ndim != 2 or x.shape[0] < 2 or x.shape[1] < 1:
        raise InputError(
            f"the two-sample test needs at least 2 samples of shape (N, D) a side, got {x.shape} for {what}"
        )
    bad = np.flatnonzero(~np.isfinite(x).all(axis=1))
    if len(bad):
        raise InputError(
            f"two-sample test, set {what}: {len(bad)} samples have NaN or infinite features "
            f"(the first: sample {bad[0]})"
        )
    return x


def _subsample(x: np.ndarray, limit: int, rng: np.random.Generator) -> np.ndarray:
    """At most `limit` rows, drawn without replacement, in their original order."""
    if len(x) <= limit:
        return x
    return x[np.sort(rng.choice(len(x), limit, replace=False))]
