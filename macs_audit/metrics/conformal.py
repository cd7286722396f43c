"""Split conformal prediction sets: fitted on a labelled calibration part, they hold the true class with
probability at least the target coverage 1 - alpha on exchangeable data (Vovk et al. 2005; Angelopoulos and
Bates 2021, "A Gentle Introduction to Conformal Prediction").

Scores (higher: the class fits worse), from the softmax p of the logits in float64:

- LAC (least ambiguous set-valued classifier, Sadinle et al. 2019): s(x, y) = 1 - p_y; the set holds every
  class j with 1 - p_j <= q.
- APS (adaptive prediction sets, Romano et al. 2020), not randomised: classes ranked by p descending (equal
  probabilities by class index), s(x, y) = the mass of y and every class ranked above it; the set holds every
  class j with s(x, j) <= q (TorchCP's APS(randomized=False)). With no randomisation the result is
  deterministic and needs no seed. A set can be empty (when the top class alone has more mass than q); the
  variant that also adds the class crossing q (Angelopoulos and Bates, section 2.1) never is, but over-covers
  by several points, which would hide the shortfall under shift that the audit is meant to show.

Both sets are the exact inversion of their score, {j : s(x, j) <= q}, so the guarantee below holds for each.

The threshold q is the ceil((n + 1)(1 - alpha))-th smallest of the n calibration scores (the finite-sample
quantile ceil((n + 1)(1 - alpha)) / n); when that rank exceeds n, q is infinite and every set holds every class.
On exchangeable data the coverage then lies in [1 - alpha, 1 - alpha + 1 / (n + 1)] on average over draws of the
calibration part (the upper end needs scores without ties).

On the scored part (data the thresholds were not fitted on): the empirical coverage (fraction of sets holding
the true class), the mean set size, and the lowest coverage among the classes (the worst class: coverage is
promised on average, not per class).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from macs_audit.errors import InputError, UsageError
from macs_audit.metrics.conventions import softmax64

METHODS = ("lac", "aps")
DEFAULT_COVERAGE = 0.9
CONVENTION = (
    "split conformal on the calibration split (softmax of the raw logits): LAC s = 1 - p_y; APS (not randomised) "
    "s = mass of the classes ranked at or above y (ties by class index); sets = {j : s(x, j) <= threshold}; "
    "threshold = the ceil((n+1)(1-alpha))-th smallest calibration score (every class when above n); "
    "coverage, mean set size and the lowest per-class coverage on the held-out part"
)


def check_coverage(coverage: float) -> float:
    if not 0 < coverage < 1:
        raise UsageError(f"--coverage must lie strictly between 0 and 1, got {coverage:g}")
    return coverage


def class_scores(probabilities: np.ndarray, method: str) -> np.ndarray:
    """The score s(x, j) of every class j (N, K) under `method`."""
    p = np.asarray(probabilities, dtype=np.float64)
    if method == "lac":
        return 1.0 - p
    if method == "aps":
        order = np.argsort(-p, axis=1, kind="stable")
        ranked = np.take_along_axis(p, order, axis=1)
        out = np.empty_like(p)
        np.put_along_axis(out, order, np.cumsum(ranked, axis=1), axis=1)
        return out
    raise UsageError(f"unknown conformal method {method!r}; choose from {', '.join(METHODS)}")


def true_class_scores(probabilities: np.ndarray, labels: np.ndarray, method: str) -> np.ndarray:
    scores = class_scores(probabilities, method)
    return scores[np.arange(len(labels)), np.asarray(labels, dtype=np.int64)]


def conformal_threshold(scores: np.ndarray, coverage: float) -> float:
    """The ceil((n + 1) coverage)-th smallest score; infinity when that exceeds n."""
    n = len(scores)
    if n == 0:
        raise InputError("conformal prediction needs at least one calibration sample")
    rank = math.ceil(round((n + 1) * coverage, 9))  # round: (n + 1) x 0.9 must not become rank + 1 by rounding
    return float(np.sort(scores)[rank - 1]) if rank <= n else math.inf


def prediction_sets(probabilities: np.ndarray, threshold: float, method: str) -> np.ndarray:
    """Boolean (N, K): which classes each input's set holds."""
    return class_scores(probabilities, method) <= threshold


def set_statistics(sets: np.ndarray, labels: np.ndarray) -> dict[str, float | int]:
    """Coverage, mean set size, and the worst class's coverage (over the classes present) and index."""
    labels = np.asarray(labels, dtype=np.int64)
    covered = sets[np.arange(len(labels)), labels]
    present, of_class = np.unique(labels, return_inverse=True)
    per_class = np.bincount(of_class, weights=covered) / np.bincount(of_class)  # one pass, not one per class
    worst = int(np.argmin(per_class))
    return {
        "coverage": float(covered.mean()),
        "mean_set_size": float(sets.sum(axis=1).mean()),
        "worst_class_coverage": float(per_class[worst]),
        "worst_class": int(present[worst]),
    }


def fit_thresholds(logits: np.ndarray, labels: np.ndarray, coverage: float = DEFAULT_COVERAGE) -> dict[str, float]:
    """Each method's threshold from calibration logits and labels."""
    p, _ = softmax64(logits)
    return {m: conformal_threshold(true_class_scores(p, labels, m), check_coverage(coverage)) for m in METHODS}


def evaluate_sets(logits: np.ndarray, labels: np.ndarray, thresholds: dict[str, float]) -> dict[str, dict]:
    """Each method's set statistics on the scored part's logits and labels (not the calibration part's)."""
    if len(labels) == 0:
        raise InputError("conformal prediction needs at least one held-out sample")
    p, _ = softmax64(logits)
    return {m: set_statistics(prediction_sets(p, q, m), labels) for m, q in thresholds.items()}


@dataclasses.dataclass
class SplitConformal:
    """Thresholds fitted on the `fit` positions of a data set, scored on its `scored` positions; `evaluate`
    scores any view of the same data set (a corruption keeps every image's position)."""

    coverage: float
    thresholds: dict[str, float]
    scored: np.ndarray  # positions
    labels: np.ndarray  # the scored positions' labels

    @classmethod
    def fit(
        cls, logits: np.ndarray, labels: np.ndarray, *, fit: np.ndarray, scored: np.ndarray, coverage: float
    ) -> SplitConformal:
        return cls(coverage, fit_thresholds(logits[fit], labels[fit], coverage), scored, labels[scored])

    def evaluate(self, logits: np.ndarray) -> dict[str, dict]:
        """Each method's statistics on the scored positions of `logits` (all positions of the data set)."""
        return evaluate_sets(logits[self.scored], self.labels, self.thresholds)


def summarize_views(per_view: dict[str, dict[str, dict]]) -> dict[str, dict]:
    """Per method, over views: the mean coverage and set size, and the lowest coverage with its view."""
    out = {}
    for method in METHODS:
        coverage = {view: stats[method]["coverage"] for view, stats in per_view.items()}
        lowest = min(coverage, key=coverage.__getitem__)
        out[method] = {
            "coverage": float(np.mean(list(coverage.values()))),
            "mean_set_size": float(np.mean([stats[method]["mean_set_size"] for stats in per_view.values()])),
            "lowest_coverage": coverage[lowest],
            "lowest_view": lowest,
        }
    return out
