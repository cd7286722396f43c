"""The RMS calibration error as the natural-shift papers' code computes it (Hendrycks et al., ImageNet-A
"Natural Adversarial Examples" and ImageNet-R "The Many Faces of Robustness"; AugMix), so that a number in a
report can be set beside a published one.

Their rule, which is not the L2 ECE's (metrics/l2_ece.py):

- the samples are sorted by confidence and cut into bins of 100 (`BIN_SIZE`) in that order; the last bin
  takes the remainder (100 to 199 samples);
- that last bin, the most confident one, is left out of the sum (their loop runs over all bins but the last);
- each scored bin weighs n_b / N with N counting every sample, the left-out bin's too, so the weights sum
  to less than 1;
- error = sqrt(sum_b (n_b / N) (mean confidence_b - accuracy_b)^2).

The L2 ECE uses 15 equal-mass bins (their size grows with N), scores every bin, and its weights sum to 1.
With fewer than 2 x BIN_SIZE samples their rule scores no bin (their code fails below 100): None here.
Ties in confidence are ordered as the equal-mass bins order them (metrics/estimators.py, `sorted_order`: by
correctness), which their unstable sort leaves open. Every view's metrics hold it (accumulators), and its
bootstrap interval comes from the same prefix sums as the equal-mass estimators' (`rms_of_prefix`).
"""

from __future__ import annotations

import numpy as np

from macs_audit.metrics.estimators import SortedPrefix

BIN_SIZE = 100
CONVENTION = (
    "sqrt of sum_b (n_b/N) (conf_b - acc_b)^2 over bins of 100 samples in confidence order, the last bin "
    "(100-199 of the most confident) left out and N counting all samples: the ImageNet-A/R and AugMix code's "
    "rule (not the L2 ECE's 15 equal-mass bins); none below 200 samples"
)


def rms_of_prefix(prefix: SortedPrefix, bin_size: int = BIN_SIZE) -> np.ndarray | None:
    """The error of each row of `prefix` (a resample's draw counts, or every sample once), None below two bins."""
    bins = prefix.total // bin_size
    if bins < 2:
        return None
    # The bounds of the scored bins (every bin but the last, each exactly bin_size samples) in sorted order.
    conf, hit = prefix.sums(np.arange(bins, dtype=np.int64) * bin_size)
    gap = (np.diff(conf, axis=1) - np.diff(hit, axis=1)) / bin_size
    return np.sqrt((bin_size / prefix.total * gap**2).sum(axis=1))


def rms_calibration_error(confidence: np.ndarray, correct: np.ndarray, bin_size: int = BIN_SIZE) -> float | None:
    """The shift papers' RMS calibration error of top-1 `confidence` and `correct` (module docstring)."""
    rms = rms_of_prefix(SortedPrefix(confidence, correct), bin_size)
    return None if rms is None else float(rms[0])
