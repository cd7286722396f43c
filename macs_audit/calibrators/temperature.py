"""Temperature scaling (Guo et al. 2017): one scalar T > 0 that minimises NLL on held-out logits.

`optimal_temperature` finds T (the audit, fine-tuning and vector scaling's start use it alone);
`fit_temperature` fits it as the registry's calibrator, a `TemperatureScaling` (calibrators/base.py).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from macs_audit.calibrators.common import as_fit_data, as_logits, describe_fit, log_softmax
from macs_audit.errors import InputError
from macs_audit.metrics.conventions import softmax_with_log

LOG_T_BOUND = 5.0  # T in [e^-5, e^5] = [0.007, 148]
MAX_STEPS = 100
TOLERANCE = 1e-10  # change of log T at which the search stops
BLOCK_VALUES = 1 << 18  # logits per block of rows (2 MiB of float64)


def temperature_nll(logits: np.ndarray, labels: np.ndarray, temperature: float) -> float:
    _, log_p = softmax_with_log(np.asarray(logits, dtype=np.float64) / temperature)
    return float(-log_p[np.arange(len(labels)), labels].mean())


def _slope_and_curvature(z: np.ndarray, z_true: np.ndarray, beta: float) -> tuple[float, float]:
    """First and second derivative in beta = 1/T of the mean NLL of softmax(beta z): mean(E_p[z] - z_y) and
    mean(Var_p[z]), where p = softmax(beta z) (the NLL is convex in beta). Rows go in blocks that stay in
    the CPU cache: the passes over each block then cost far less than over the whole array."""
    slope = spread = 0.0
    rows = max(1, BLOCK_VALUES // z.shape[1])
    for start in range(0, len(z), rows):
        block = z[start : start + rows]
        p = beta * block
        p -= p.max(axis=1, keepdims=True)
        np.exp(p, out=p)
        p /= p.sum(axis=1, keepdims=True)
        weighted = p * block
        mean_z = weighted.sum(axis=1)
        slope += float((mean_z - z_true[start : start + rows]).sum())
        spread += float(np.maximum((weighted * block).sum(axis=1) - mean_z**2, 0.0).sum())
    return slope / len(z), spread / len(z)


def optimal_temperature(logits: np.ndarray, labels: np.ndarray) -> float:
    """Return the T minimising NLL(logits / T) over T in [0.007, 148].

    The NLL is convex in beta = 1/T, so its minimum is bracketed by the sign of the slope; Newton's method
    runs on u = log beta = -log T (steps of the right scale whether T is 0.1 or 10), kept inside the
    bracket (bisected where a step leaves it or the curvature in u is not positive), and stops in a few
    passes over the logits. Where a step heads past an end of the range and the slope there agrees, the
    minimum is that end. Logits constant in every row leave the NLL flat: T = 1."""
    if len(labels) == 0:
        raise InputError("temperature scaling needs at least one held-out sample")
    z = np.asarray(logits, dtype=np.float64)
    labels = np.asarray(labels, dtype=np.int64)
    z_true = z[np.arange(len(labels)), labels]
    low, high = -LOG_T_BOUND, LOG_T_BOUND  # the bracket of the minimum in u = log beta
    u = 0.0
    slope, curvature = _slope_and_curvature(z, z_true, 1.0)
    if curvature == 0:
        return 1.0
    for _ in range(MAX_STEPS):
        if slope > 0:
            high = u
        else:
            low = u
        beta = math.exp(u)
        du, ddu = beta * slope, beta * beta * curvature + beta * slope  # derivatives in u
        newton = u - du / ddu if ddu > 0 else math.nan
        if slope == 0 or abs(newton - u) <= TOLERANCE:  # converged (a step within rounding of the bracket's end)
            break
        if newton <= low == -LOG_T_BOUND and _slope_and_curvature(z, z_true, math.exp(low))[0] >= 0:
            return math.exp(LOG_T_BOUND)
        if newton >= high == LOG_T_BOUND and _slope_and_curvature(z, z_true, math.exp(high))[0] <= 0:
            return math.exp(-LOG_T_BOUND)
        u = newton if low < newton < high else 0.5 * (low + high)
        slope, curvature = _slope_and_curvature(z, z_true, math.exp(u))
    return float(math.exp(-u))


@dataclasses.dataclass(frozen=True)
class TemperatureScaling:
    """Temperature scaling as a Calibrator: log_softmax(z / temperature)."""

    temperature: float
    n_classes: int
    fit_size: int
    method: str = "temperature"

    @property
    def n_parameters(self) -> int:
        return 1

    def transform(self, logits: np.ndarray) -> np.ndarray:
        return log_softmax(as_logits(logits, self.n_classes) / self.temperature)

    def describe(self) -> dict[str, Any]:
        return describe_fit(
            self.method, self.n_classes, self.fit_size, self.n_parameters, {"temperature": self.temperature}
        )


def fit_temperature(logits: np.ndarray, labels: np.ndarray) -> TemperatureScaling:
    """Fit temperature scaling: T = `optimal_temperature` (in [0.007, 148])."""
    z, y = as_fit_data(logits, labels)
    return TemperatureScaling(temperature=optimal_temperature(z, y), n_classes=z.shape[1], fit_size=len(y))
