"""Selective prediction against torch-uncertainty's AURC / risk-coverage metrics and scikit-learn's ROC AUC, on
the sample model's predictions, and on cases with known answers."""

import numpy as np
import pytest
from references import torch_uncertainty_module
from sklearn.metrics import roc_auc_score

from macs_audit.metrics import selective
from macs_audit.metrics.conventions import softmax_with_log


@pytest.fixture(scope="module")
def sample_predictions(sample_logits):
    logits, labels = sample_logits
    p, _ = softmax_with_log(logits)
    return p, labels, p.max(axis=1), p.argmax(axis=1) == labels


@pytest.fixture(scope="module")
def reference(sample_predictions):
    """torch-uncertainty's risk curve and metrics on the sample model's probabilities."""
    import torch

    rc = torch_uncertainty_module("risk_coverage")
    p, labels, _, _ = sample_predictions
    probs, targets = torch.from_numpy(p), torch.from_numpy(labels)

    def run(metric):
        metric.update(probs, targets)
        return metric

    aurc = run(rc.AURC())
    return {
        "curve": aurc.partial_compute().numpy(),
        "aurc": float(aurc.compute()),
        "risk": {c: float(run(rc.RiskAtxCov(c)).compute()) for c in selective.RISK_AT_COVERAGE},
        "coverage": {r: float(run(rc.CovAtxRisk(r)).compute().reshape(-1)[0]) for r in selective.COVERAGE_AT_RISK},
    }


def test_risk_curve_is_torch_uncertaintys_on_the_sample_model(sample_predictions, reference):
    _, _, conf, correct = sample_predictions
    assert len(np.unique(conf)) == len(conf)  # no ties: torch-uncertainty's arbitrary tie order cannot differ
    np.testing.assert_allclose(selective.risk_curve(conf, correct), reference["curve"], rtol=0, atol=1e-12)


def test_metrics_agree_with_torch_uncertainty_on_the_sample_model(sample_predictions, reference):
    _, _, conf, correct = sample_predictions
    ours = selective.selective_metrics(conf, correct)
    # AURC: the same points, a Riemann mean here and a rescaled trapezoid there; they differ by O(1/N).
    assert ours["aurc"] == pytest.approx(reference["aurc"], abs=1.0 / len(conf))
    assert 0 < ours["e_aurc"] < ours["aurc"]
    for c, key in selective.RISK_KEYS.items():
        assert ours[key] == pytest.approx(reference["risk"][c], abs=1e-7)  # torch computes in float32
    for r, key in selective.COVERAGE_KEYS.items():
        expected = reference["coverage"][r]
        assert ours[key] == (0.0 if np.isnan(expected) else pytest.approx(expected, abs=1e-7))


def test_misclassification_auroc_is_sklearns_on_the_sample_model(sample_predictions):
    _, _, conf, correct = sample_predictions
    auroc = selective.selective_metrics(conf, correct)["misclassification_auroc"]
    assert auroc == pytest.approx(roc_auc_score(correct, conf), abs=1e-12)


def test_hand_computed_curve_and_metrics():
    conf = np.array([0.9, 0.8, 0.7, 0.6])
    correct = np.array([True, False, True, False])
    risk = selective.risk_curve(conf, correct)
    np.testing.assert_allclose(risk, [0, 1 / 2, 1 / 3, 2 / 4])
    m = selective.selective_metrics(conf, correct)
    assert m["aurc"] == pytest.approx(np.mean([0, 1 / 2, 1 / 3, 1 / 2]))
    assert m["e_aurc"] == pytest.approx(m["aurc"] - np.mean([0, 0, 1 / 3, 1 / 2]))  # oracle: right, right, wrong, wrong
    assert m["risk_at_80_coverage"] == pytest.approx(1 / 2)  # ceil(0.8 x 4) = 4 kept
    assert m["coverage_at_1_risk"] == pytest.approx(0.25)
    assert m["misclassification_auroc"] == pytest.approx(0.75)


def test_a_perfect_ranking_has_no_excess_risk():
    rng = np.random.default_rng(0)
    conf = rng.random(500)
    correct = conf > 0.3
    m = selective.selective_metrics(conf, correct)
    assert m["e_aurc"] == pytest.approx(0.0, abs=1e-15)
    assert m["misclassification_auroc"] == 1.0
    # Every correct one first, then errors while they stay at most 1% of the kept: k <= correct / 0.99.
    assert m["coverage_at_1_risk"] == pytest.approx(np.floor(correct.sum() / 0.99) / len(conf))


def test_all_correct_has_zero_risk_and_no_misclassification_auroc():
    m = selective.selective_metrics(np.linspace(0.5, 1, 10), np.ones(10, bool))
    assert m["aurc"] == m["e_aurc"] == m["risk_at_95_coverage"] == 0.0
    assert m["coverage_at_1_risk"] == 1.0
    assert "misclassification_auroc" not in m


def test_ties_share_their_errors_whatever_the_order():
    conf = np.array([0.9, 0.5, 0.5, 0.5, 0.5, 0.2])
    correct = np.array([True, True, False, False, True, False])
    risk = selective.risk_curve(conf, correct)
    # Positions 2-5 are tied with 2 errors in 4: each adds half an error.
    np.testing.assert_allclose(risk, [0, 0.5 / 2, 1 / 3, 1.5 / 4, 2 / 5, 3 / 6])
    rng = np.random.default_rng(1)
    for _ in range(5):
        order = rng.permutation(len(conf))
        np.testing.assert_allclose(selective.risk_curve(conf[order], correct[order]), risk)


def test_oracle_aurc_approaches_the_continuous_form():
    n, err = 100_000, 0.1
    continuous = err + (1 - err) * np.log(1 - err)
    assert selective.oracle_aurc(n, int(err * n)) == pytest.approx(continuous, abs=1e-4)


def test_curve_points_for_the_plot():
    rng = np.random.default_rng(2)
    conf = rng.random(1000)
    risk = selective.risk_curve(conf, rng.random(1000) < conf)
    points = selective.curve_points(risk)
    assert len(points["coverage"]) == len(points["risk"]) == selective.CURVE_POINTS
    assert points["coverage"][-1] == 1.0 and points["risk"][-1] == pytest.approx(risk[-1])
