"""Is the data a calibration map was fitted on honest? The one decision `calibrate` and `finetune` make.

A map fitted on images the model was trained on learns the model's confidence where it is right (memorised
images), so it sharpens a model that is overconfident everywhere else: a temperature below 1 that makes the
evaluation data's ECE worse. Two signs give it away, whatever the data is called:

- the model is more accurate on the fit data than on the evaluation data by more than ACCURACY_GAP and beyond
  the sampling noise of both accuracies (`accuracy_gap`: a one-sided two-proportion z-test at level
  GAP_LEVEL on the two data sets' sizes). A held-out split of the same distribution differs by its noise
  only: a point or two on a few thousand images, about 9 points on 30;
- the fitted temperature is below 1 (it sharpens) while the model is overconfident on the evaluation data
  (its mean confidence above its accuracy by more than OVERCONFIDENCE and by more than the accuracy's
  binomial 95% half-width on the evaluation images).

`contamination` names the signs it finds (None when there are none); the callers refuse to write a map fitted
on such data unless told to (`--force-temperature`, `--force-calibration`).
"""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from macs_audit.report import Report

ACCURACY_GAP = 0.05  # fit-data accuracy this far above the evaluation data's: trained on, or another distribution
GAP_LEVEL = 0.01  # and the gap's one-sided test at this level: honest data is refused once in 100 runs at most
Z_GAP = 2.3263478740408408  # the normal quantile of 1 - GAP_LEVEL
Z95 = 1.959963984540054
OVERCONFIDENCE = 0.02  # mean confidence above accuracy on the evaluation data by more than this: overconfident


def accuracy_gap(fit_accuracy: float, n_fit: int, eval_accuracy: float, n_eval: int) -> float:
    """The one-sided two-proportion z statistic of fit_accuracy - eval_accuracy (accuracies of n_fit and n_eval
    images; the pooled variance under no difference); 0 where either count is 0 or both accuracies are 0 or 1."""
    if n_fit <= 0 or n_eval <= 0:
        return 0.0
    pooled = (fit_accuracy * n_fit + eval_accuracy * n_eval) / (n_fit + n_eval)
    se = math.sqrt(pooled * (1 - pooled) * (1 / n_fit + 1 / n_eval))
    return (fit_accuracy - eval_accuracy) / se if se > 0 else 0.0


def beyond_noise(fit_accuracy: float, n_fit: int, eval_accuracy: float, n_eval: int) -> bool:
    """Whether the fit data's accuracy is above the evaluation data's by more than ACCURACY_GAP and beyond the
    noise of both (accuracy_gap's z above Z_GAP): the accuracy sign of data the model was trained on."""
    gap = fit_accuracy - eval_accuracy
    return gap > ACCURACY_GAP and accuracy_gap(fit_accuracy, n_fit, eval_accuracy, n_eval) > Z_GAP


@dataclasses.dataclass(frozen=True)
class Scores:
    """The model on one data set, as the signs read it: its accuracy on `n` images and, where known, its mean
    confidence and NLL (None: not measured)."""

    accuracy: float | None
    n: int | None
    confidence: float | None = None
    nll: float | None = None

    @classmethod
    def clean_of(cls, report: Report) -> Scores:
        """The scores of a report's clean view (the evaluation data's, where the callers audited the model)."""
        metrics = report.clean.metrics
        return cls(metrics.get("accuracy"), report.data.n, metrics.get("mean_confidence"), metrics.get("nll"))


def contamination(
    fit: Scores, evaluation: Scores, temperature: float | None = None, fit_name: str = "fit data"
) -> str | None:
    """The signs that the fit data was trained on (see the module), as one clause; None when there are none.
    `fit`, `evaluation`: the model's scores on the fit and the evaluation data; `temperature`: the fitted T, where
    the map is a temperature; `fit_name`: what the clause calls the fit data."""
    fit_accuracy, n_fit = fit.accuracy, fit.n or 0
    eval_accuracy, n_eval = evaluation.accuracy, evaluation.n
    if fit_accuracy is None or eval_accuracy is None or not n_eval:
        return None
    signs = []
    if beyond_noise(fit_accuracy, n_fit, eval_accuracy, n_eval):
        both = fit.nll is not None and evaluation.nll is not None
        nll = f"; NLL {fit.nll:.3f} against {evaluation.nll:.3f}" if both else ""
        z = accuracy_gap(fit_accuracy, n_fit, eval_accuracy, n_eval)
        signs.append(
            f"the model is {100 * fit_accuracy:.1f}% accurate on the {fit_name} but {100 * eval_accuracy:.1f}% on "
            f"the evaluation data ({n_fit:,} and {n_eval:,} images: a gap beyond their noise, z = {z:.1f}{nll})"
        )
    confidence = evaluation.confidence if evaluation.confidence is not None else 0.0
    noise = Z95 * math.sqrt(eval_accuracy * (1 - eval_accuracy) / n_eval)
    if temperature is not None and temperature < 1 and confidence > eval_accuracy + max(OVERCONFIDENCE, noise):
        signs.append(
            f"the temperature fitted on it (T = {temperature:.3f} < 1) sharpens a model that is overconfident on "
            f"the evaluation data (mean confidence {100 * confidence:.1f}% against accuracy "
            f"{100 * eval_accuracy:.1f}%)"
        )
    return "; ".join(signs) if signs else None
