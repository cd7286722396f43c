"""Isotonic regression one-vs-rest (Zadrozny and Elkan 2002), renormalised.

For each class k, scikit-learn's IsotonicRegression (increasing, outputs in [0, 1], out_of_bounds
"clip") is fitted to (p_k, 1[y = k]) with p = softmax(z): its steps reproduced here (`_isotonic_fit`) on
scipy's pool-adjacent-violators fit, which scikit-learn itself calls, so the audit need not import it.
A new sample gets q_k = f_k(p_k); the q_k are raised to at least `min_probability` (default 0.01 / K: a
block without positives has value 0, which at the label would make the NLL infinite) and divided by
their sum. netcal's IsotonicRegression renormalises the same way, without the floor.

The fitted maps are exposed for export: `thresholds[k]` (increasing) and `values[k]` (non-decreasing)
define f_k as numpy.interp(p, thresholds[k], values[k]): linear interpolation between the points,
constant beyond the first and last (the clip), which is exactly scikit-learn's prediction. Within a
fitted block the two end points carry the same value, so f_k is a step function with linear ramps
between blocks.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from macs_audit.calibrators.common import OneVsRest, as_fit_data, floor_for, softmax


@dataclasses.dataclass(frozen=True, kw_only=True)
class IsotonicCalibration(OneVsRest):
    """Fitted one-vs-rest isotonic maps; `transform(z)` = log(renormalised floored f_k(softmax(z)_k)). Its
    options: min_probability."""

    thresholds: list[np.ndarray]  # per class: the x points of f_k, increasing
    values: list[np.ndarray]  # per class: f_k at those points, non-decreasing, in [0, 1]
    method: str = "isotonic"

    @property
    def n_parameters(self) -> int:
        """The fitted numbers: every class's (threshold, value) pairs."""
        return 2 * sum(len(t) for t in self.thresholds)

    def one_vs_rest(self, logits: np.ndarray) -> np.ndarray:
        """The per-class estimates f_k(p_k), (N, K), before the floor and renormalisation."""
        p = self.class_columns(logits)
        for k, (x, v) in enumerate(zip(self.thresholds, self.values, strict=True)):
            p[k] = np.interp(p[k], x, v)
        return p.T

    def parameters(self) -> dict[str, Any]:
        points = [len(t) for t in self.thresholds]
        return {**self.options, "points_min": min(points), "points_max": max(points)}


# scikit-learn merges x values closer than this to the first of their group (np.finfo(float64).resolution).
MERGE_RESOLUTION = float(np.finfo(np.float64).resolution)


def _merged(x: np.ndarray, hit: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(x, mean of hit, count) per group of sorted `x`, grouped as scikit-learn's _make_unique does: a group
    takes every following x less than MERGE_RESOLUTION above its first. Equal x are the usual groups; the
    rare x a hair above the previous one are grouped one by one, as scikit-learn's loop does."""
    gap = np.diff(x)
    if np.any((gap > 0) & (gap < MERGE_RESOLUTION)):
        starts = [0]
        for j in range(1, len(x)):
            if x[j] - x[starts[-1]] >= MERGE_RESOLUTION:
                starts.append(j)
        first = np.asarray(starts)
    else:
        first = np.concatenate(([0], np.flatnonzero(gap != 0) + 1))
    count = np.diff(np.append(first, len(x))).astype(np.float64)
    # The hits are 0 or 1, so their sums (and the means) are exact in any order.
    return x[first], np.add.reduceat(hit, first) / count, count


def _isotonic_fit(x: np.ndarray, hit: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's IsotonicRegression(y_min=0, y_max=1, increasing=True).fit(x, hit), as its
    (X_thresholds_, y_thresholds_): sort by (x, hit), merge equal x (`_merged`), scipy's pool-adjacent-
    violators fit weighted by the group sizes, clip to [0, 1], and drop the points inside a run of equal
    values (the first and the last of a run define the same map). The same steps in the same arithmetic,
    without importing scikit-learn (a second or more of start-up); tests compare the two."""
    from scipy.optimize import isotonic_regression

    order = np.lexsort((hit, x))
    ux, uy, weight = _merged(x[order], hit[order])
    fitted = np.asarray(isotonic_regression(uy, weights=weight, increasing=True).x, dtype=np.float64)
    np.clip(fitted, 0.0, 1.0, fitted)
    keep = np.ones(len(fitted), dtype=bool)
    keep[1:-1] = (fitted[1:-1] != fitted[:-2]) | (fitted[1:-1] != fitted[2:])
    return ux[keep], fitted[keep]


def fit_isotonic(logits: np.ndarray, labels: np.ndarray, min_probability: float | None = None) -> IsotonicCalibration:
    """Fit one isotonic regression per class on held-out (logits, labels)."""
    z, y = as_fit_data(logits, labels)
    floor = floor_for(min_probability, z.shape[1])
    p = np.ascontiguousarray(softmax(z).T)  # (K, N): one contiguous row per class
    thresholds, values = [], []
    for k in range(len(p)):
        x, v = _isotonic_fit(p[k], (y == k).astype(np.float64))
        thresholds.append(x)
        values.append(v)
    return IsotonicCalibration(
        thresholds=thresholds, values=values, fit_size=len(y), options={"min_probability": floor}
    )
