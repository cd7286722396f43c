"""Matrix scaling with ODIR (Kull et al. 2019): z -> W z + b, a full K x K matrix and K intercepts.

Fitted by minimising, with L-BFGS (scipy, analytic gradients, float64) from the identity (W = I, b = 0),

    mean NLL + lambda_od * mean over i != j of W_ij^2 + mu * mean over k of b_k^2

Off-diagonal and intercept regularisation (ODIR) pulls the map toward a per-class rescaling without
shrinking the diagonal, which carries the confidence. Dirichlet calibration (`dirichlet.py`) is the same fit
on log-probabilities instead of logits: `MatrixScaling.fit` fits the map on `features(logits)`.

Each step costs two (N, K) x (K, K) products: cheap for tens or hundreds of classes, minutes for a
thousand (1,001,000 parameters), where `check_fit_size` also wants a very large calibration split.
"""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

import numpy as np

from macs_audit.calibrators.common import FittedLogits, as_fit_data, as_logits, minimize_lbfgs, nll_and_residual
from macs_audit.errors import UsageError

# Default ODIR strengths. Kull et al. choose them by cross-validation per model and data set, from a grid
# 1e-4..5e3 (their picks for matrix scaling: 0.1 to 250 on CIFAR-10, 0.25 to 2.5 on CIFAR-100). Without
# cross-validation the default errs on the strong side, near vector scaling plus small off-diagonal terms:
# on synthetic 100-class data with 50 images a class, lambda_od <= 100 overfits (held-out NLL above vector
# scaling's, even above the raw logits' at 10) and 1000 does not; on the sample CIFAR-10 model with 1,000
# images, 100 to 1000 do best. mu = 0 lets the intercepts fit noise; from 1 up it changes little.
LAMBDA_OD = 1000.0
MU = 1.0
MAX_ITER = 500  # L-BFGS iterations at most
TOL = 1e-10  # stop when an iteration lowers the objective by less than this (relative)


def odir_penalty(weights: np.ndarray, bias: np.ndarray, lambda_od: float, mu: float) -> float:
    """lambda_od * mean of the squared off-diagonal entries + mu * mean of the squared intercepts."""
    k = len(bias)
    off_diagonal = float(np.sum(weights**2) - np.sum(np.diag(weights) ** 2))
    return lambda_od * off_diagonal / (k * (k - 1)) + mu * float(np.sum(bias**2)) / k


def _fit_affine(
    features: np.ndarray, labels: np.ndarray, lambda_od: float, mu: float, max_iter: int, tol: float
) -> tuple[np.ndarray, dict[str, Any]]:
    """(W and b as one vector, the optimizer's outcome): softmax(W x + b) fitted to the labels with ODIR, from the
    identity; `features` (N, K) float64 and `labels` already checked."""
    n, k = features.shape
    off = 1.0 - np.eye(k)
    scores = np.empty((n, k))

    def objective(x: np.ndarray) -> tuple[float, np.ndarray]:
        w, b = x[: k * k].reshape(k, k), x[k * k :]
        np.matmul(features, w.T, out=scores)
        np.add(scores, b, out=scores)
        loss, residual = nll_and_residual(scores, labels)
        grad_w = residual.T @ features
        grad_b = residual.sum(axis=0)
        loss += odir_penalty(w, b, lambda_od, mu)
        grad_w += (2.0 * lambda_od / (k * (k - 1))) * (w * off)
        grad_b += (2.0 * mu / k) * b
        return loss, np.concatenate([grad_w.ravel(), grad_b])

    x0 = np.concatenate([np.eye(k).ravel(), np.zeros(k)])
    return minimize_lbfgs(objective, x0, max_iter, tol)


Fitted = TypeVar("Fitted", bound="MatrixScaling")


@dataclasses.dataclass(frozen=True, kw_only=True)
class MatrixScaling(FittedLogits):
    """A fitted matrix scaling: `transform(z)` = log_softmax(z @ weights.T + bias). Its options: lambda_od, mu,
    max_iter, tol; its optimizer's objective: the fit NLL plus the penalty."""

    weights: np.ndarray  # (K, K)
    method: str = "matrix"

    @property
    def n_parameters(self) -> int:
        return self.n_classes * (self.n_classes + 1)

    @staticmethod
    def features(logits: np.ndarray) -> np.ndarray:
        """What the affine map acts on: the logits themselves (Dirichlet calibration: their log-softmax)."""
        return logits

    def calibrated_logits(self, logits: np.ndarray) -> np.ndarray:
        return self.features(as_logits(logits, self.n_classes)) @ self.weights.T + self.bias

    @classmethod
    def fit(
        cls: type[Fitted],
        logits: np.ndarray,
        labels: np.ndarray,
        lambda_od: float = LAMBDA_OD,
        mu: float = MU,
        max_iter: int = MAX_ITER,
        tol: float = TOL,
    ) -> Fitted:
        """Fit softmax(W x + b), x = `features(logits)`, to held-out (logits, labels) with ODIR, from the identity."""
        z, y = as_fit_data(logits, labels)
        if lambda_od < 0 or mu < 0:
            raise UsageError(f"ODIR strengths must be >= 0, got lambda_od={lambda_od}, mu={mu}")
        k = z.shape[1]
        x, optimizer = _fit_affine(cls.features(z), y, lambda_od, mu, max_iter, tol)
        return cls(
            weights=x[: k * k].reshape(k, k).copy(),
            bias=x[k * k :].copy(),
            fit_size=len(y),
            options={"lambda_od": lambda_od, "mu": mu, "max_iter": max_iter, "tol": tol},
            optimizer=optimizer,
        )


fit_matrix = MatrixScaling.fit  # matrix scaling with ODIR on held-out (logits, labels)
