"""Curve statistics of a score that should rank positives above negatives: AUROC, average precision (AUPR)
and the false-positive rate at a true-positive rate, for one set of samples or many bootstrap resamples at once.

One definition serves misclassification detection (confidence, correct as positive) and out-of-distribution
detection (a score, in-distribution as positive). Ties: thresholds sit only between distinct scores, so a
group of tied scores enters the curves as a whole: a tied positive-negative pair counts half in the AUROC
(the Mann-Whitney convention, as scikit-learn's `roc_auc_score`'s trapezoids); average precision is
scikit-learn's `average_precision_score` (sum over thresholds of the recall step times the precision, no
interpolation); the FPR at a TPR is taken at the first threshold whose TPR reaches it (torch-uncertainty's
tie-aware FPRx).

Each statistic is a sum over one class's samples of cumulative draws of the other (or the same) class, read at
the sample's rank: AUROC sums, over negatives, the positives ranked above (half the tied ones); AUPR sums, over
positives, the precision at the sample's threshold. So a resample is a vector of draw counts per sample, and
many resamples are one cumulative sum and a few gathers (`counts`; computed in float32 there, which holds the
counts exactly and the statistics to about 1e-7).
"""

from __future__ import annotations

import dataclasses

import numpy as np


@dataclasses.dataclass(frozen=True)
class Ranking:
    """Where every sample ranks among the positives and the negatives of one score (computed once, then used
    for any number of resamples)."""

    order_p: np.ndarray  # the positives in descending score order (ties in input order)
    order_n: np.ndarray
    above: np.ndarray  # per negative (in that order): positives scored strictly higher
    at_or_above: np.ndarray  # ... and the tied ones too
    own_group: np.ndarray  # per positive: positives down to its threshold (its tie group included)
    negatives_in: np.ndarray  # ... and negatives down to it

    @classmethod
    def of(cls, scores: np.ndarray, positive: np.ndarray) -> Ranking:
        scores = np.asarray(scores, dtype=np.float64)
        positive = np.asarray(positive, dtype=bool)
        order_p = np.argsort(-scores[positive], kind="stable")
        order_n = np.argsort(-scores[~positive], kind="stable")
        sp, sn = -scores[positive][order_p], -scores[~positive][order_n]  # ascending: rank order
        return cls(
            order_p,
            order_n,
            np.searchsorted(sp, sn, side="left"),
            np.searchsorted(sp, sn, side="right"),
            np.searchsorted(sp, sp, side="right"),
            np.searchsorted(sn, sp, side="right"),
        )

    def statistics(
        self, tpr_level: float = 0.95, counts: tuple[np.ndarray, np.ndarray] | None = None
    ) -> dict[str, np.ndarray]:
        """See curve_statistics."""
        if counts is None:
            cp, cn, dtype = np.ones((1, len(self.order_p))), np.ones((1, len(self.order_n))), np.float64
        else:
            cp, cn, dtype = counts[0][:, self.order_p], counts[1][:, self.order_n], np.float32
        cum_p, cum_n = _cumulative(cp, dtype), _cumulative(cn, dtype)
        n_pos, n_neg = cum_p[:, -1], cum_n[:, -1]
        # At each positive's threshold; without ties among the positives that is the positive itself (no gather).
        untied = len(self.own_group) and self.own_group[-1] == len(self.own_group) and _distinct(self.own_group)
        tp = cum_p[:, 1:] if untied else cum_p[:, self.own_group]
        fp = cum_n[:, self.negatives_in]
        if np.array_equal(self.above, self.at_or_above):  # no positive tied with a negative
            pairs = 2 * np.einsum("ij,ij->i", cn, cum_p[:, self.above])
        else:
            pairs = np.einsum("ij,ij->i", cn, cum_p[:, self.above] + cum_p[:, self.at_or_above])  # x 2: ties half
        precision_sum = np.einsum("ij,ij->i", cp, tp / np.maximum(tp + fp, 1))  # tp + fp is 0 only where cp is
        rows = np.arange(len(cp))
        with np.errstate(invalid="ignore", divide="ignore"):
            auroc = pairs / (2 * n_pos.astype(np.float64) * n_neg)
            aupr = precision_sum / n_pos
            if len(self.order_p):
                first = np.argmax(tp >= (tpr_level - 1e-12) * n_pos[:, None], axis=1)  # first threshold at the TPR
                fpr_at = fp[rows, first] / n_neg
            else:
                fpr_at = np.full(len(cp), np.nan)
        undefined = (n_pos == 0) | (n_neg == 0)
        out = {"auroc": auroc, "aupr": aupr, "fpr_at_tpr": fpr_at}
        for values in out.values():
            values[undefined] = np.nan
        return {key: values.astype(np.float64) for key, values in out.items()}


def curve_statistics(
    scores: np.ndarray,
    positive: np.ndarray,
    tpr_level: float = 0.95,
    counts: tuple[np.ndarray, np.ndarray] | None = None,
) -> dict[str, np.ndarray]:
    """AUROC, AUPR (average precision with `positive` as the positive class) and FPR at `tpr_level` TPR.

    `counts` = (positive draws (R, P), negative draws (R, Q)), each row in the order the positives (negatives)
    appear in `scores`; None: every sample once. Returns arrays of one value per resample (one without
    `counts`); a resample with no positive or no negative sample gives NaN."""
    return Ranking.of(scores, positive).statistics(tpr_level, counts)


def _cumulative(draws: np.ndarray, dtype: type) -> np.ndarray:
    """Per row, the draws of the first k samples for k = 0..n (a leading 0)."""
    out = np.zeros((len(draws), draws.shape[1] + 1), dtype=dtype)
    out[:, 1:] = np.cumsum(draws, axis=1, dtype=np.int64 if dtype is np.float64 else np.int32)  # counts: exact
    return out


def _distinct(own_group: np.ndarray) -> bool:
    """Whether every positive is its own tie group (own_group is then 1, 2, ..., P)."""
    return bool((np.diff(own_group) == 1).all())


def auroc(scores: np.ndarray, positive: np.ndarray) -> float | None:
    """Area under the ROC curve of `scores` for `positive` against the rest; None without both classes."""
    value = float(curve_statistics(scores, positive)["auroc"][0])
    return None if np.isnan(value) else value
