"""Class-stratified, seeded subsets and splits of a data set."""

from __future__ import annotations

import numpy as np

from macs_audit.errors import UsageError


def stratified_subset(labels: np.ndarray, limit: int, seed: int = 0) -> np.ndarray:
    """Positions of a class-stratified subset of size `limit` (largest-remainder allocation), seeded."""
    n = len(labels)
    if limit <= 0:
        raise UsageError(f"--limit must be positive, got {limit}")
    if limit >= n:
        return np.arange(n)
    rng = np.random.default_rng(seed)
    classes, counts = np.unique(labels, return_counts=True)
    quota = counts * limit / n
    take = np.floor(quota).astype(int)
    remainder_order = np.argsort(-(quota - take), kind="stable")
    take[remainder_order[: limit - take.sum()]] += 1
    chosen = [rng.permutation(np.flatnonzero(labels == c))[:k] for c, k in zip(classes, take)]
    return np.sort(np.concatenate(chosen))


def stratified_split(labels: np.ndarray, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Split indices into (held-out, rest) with `fraction` of every class held out, seeded."""
    rng = np.random.default_rng(seed)
    held, rest = [], []
    for cls in np.unique(labels):
        idx = np.flatnonzero(labels == cls)
        rng.shuffle(idx)
        k = int(round(fraction * len(idx)))
        held.append(idx[:k])
        rest.append(idx[k:])
    return np.sort(np.concatenate(held)), np.sort(np.concatenate(rest))
