"""The contamination decision `calibrate` and `finetune` share (calibrators/held_out.py)."""

from macs_audit.calibrators.held_out import ACCURACY_GAP, OVERCONFIDENCE, contamination


def test_an_accuracy_gap_names_both_accuracies():
    reason = contamination(
        fit_accuracy=0.80, n_fit=1000, n_eval=1000, eval_accuracy=0.60, eval_confidence=0.61, fit_nll=0.6, eval_nll=1.4
    )
    assert reason == (
        "the model is 80.0% accurate on the fit data but 60.0% on the evaluation data (1,000 and 1,000 images: "
        "a gap beyond their noise, z = 9.8; NLL 0.600 against 1.400)"
    )
    assert (
        contamination(
            fit_accuracy=0.60 + ACCURACY_GAP - 0.001, n_fit=1000, n_eval=1000, eval_accuracy=0.60, eval_confidence=0.6
        )
        is None
    )


def test_a_sharpening_temperature_on_an_overconfident_model():
    over = 0.60 + OVERCONFIDENCE + 0.05
    reason = contamination(
        fit_accuracy=0.61, n_fit=1000, n_eval=1000, eval_accuracy=0.60, eval_confidence=over, temperature=0.8
    )
    assert reason is not None and "T = 0.800 < 1" in reason and "overconfident" in reason
    # The same T on a model that is underconfident there, or T > 1 on an overconfident one: honest.
    assert (
        contamination(
            fit_accuracy=0.61, n_fit=1000, n_eval=1000, eval_accuracy=0.60, eval_confidence=0.55, temperature=0.8
        )
        is None
    )
    assert (
        contamination(
            fit_accuracy=0.61, n_fit=1000, n_eval=1000, eval_accuracy=0.60, eval_confidence=over, temperature=1.3
        )
        is None
    )
    assert contamination(fit_accuracy=0.99, n_fit=1000, n_eval=1000, eval_accuracy=None, eval_confidence=None) is None
