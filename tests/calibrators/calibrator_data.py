"""Seeded synthetic data for the calibrator tests (imported by them; tests/calibrators is on sys.path)."""

import numpy as np


def draw_labels(probabilities: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One label per row, drawn from that row's probabilities."""
    u = rng.random(len(probabilities))[:, None]
    return np.minimum((probabilities.cumsum(axis=1) < u).sum(axis=1), probabilities.shape[1] - 1)


def synthetic_logits(n: int, k: int, seed: int, spread: float = 2.0, signal: float = 2.0) -> np.ndarray:
    """Seeded logits: Gaussian noise plus `signal` on one random class per row."""
    rng = np.random.default_rng(seed)
    z = rng.normal(0.0, spread, (n, k))
    z[np.arange(n), rng.integers(0, k, n)] += signal
    return z
