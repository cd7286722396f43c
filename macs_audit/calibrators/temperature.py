"""Temperature scaling (Guo et al. 2017): one scalar T > 0 that minimises NLL on held-out logits."""

import numpy as np

from macs_audit.errors import InputError
from macs_audit.metrics.accumulators import softmax64


def temperature_nll(logits: np.ndarray, labels: np.ndarray, temperature: float) -> float:
    _, log_p = softmax64(np.asarray(logits, dtype=np.float64) / temperature)
    return float(-log_p[np.arange(len(labels)), labels].mean())


def fit_temperature(logits: np.ndarray, labels: np.ndarray) -> float:
    """Return the T minimising NLL(logits / T); searched over log T in [-5, 5] (T in [0.007, 148])."""
    from scipy.optimize import minimize_scalar

    if len(labels) == 0:
        raise InputError("temperature scaling needs at least one held-out sample")
    z = np.asarray(logits, dtype=np.float64)
    labels = np.asarray(labels, dtype=np.int64)
    result = minimize_scalar(
        lambda log_t: temperature_nll(z, labels, np.exp(log_t)),
        bounds=(-5.0, 5.0),
        method="bounded",
        options={"xatol": 1e-6},
    )
    return float(np.exp(result.x))
