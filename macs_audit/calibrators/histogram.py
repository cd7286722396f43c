"""Histogram binning one-vs-rest (Zadrozny and Elkan 2001), renormalised.

For each class k, p_k = softmax(z)_k is cut into `n_bins` bins and every bin gets the fraction of its
fit samples whose label is k. Bins are equal-mass per class by default (`strategy="quantile"`: the
inner edges are the class's p_k quantiles at 1/B, ..., (B-1)/B on the fit data) or equal-width
(`"uniform"`, netcal's HistogramBinning default). The outer edges are 0 and 1. A bin is (lo, hi], the
project's convention (the first also holds 0). A bin without fit samples (equal-width bins, or tied
quantiles) gets its midpoint, as in netcal. A new sample gets q_k = values[k, bin of p_k]; the q_k are
raised to at least `min_probability` (default 0.01 / K, as in isotonic.py) and divided by their sum.

Exposed for export: `edges` (K, B + 1), non-decreasing rows from 0 to 1, and `values` (K, B).
netcal differs in two details that only matter on a bin edge: it fits with [lo, hi) bins (scipy's
binned_statistic_dd) but predicts with (lo, hi], and it offers equal-mass bins for fitting only.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from macs_audit.calibrators.common import OneVsRest, as_fit_data, floor_for, softmax
from macs_audit.errors import UsageError
from macs_audit.metrics.conventions import N_BINS

STRATEGIES = ("quantile", "uniform")


def _bin_of(p: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """The (lo, hi] bin of each p (values in [0, 1]) under one class's edges."""
    return np.searchsorted(edges[1:-1], p, side="left")


@dataclasses.dataclass(frozen=True, kw_only=True)
class HistogramBinning(OneVsRest):
    """Fitted one-vs-rest histogram binning; `transform(z)` = log(renormalised floored bin values). Its options:
    n_bins, strategy, min_probability."""

    edges: np.ndarray  # (K, B + 1)
    values: np.ndarray  # (K, B), in [0, 1]
    method: str = "histogram"

    @property
    def n_parameters(self) -> int:
        """The fitted numbers: every bin's value, and the inner edges where they come from the data."""
        k, b = self.values.shape
        return k * b + (k * (b - 1) if self.options["strategy"] == "quantile" else 0)

    def one_vs_rest(self, logits: np.ndarray) -> np.ndarray:
        """The per-class bin values (N, K), before the floor and renormalisation."""
        p = self.class_columns(logits)
        for k in range(self.n_classes):
            p[k] = self.values[k, _bin_of(p[k], self.edges[k])]
        return p.T


def fit_histogram(
    logits: np.ndarray,
    labels: np.ndarray,
    n_bins: int = N_BINS,
    strategy: str = "quantile",
    min_probability: float | None = None,
) -> HistogramBinning:
    """Fit one histogram per class on held-out (logits, labels)."""
    if n_bins < 1:
        raise UsageError(f"histogram binning needs at least 1 bin, got {n_bins}")
    if strategy not in STRATEGIES:
        raise UsageError(f"unknown binning strategy {strategy!r}; choose one of {', '.join(STRATEGIES)}")
    z, y = as_fit_data(logits, labels)
    n, k = z.shape
    floor = floor_for(min_probability, k)
    p = np.ascontiguousarray(softmax(z).T)  # (K, N)
    grid = np.linspace(0.0, 1.0, n_bins + 1)
    if strategy == "quantile":
        edges = np.quantile(p, grid, axis=1).T  # (K, B + 1)
        edges[:, 0], edges[:, -1] = 0.0, 1.0
    else:
        edges = np.tile(grid, (k, 1))
    counts = np.empty((k, n_bins))
    positives = np.empty((k, n_bins))
    for c in range(k):
        bins = _bin_of(p[c], edges[c])
        counts[c] = np.bincount(bins, minlength=n_bins)
        positives[c] = np.bincount(bins[y == c], minlength=n_bins)
    midpoints = 0.5 * (edges[:, :-1] + edges[:, 1:])
    values = np.divide(positives, counts, out=midpoints.copy(), where=counts > 0)
    options = {"n_bins": int(n_bins), "strategy": strategy, "min_probability": floor}
    return HistogramBinning(edges=edges, values=values, fit_size=n, options=options)
