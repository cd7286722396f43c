"""Vector scaling (Guo et al. 2017): z -> z * w + b with a scale w_k and an intercept b_k per class.

Fitted by minimising the mean NLL of the held-out labels with L-BFGS (scipy, analytic gradients,
float64), starting from temperature scaling's map (w = 1/T, b = 0). Softmax ignores a constant added to every
intercept, so b is reported centred (mean 0); w is identified.

Unregularised, as in Guo et al.: where a class is (nearly) separable in the fit data, which few images a
class make likely, the likelihood keeps improving as that class's scale grows, and the fit stops on `tol`
or `max_iter` with a large scale that held-out data pays for. `check_fit_size` asks for 2 images a class;
tens a class are better.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from macs_audit.calibrators.common import FittedLogits, as_fit_data, as_logits, minimize_lbfgs, nll_and_residual
from macs_audit.calibrators.temperature import optimal_temperature

MAX_ITER = 500  # L-BFGS iterations at most
TOL = 1e-10  # stop when an iteration lowers the NLL by less than this (relative)


@dataclasses.dataclass(frozen=True, kw_only=True)
class VectorScaling(FittedLogits):
    """A fitted vector scaling: `transform(z)` = log_softmax(z * scale + bias), the bias centred (mean 0). Its
    options: max_iter, tol; its optimizer's objective: the fit NLL."""

    scale: np.ndarray  # (K,)
    method: str = "vector"

    @property
    def n_parameters(self) -> int:
        return 2 * self.n_classes

    def calibrated_logits(self, logits: np.ndarray) -> np.ndarray:
        return as_logits(logits, self.n_classes) * self.scale + self.bias


BLOCK_ROWS = 256  # rows per block: a block's scores stay in cache through the five passes of the softmax


def fit_vector(logits: np.ndarray, labels: np.ndarray, max_iter: int = MAX_ITER, tol: float = TOL) -> VectorScaling:
    """Fit vector scaling on held-out (logits, labels) by maximum likelihood.

    L-BFGS runs on x = x0 + u / sqrt(h), with x0 temperature scaling's map (a few passes; a third fewer iterations
    than from the identity on 1,000 classes) and h the diagonal of the Hessian there (one extra
    pass over the data): the scales and intercepts of all classes then start equally well conditioned, which
    halves the iterations on many classes. The objective goes through the rows in blocks, in a fixed order."""
    z, y = as_fit_data(logits, labels)
    n, k = z.shape
    buffer = np.empty((min(BLOCK_ROWS, n), k))

    def objective(x: np.ndarray, hessian_diagonal: bool = False) -> tuple[float, np.ndarray]:
        w, b = x[:k], x[k:]
        loss, grad = 0.0, np.zeros(2 * k)
        for lo in range(0, n, BLOCK_ROWS):
            zb, yb = z[lo : lo + BLOCK_ROWS], y[lo : lo + BLOCK_ROWS]
            s = buffer[: len(zb)]
            np.multiply(zb, w, out=s)
            np.add(s, b, out=s)
            if hessian_diagonal:  # d2/dw_k2 = mean p_k (1 - p_k) z_k^2, d2/db_k2 = mean p_k (1 - p_k)
                s -= s.max(axis=1, keepdims=True)
                np.exp(s, out=s)
                s /= s.sum(axis=1, keepdims=True)
                s *= 1.0 - s
                grad[:k] += np.einsum("nk,nk,nk->k", s, zb, zb) / n
                grad[k:] += s.sum(axis=0) / n
                continue
            block_loss, residual = nll_and_residual(s, yb, n)
            loss += block_loss
            grad[:k] += np.einsum("nk,nk->k", residual, zb)
            grad[k:] += residual.sum(axis=0)
        return loss, grad

    # Start from temperature scaling (w = 1/T, a few passes): the per-class fit then refines a good map.
    x0 = np.concatenate([np.full(k, 1.0 / optimal_temperature(z, y)), np.zeros(k)])
    step = 1.0 / np.sqrt(np.maximum(objective(x0, hessian_diagonal=True)[1], 1e-12))

    def preconditioned(u: np.ndarray) -> tuple[float, np.ndarray]:
        loss, grad = objective(x0 + u * step)
        return loss, grad * step

    u, info = minimize_lbfgs(preconditioned, np.zeros(2 * k), max_iter, tol)
    x = x0 + u * step
    return VectorScaling(
        scale=x[:k].copy(),
        bias=x[k:] - x[k:].mean(),
        fit_size=n,
        options={"max_iter": max_iter, "tol": tol},
        optimizer=info,
    )
