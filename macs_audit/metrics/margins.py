"""The logit margin, one definition for the metrics, the sensitivity estimate and the MaCS loss."""

from __future__ import annotations

from typing import Any

import numpy as np


def logit_margin(logits: Any, labels: Any) -> Any:
    """gamma_i = z_i[y_i] - max_{j != y_i} z_i[j] on raw logits.

    numpy in: float64 margins. torch in: a tensor in the logits' dtype, differentiable (the gradient
    reaches z[y] and the largest other logit)."""
    if type(logits).__module__.startswith("torch"):
        true = logits.gather(1, labels[:, None])[:, 0]
        others = logits.scatter(1, labels[:, None], float("-inf"))
        return true - others.max(dim=1).values
    others = np.array(logits, dtype=np.float64)  # one float64 copy, its true-class entries then set to -inf
    rows = np.arange(len(labels))
    true = others[rows, labels]
    others[rows, labels] = -np.inf
    return true - others.max(axis=1)
