"""The contamination decision `calibrate` and `finetune` share (calibrators/held_out.py)."""

from macs_audit.calibrators.held_out import ACCURACY_GAP, OVERCONFIDENCE, Scores, contamination


def test_an_accuracy_gap_names_both_accuracies():
    reason = contamination(Scores(0.80, 1000, nll=0.6), Scores(0.60, 1000, confidence=0.61, nll=1.4))
    assert reason == (
        "the model is 80.0% accurate on the fit data but 60.0% on the evaluation data (1,000 and 1,000 images: "
        "a gap beyond their noise, z = 9.8; NLL 0.600 against 1.400)"
    )
    assert contamination(Scores(0.60 + ACCURACY_GAP - 0.001, 1000), Scores(0.60, 1000, confidence=0.6)) is None


def test_a_sharpening_temperature_on_an_overconfident_model():
    over = 0.60 + OVERCONFIDENCE + 0.05
    reason = contamination(Scores(0.61, 1000), Scores(0.60, 1000, confidence=over), temperature=0.8)
    assert reason is not None and "T = 0.800 < 1" in reason and "overconfident" in reason
    # The same T on a model that is underconfident there, or T > 1 on an overconfident one: honest.
    assert contamination(Scores(0.61, 1000), Scores(0.60, 1000, confidence=0.55), temperature=0.8) is None
    assert contamination(Scores(0.61, 1000), Scores(0.60, 1000, confidence=over), temperature=1.3) is None
    assert contamination(Scores(0.99, 1000), Scores(None, 1000)) is None


def test_the_evaluation_scores_are_the_clean_views():
    from fixtures.synthetic_report import synthetic_report

    report = synthetic_report(accuracy=0.55, n=20)
    scores = Scores.clean_of(report)
    assert (scores.accuracy, scores.n) == (0.55, 20)
    metrics = report.clean.metrics
    assert (scores.confidence, scores.nll) == (metrics.get("mean_confidence"), metrics.get("nll"))
