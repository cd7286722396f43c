"""What the calibrators share: input checks, the softmax NLL and its gradient, L-BFGS; the softmax and
log-softmax are the metrics' (metrics/conventions.py), named here for the calibrators.

Everything is float64 numpy. Nothing here prints; bad inputs raise `InputError` with a one-line message.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np

from macs_audit.errors import InputError, UsageError
from macs_audit.metrics.conventions import log_softmax as log_softmax
from macs_audit.metrics.conventions import softmax as softmax


def as_logits(logits: np.ndarray, n_classes: int | None = None) -> np.ndarray:
    """`logits` as a finite float64 (N, K) array with K >= 2 (and K == `n_classes` when given)."""
    z = np.asarray(logits, dtype=np.float64)
    if z.ndim != 2:
        raise InputError(f"calibrators take logits of shape (samples, classes), got shape {z.shape}")
    if z.shape[1] < 2:
        raise InputError(f"calibrators need at least 2 classes, got logits of shape {z.shape}")
    if n_classes is not None and z.shape[1] != n_classes:
        raise InputError(f"this calibrator was fitted on {n_classes} classes, got logits with {z.shape[1]}")
    if not np.isfinite(z).all():
        raise InputError("logits contain NaN or infinite values; calibrators need finite logits")
    return z


def as_fit_data(logits: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Checked (float64 logits (N, K), int64 labels (N,)) for fitting: N >= 1, labels in [0, K)."""
    z = as_logits(logits)
    y = np.asarray(labels)
    if y.ndim != 1 or len(y) != len(z):
        raise InputError(f"labels of shape {y.shape} do not match logits of shape {z.shape}")
    if len(y) == 0:
        raise InputError("a calibrator needs at least one held-out sample to fit")
    if not np.issubdtype(y.dtype, np.integer):
        raise InputError(f"labels must be integers, got dtype {y.dtype}")
    y = y.astype(np.int64)
    if y.min() < 0 or y.max() >= z.shape[1]:
        raise InputError(f"labels must lie in [0, {z.shape[1]}), got values from {y.min()} to {y.max()}")
    return z, y


def mean_nll(log_probabilities: np.ndarray, labels: np.ndarray) -> float:
    """Mean negative log-likelihood of the labels under row-wise log-probabilities."""
    return float(-log_probabilities[np.arange(len(labels)), labels].mean())


def nll_and_residual(scores: np.ndarray, labels: np.ndarray, n_total: int | None = None) -> tuple[float, np.ndarray]:
    """Summed NLL of softmax(scores) / n_total, and its gradient in the scores, (softmax - one-hot) / n_total.

    `n_total` defaults to len(labels) (the mean NLL); a block of rows passes the whole set's size, so blocks add up.
    Works in place: `scores` (float64, C-contiguous, owned by the caller) is overwritten by the gradient, which is
    returned. Five passes over the array; the caller turns the gradient into its parameters'."""
    n = len(labels) if n_total is None else n_total
    rows = np.arange(len(labels))
    scores -= scores.max(axis=1, keepdims=True)
    picked = scores[rows, labels]  # a copy: fancy indexing
    np.exp(scores, out=scores)
    total = scores.sum(axis=1)
    loss = float(np.sum(np.log(total) - picked)) / n
    scores *= (1.0 / (total * n))[:, None]
    scores[rows, labels] -= 1.0 / n
    return loss, scores


def minimize_lbfgs(
    objective: Callable[[np.ndarray], tuple[float, np.ndarray]],
    x0: np.ndarray,
    max_iter: int,
    tol: float,
) -> tuple[np.ndarray, dict[str, Any]]:
    """Minimise a smooth objective (value, gradient) with scipy's L-BFGS-B; deterministic.

    `tol` is the relative decrease of the objective below which it stops (scipy's `ftol`); the gradient test
    is effectively off (the gradients of a mean NLL over many classes are small without being converged)."""
    from scipy.optimize import minimize

    result = minimize(
        objective,
        np.asarray(x0, dtype=np.float64),
        jac=True,
        method="L-BFGS-B",
        options={"maxiter": max_iter, "ftol": tol, "gtol": 1e-12, "maxcor": 20},
    )
    info = {
        "objective": float(result.fun),
        "converged": bool(result.success),
        "iterations": int(result.nit),
        "evaluations": int(result.nfev),
    }
    return np.asarray(result.x, dtype=np.float64), info


