"""Reasons that are true (issue 41, item 9): the contamination decision `calibrate` and `finetune` share weighs an
accuracy gap against the noise of both data sets (a 30-image fit set 8 points above the evaluation data is
noise, not training data); a selection split too small to tell a map from none says so; and the calibrator
table shows the reason a map was not fitted that the report holds (missing classes, not "split too small")."""

from __future__ import annotations

import numpy as np
import pytest
from fixtures.synthetic_report import synthetic_report

from macs_audit.calibrating import choose_calibrator
from macs_audit.calibrating import contamination_warnings as calibrate_warnings
from macs_audit.calibrators.base import fit_calibrator
from macs_audit.calibrators.held_out import Scores, contamination
from macs_audit.calibrators.selection import MIN_SELECTION_IMAGES, compare_calibrators
from macs_audit.data.splits import stratified_split
from macs_audit.errors import UsageError
from macs_audit.finetune.run import contamination_warnings as finetune_warnings
from macs_audit.formats.tables import calibrator_table
from macs_audit.report import Calibrators

# (fit accuracy, fit images, evaluation accuracy, evaluation images, refused)
CASES = [
    (19 / 30, 30, 11 / 20, 20, False),  # the 63.3% against 55.0%: within about 9 points of noise
    (19 / 30, 30, 0.55, 10000, False),  # one side large: the 30 images' noise alone is 17 points wide
    (0.70, 2000, 0.60, 2000, True),  # a 10-point gap on 2,000 images each: far beyond their noise
    (1.00, 30, 0.55, 10000, True),  # memorised: 30 of 30 right against 55%
    (0.62, 100000, 0.60, 100000, False),  # beyond the noise but under the practical gap (ACCURACY_GAP)
]


@pytest.mark.parametrize(("fit", "n_fit", "held", "n_eval", "refused"), CASES)
def test_the_accuracy_gap_is_weighed_against_both_samples_noise(fit, n_fit, held, n_eval, refused):
    reason = contamination(Scores(fit, n_fit), Scores(held, n_eval, confidence=held))
    assert (reason is not None) == refused, reason
    if refused:
        assert f"{100 * fit:.1f}% accurate on the fit data but {100 * held:.1f}%" in reason
        assert f"{n_fit:,} and {n_eval:,} images: a gap beyond their noise" in reason


def _logits(labels: np.ndarray, right: np.ndarray, scale: float = 2.0) -> np.ndarray:
    """Logits whose top class is the label where `right`, the next class elsewhere."""
    top = np.where(right, labels, (labels + 1) % 10)
    z = np.zeros((len(labels), 10))
    z[np.arange(len(labels)), top] = scale
    return z


def test_calibrate_and_finetune_do_not_refuse_30_images_within_the_noise():
    before = synthetic_report(accuracy=0.55, n=20)  # the evaluation data: 11 of 20 right
    labels = np.repeat(np.arange(10), 3)
    right = np.zeros(30, dtype=bool)
    right[:19] = True  # 63.3% on the fit data
    logits = _logits(labels, right)
    calibrator = fit_calibrator("temperature", logits, labels)
    assert calibrate_warnings(calibrator, before, 19 / 30, logits, labels, force=False) == []
    fit = {"accuracy": 19 / 30, "n": 30, "fitted_temperature": 1.2, "nll_before": 1.0}
    assert finetune_warnings(fit, before, "validation split", temperature=True, force=False) == []
    # The same accuracies on 3,000 fit images against 2,000 evaluation images: refused, in one line.
    before = synthetic_report(accuracy=0.55, n=2000)
    fit = {**fit, "n": 3000}
    with pytest.raises(UsageError, match=r"looks trained on: .*3,000 and 2,000 images: a gap beyond their noise"):
        finetune_warnings(fit, before, "validation split", temperature=True, force=False)


def test_a_selection_split_too_small_is_the_reason_given():
    """30 images, 9 held out (3 a class, --holdout 0.3): the fitted part right, the held-out part wrong, so the
    sharpening temperature loses there; the refusal names the real cause, too few images to select a map."""
    labels = np.repeat(np.arange(10), 3)
    held, _ = stratified_split(labels, 0.3, 0)
    right = np.ones(30, dtype=bool)
    right[held] = False
    logits = _logits(labels, right)
    with pytest.raises(UsageError) as error:
        choose_calibrator(logits, labels, ["temperature"], "nll", 0.3, 0)
    message = str(error.value)
    assert message.startswith(
        f"too few images to select a map: {len(held)} held-out images, need at least {MIN_SELECTION_IMAGES}"
    )
    assert "30 images in --data at --holdout 0.3" in message and "--force-calibration" in message
    assert "\n" not in message


def test_the_calibrator_table_shows_the_reason_the_report_holds():
    rng = np.random.default_rng(0)
    labels = np.repeat(np.arange(9), 20)  # no fit image of class 9
    logits = rng.normal(size=(180, 10)) + 3 * np.eye(10)[labels]
    eval_labels = np.repeat(np.arange(10), 10)
    eval_logits = rng.normal(size=(100, 10)) + 3 * np.eye(10)[eval_labels]
    selection = compare_calibrators(logits, labels, eval_logits, eval_labels, ["temperature", "vector"])
    section = Calibrators.from_dict(selection.to_dict())
    (refused,) = [row["refused"] for row in section.methods if row.get("refused")]
    assert "class 9" in refused
    _, _, rows = calibrator_table(section)
    (row,) = [r for r in rows if r[0].startswith("vector")]
    assert row[-1] == f"not fitted: {refused}" and "split too small" not in row[-1]
