"""L2 ECE over equal-mass bins, plug-in and debiased (Kumar, Liang and Ma, 2019): the debiased form
subtracts each bin's sampling variance acc_b (1 - acc_b) / (n_b - 1) from its squared gap before the
square root, which removes the upward bias of the plug-in estimate. The bins are the equal-mass groups of
metrics/estimators.py (`group_sums`).
"""

from __future__ import annotations

import numpy as np

from macs_audit.metrics.conventions import N_BINS
from macs_audit.metrics.estimators import SortedPrefix, group_sums


def l2_of_groups(count: np.ndarray, conf_sum: np.ndarray, hit_sum: np.ndarray, debiased: bool) -> np.ndarray:
    """sqrt(sum_b (n_b / N) (acc_b - conf_b)^2) per row; debiased: each bin's squared gap less
    acc_b (1 - acc_b) / (n_b - 1) (bins of one sample contribute nothing), the sum clipped at 0."""
    acc, mean_conf = hit_sum / count, conf_sum / count
    squared = (acc - mean_conf) ** 2
    if debiased:
        with np.errstate(divide="ignore", invalid="ignore"):
            variance = np.where(count > 1, acc * (1 - acc) / (count - 1), 0.0)
        squared = np.where(count > 1, squared - variance, 0.0)
    return np.sqrt(np.maximum(0.0, (count / count.sum() * squared).sum(axis=-1)))


def l2_ece(confidence: np.ndarray, correct: np.ndarray, n_bins: int = N_BINS, debiased: bool = True) -> float:
    """The L2 ECE over `n_bins` equal-mass bins (`l2_of_groups`), plug-in or debiased."""
    n = len(confidence)
    if n == 0:
        return float("nan")
    count, conf_sum, hit_sum = group_sums(SortedPrefix(confidence, correct), min(n_bins, n))
    return float(l2_of_groups(count, conf_sum, hit_sum, debiased)[0])
