"""Is the data a calibration map was fitted on honest? The one decision `calibrate` and `finetune` make.

A map fitted on images the model was trained on learns the model's confidence where it is right (memorised
images), so it sharpens a model that is overconfident everywhere else: a temperature below 1 that makes the
evaluation data's ECE worse. Two signs give it away, whatever the data is called:

- the model is far more accurate on the fit data than on the evaluation data (ACCURACY_GAP; a held-out split
  of the same distribution differs by its sampling noise, a point or two on a few thousand images);
- the fitted temperature is below 1 (it sharpens) while the model is overconfident on the evaluation data
  (its mean confidence above its accuracy by more than OVERCONFIDENCE).

`contamination` names the signs it finds (None when there are none); the callers refuse to write a map fitted
on such data unless told to (`--force-temperature`, `--force-calibration`).
"""

from __future__ import annotations

ACCURACY_GAP = 0.05  # fit-data accuracy this far above the evaluation data's: trained on, or another distribution
OVERCONFIDENCE = 0.02  # mean confidence above accuracy on the evaluation data by more than this: overconfident


def contamination(
    *,
    fit_accuracy: float,
    eval_accuracy: float | None,
    eval_confidence: float | None,
    temperature: float | None = None,
    fit_nll: float | None = None,
    eval_nll: float | None = None,
    fit_name: str = "fit data",
) -> str | None:
    """The signs that the fit data was trained on (see the module), as one clause; None when there are none.
    `temperature`: the fitted T, where the map is a temperature."""
    if eval_accuracy is None:
        return None
    signs = []
    if fit_accuracy > eval_accuracy + ACCURACY_GAP:
        nll = f" (NLL {fit_nll:.3f} against {eval_nll:.3f})" if fit_nll is not None and eval_nll is not None else ""
        signs.append(
            f"the model is {100 * fit_accuracy:.1f}% accurate on the {fit_name} but {100 * eval_accuracy:.1f}% on "
            f"the evaluation data{nll}"
        )
    confidence = eval_confidence if eval_confidence is not None else 0.0
    if temperature is not None and temperature < 1 and confidence > eval_accuracy + OVERCONFIDENCE:
        signs.append(
            f"the temperature fitted on it (T = {temperature:.3f} < 1) sharpens a model that is overconfident on "
            f"the evaluation data (mean confidence {100 * confidence:.1f}% against accuracy "
            f"{100 * eval_accuracy:.1f}%)"
        )
    return "; ".join(signs) if signs else None
