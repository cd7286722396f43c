"""Dirichlet calibration (Kull et al. 2019): matrix scaling with ODIR on log-probabilities.

q = softmax(W log p + b), with p = softmax(z) computed as log_softmax(z) (float64, never log(0)).
Kull et al. clip probabilities before the log; from logits no clipping is needed. The fit is
`MatrixScaling.fit` on log_softmax(z): the same objective, regularisation, defaults and optimiser.
W = I, b = 0 is the identity (q = p), where the fit starts.

ODIR leaves the diagonal free, so a class that is separable in the fit data can drive its diagonal weight
up without bound (see vector.py); on log-probabilities, which are large and negative, that costs held-out
NLL dearly. On synthetic 100-class data (benchmarks/bench_calibrators.py's generator) with 50 images a
class, the converged fit has a diagonal weight of 146 and a held-out NLL of 4.3 against the raw logits'
2.1 (matrix scaling: 1.38); with 200 a class the diagonal stays in 0.46..0.59 and the NLL is 1.37.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from macs_audit.calibrators.common import log_softmax
from macs_audit.calibrators.matrix import MatrixScaling


@dataclasses.dataclass(frozen=True, kw_only=True)
class DirichletCalibration(MatrixScaling):
    """A fitted Dirichlet calibration: matrix scaling applied to log_softmax(z) instead of z."""

    method: str = "dirichlet"

    @staticmethod
    def features(logits: np.ndarray) -> np.ndarray:
        return log_softmax(logits)


fit_dirichlet = DirichletCalibration.fit  # Dirichlet calibration with ODIR on held-out (logits, labels)