def describe_fit(
    method: str, n_classes: int, fit_size: int, n_parameters: int, parameters: dict[str, Any]
) -> dict[str, Any]:
    """The dictionary every calibrator's `describe()` returns: JSON-ready, for the report and model metadata."""
    return {
        "method": method,
        "n_classes": int(n_classes),
        "fit_size": int(fit_size),
        "n_parameters": int(n_parameters),
        "parameters": parameters,
    }


def renormalise(one_vs_rest: np.ndarray, min_probability: float) -> np.ndarray:
    """Per-class estimates (N, K) raised to at least `min_probability` and divided by their row sums.

    The floor keeps every probability > 0 (a zero would make the log-probability -inf and the NLL infinite)
    and gives a row whose estimates are all 0 a uniform distribution instead of 0 / 0."""
    q = np.maximum(one_vs_rest, min_probability)
    q /= q.sum(axis=1, keepdims=True)
    return q


@dataclasses.dataclass(frozen=True, kw_only=True)
class Fitted:
    """What every calibrator fitted beyond one temperature records beside its own numbers: its method, the fit
    split's size and the options it was fitted with; `describe()` reads them. Keyword-only, so that each method's
    own fields are named where it is built."""

    method: str
    fit_size: int
    options: dict[str, Any]

    @property
    def n_classes(self) -> int:
        raise NotImplementedError

    @property
    def n_parameters(self) -> int:
        raise NotImplementedError

    def parameters(self) -> dict[str, Any]:
        """What `describe()` reports beside the counts: the options, and a method's fit results where it has some."""
        return dict(self.options)

    def describe(self) -> dict[str, Any]:
        return describe_fit(self.method, self.n_classes, self.fit_size, self.n_parameters, self.parameters())


@dataclasses.dataclass(frozen=True, kw_only=True)
class FittedLogits(Fitted):
    """What the maps of the logits fitted by L-BFGS (vector, matrix and Dirichlet) share: per-class intercepts,
    the optimizer's outcome (objective, converged, iterations, evaluations), reported with the options, and the
    log-softmax of their calibrated logits."""

    bias: np.ndarray  # (K,)
    optimizer: dict[str, Any]

    def parameters(self) -> dict[str, Any]:
        return {**self.options, **self.optimizer}

    @property
    def n_classes(self) -> int:
        return len(self.bias)

    def calibrated_logits(self, logits: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def transform(self, logits: np.ndarray) -> np.ndarray:
        """Calibrated log-probabilities (N, K), float64: softmax of them gives the calibrated probabilities."""
        return log_softmax(self.calibrated_logits(logits))


@dataclasses.dataclass(frozen=True, kw_only=True)
class OneVsRest(Fitted):
    """What the one-vs-rest calibrators (histogram binning, isotonic regression) share: each class's estimate
    from that class's softmax column (`one_vs_rest`, theirs), floored by `options["min_probability"]` and
    renormalised."""

    values: Any  # a row of fitted values per class (its bins' or its map's points'), each method's own type

    def one_vs_rest(self, logits: np.ndarray) -> np.ndarray:
        """The per-class estimates (N, K), before the floor and renormalisation."""
        raise NotImplementedError

    @property
    def n_classes(self) -> int:
        return len(self.values)

    def class_columns(self, logits: np.ndarray) -> np.ndarray:
        """softmax(logits) as (K, N), one contiguous row per class."""
        return np.ascontiguousarray(softmax(as_logits(logits, self.n_classes)).T)

    def probabilities(self, logits: np.ndarray) -> np.ndarray:
        return renormalise(self.one_vs_rest(logits), self.options["min_probability"])

    def transform(self, logits: np.ndarray) -> np.ndarray:
        """Calibrated log-probabilities (N, K), float64, finite: softmax of them gives `probabilities`."""
        return np.log(self.probabilities(logits))


FLOOR_MASS = 0.01  # the default floor of the one-vs-rest methods adds at most this much to a row before renormalising


def floor_for(min_probability: float | None, n_classes: int) -> float:
    """The one-vs-rest floor: `min_probability`, or FLOOR_MASS / K by default (1e-3 for 10 classes).

    0 is allowed (no floor, as netcal and scikit-learn) but then a zero estimate gives a -inf log-probability."""
    if min_probability is None:
        return FLOOR_MASS / n_classes
    if not 0.0 <= min_probability < 1.0 / n_classes:
        raise UsageError(f"min_probability must be in [0, 1/{n_classes}), got {min_probability}")
    return float(min_probability)
