"""Class-stratified, seeded subsets and splits of a data set.

Both walk the classes in sorted order and shuffle each class's positions with one seeded generator,
so a subset and a split drawn with the same seed agree on the order they pick images in.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from macs_audit.errors import UsageError


def _shuffled_classes(labels: np.ndarray, seed: int) -> Iterator[np.ndarray]:
    """Each class's positions (classes in sorted order), shuffled by one generator seeded by `seed`."""
    rng = np.random.default_rng(seed)
    for cls in np.unique(labels):
        yield rng.permutation(np.flatnonzero(labels == cls))


def stratified_subset(labels: np.ndarray, limit: int, seed: int = 0) -> np.ndarray:
    """Positions of a class-stratified subset of size `limit` (largest-remainder allocation), seeded."""
    n = len(labels)
    if limit <= 0:
        raise UsageError(f"--limit must be positive, got {limit}")
    if limit >= n:
        return np.arange(n)
    _, counts = np.unique(labels, return_counts=True)
    quota = counts * limit / n
    take = np.floor(quota).astype(int)
    remainder_order = np.argsort(-(quota - take), kind="stable")
    take[remainder_order[: limit - take.sum()]] += 1
    chosen = [idx[:k] for idx, k in zip(_shuffled_classes(labels, seed), take, strict=True)]
    return np.sort(np.concatenate(chosen))


def stratified_split(labels: np.ndarray, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Split positions into (held-out, rest) with round(`fraction` x class size) of every class held out, seeded."""
    held, rest = [], []
    for idx in _shuffled_classes(labels, seed):
        k = int(round(fraction * len(idx)))
        held.append(idx[:k])
        rest.append(idx[k:])
    return np.sort(np.concatenate(held)), np.sort(np.concatenate(rest))
