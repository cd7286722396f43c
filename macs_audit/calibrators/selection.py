"""Fit several post-hoc calibrators on one split, score each on another, and pick one by a chosen metric.

What `calibrate --method all` writes and the audit's `calibrators` section shows: one row per method
with its held-out accuracy, NLL, ECE, smooth ECE and Brier (accuracy too, because the maps that are not
monotone in the logits, vector/matrix/Dirichlet/isotonic/histogram, can change predictions), beside the
uncalibrated model's row. A method the fit split is too small for is not fitted; its row says why.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import numpy as np

from macs_audit.calibrators.base import LABELS, METHODS, Calibrator, check_fit_size, fit_calibrator
from macs_audit.calibrators.common import as_fit_data
from macs_audit.errors import UsageError
from macs_audit.metrics.accumulators import calibration_metrics
from macs_audit.metrics.registry import METRICS

UNCALIBRATED = "uncalibrated"
SCORES = ("accuracy", "nll", "ece", "smooth_ece", "brier")  # the table's columns; each can be `select`
DEFAULT_SELECT = "nll"


@dataclasses.dataclass
class Trial:
    """One method's row: held-out scores, or why it was not fitted."""

    method: str
    scores: dict[str, float] | None = None
    n_parameters: int | None = None
    fit_seconds: float | None = None
    refused: str | None = None  # the fit-size check's message
    calibrator: Calibrator | None = dataclasses.field(default=None, repr=False)

    def to_dict(self) -> dict[str, Any]:
        row: dict[str, Any] = {"method": self.method, "label": LABELS.get(self.method, self.method)}
        if self.refused:
            row["refused"] = self.refused
        else:
            row.update(scores=self.scores, n_parameters=self.n_parameters)
        return row


@dataclasses.dataclass
class Selection:
    trials: list[Trial]  # the uncalibrated row first, then the methods in the order asked
    select: str
    selected: str  # the best fitted method by `select` (ties: the simpler method, earlier in METHODS)
    n_fit: int
    n_eval: int

    @property
    def best(self) -> Trial:
        return next(t for t in self.trials if t.method == self.selected)

    def to_dict(self) -> dict[str, Any]:
        return {
            "select": self.select,
            "selected": self.selected,
            "n_fit": self.n_fit,
            "n_eval": self.n_eval,
            "methods": [t.to_dict() for t in self.trials],
        }


def parse_methods(text: str) -> list[str]:
    """'all' or a comma-separated list of METHODS, in METHODS order; UsageError names the choices."""
    names = list(METHODS) if text.strip() == "all" else [m.strip() for m in text.split(",") if m.strip()]
    unknown = [m for m in names if m not in METHODS]
    if unknown or not names:
        raise UsageError(
            f"unknown calibration method {', '.join(unknown) or repr(text)}; choose all or any of {', '.join(METHODS)}"
        )
    return [m for m in METHODS if m in names]


def check_select(select: str) -> str:
    if select not in SCORES:
        raise UsageError(f"--select {select!r} is not a score of the table; choose one of {', '.join(SCORES)}")
    return select


def scores_of(log_probabilities: np.ndarray, labels: np.ndarray) -> dict[str, float]:
    metrics = calibration_metrics(log_probabilities, labels, log_probabilities.shape[1])
    return {name: float(metrics[name]) for name in SCORES}


def compare_calibrators(
    fit_logits: np.ndarray,
    fit_labels: np.ndarray,
    eval_logits: np.ndarray,
    eval_labels: np.ndarray,
    methods: list[str] | tuple[str, ...] = METHODS,
    select: str = DEFAULT_SELECT,
) -> Selection:
    """Fit each of `methods` on (fit_logits, fit_labels), score it on (eval_logits, eval_labels) and select
    the best by `select`. UsageError when none of them can be fitted on a split of this size."""
    check_select(select)
    z_fit, y_fit = as_fit_data(fit_logits, fit_labels)
    z_eval, y_eval = as_fit_data(eval_logits, eval_labels)
    trials = [Trial(UNCALIBRATED, scores=scores_of(z_eval, y_eval), n_parameters=0)]
    for method in methods:
        try:
            check_fit_size(method, len(y_fit), z_fit.shape[1])
        except UsageError as exc:
            trials.append(Trial(method, refused=str(exc)))
            continue
        start = time.perf_counter()
        calibrator = fit_calibrator(method, z_fit, y_fit)
        seconds = time.perf_counter() - start
        scores = scores_of(calibrator.transform(z_eval), y_eval)
        trials.append(Trial(method, scores, calibrator.n_parameters, seconds, calibrator=calibrator))
    fitted = [t for t in trials if t.calibrator is not None]
    if not fitted:
        raise UsageError(f"no calibration method can be fitted on {len(y_fit):,} images: {trials[-1].refused}")
    sign = -1.0 if METRICS[select].higher_is_better else 1.0
    best = min(fitted, key=lambda t: sign * t.scores[select])  # type: ignore[index]  # min: the first of ties
    return Selection(trials, select, best.method, len(y_fit), len(y_eval))
