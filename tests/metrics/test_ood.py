"""OOD detection scores and metrics against scikit-learn's ROC / PR functions and torch-uncertainty's tie-aware
FPR, on the sample model (CIFAR-10 against uniform-noise images) and on cases with known answers."""

import numpy as np
import pytest
from conftest import SAMPLE_ONNX
from references import torch_uncertainty_module
from scipy.special import logsumexp, softmax
from sklearn.metrics import average_precision_score, roc_auc_score, roc_curve

from macs_audit.metrics import ood, ranking


@pytest.fixture(scope="module")
def noise_logits():
    """The sample model's logits on 500 uniform-noise images (seeded)."""
    from macs_audit.models.predictor import load_predictor

    images = np.random.default_rng(0).random((500, 3, 32, 32), dtype=np.float32)
    return load_predictor(SAMPLE_ONNX, device="cpu").predict(images)


def sklearn_metrics(score_in, score_out):
    """The same three numbers from scikit-learn, in-distribution labelled 1."""
    y = np.r_[np.ones(len(score_in)), np.zeros(len(score_out))]
    s = np.r_[score_in, score_out]
    fpr, tpr, _ = roc_curve(y, s, drop_intermediate=False)
    return {"auroc": roc_auc_score(y, s), "aupr": average_precision_score(y, s), "fpr95": fpr[np.argmax(tpr >= 0.95)]}


def test_scores_are_their_definitions():
    z = np.random.default_rng(0).normal(size=(50, 7)) * 4
    s = ood.scores(z)
    np.testing.assert_allclose(s["msp"], softmax(z, axis=1).max(axis=1), rtol=1e-12)
    np.testing.assert_allclose(s["max_logit"], z.max(axis=1))
    np.testing.assert_allclose(s["energy"], logsumexp(z, axis=1), rtol=1e-12)


def test_every_score_agrees_with_sklearn_on_the_sample_model(sample_logits, noise_logits):
    s_in, s_out = ood.scores(sample_logits[0]), ood.scores(noise_logits)
    for name in ood.SCORES:
        ours, reference = ood.detection_metrics(s_in[name], s_out[name]), sklearn_metrics(s_in[name], s_out[name])
        for key in ood.METRIC_KEYS:
            assert ours[key] == pytest.approx(reference[key], abs=1e-12), (name, key)


def test_fpr95_is_torch_uncertaintys_tie_aware_fpr(sample_logits, noise_logits):
    import torch

    fpr = torch_uncertainty_module("fpr")
    s_in, s_out = ood.scores(sample_logits[0])["msp"], ood.scores(noise_logits)["msp"]
    labels = torch.from_numpy(np.r_[np.ones(len(s_in)), np.zeros(len(s_out))].astype(np.int64))
    # torch-uncertainty labels OOD 1 by default; here it gets our convention: in-distribution 1, our score.
    expected = float(fpr._fprx_compute(torch.from_numpy(np.r_[s_in, s_out]), labels, 0.95, pos_label=1))
    assert ood.detection_metrics(s_in, s_out)["fpr95"] == pytest.approx(expected, abs=1e-7)  # a float32 ratio there


def test_ties_agree_with_sklearn():
    rng = np.random.default_rng(3)
    s_in, s_out = rng.integers(0, 5, 300).astype(float), rng.integers(0, 4, 200).astype(float)
    ours, reference = ood.detection_metrics(s_in, s_out), sklearn_metrics(s_in, s_out)
    for key in ood.METRIC_KEYS:
        assert ours[key] == pytest.approx(reference[key], abs=1e-12), key


def test_a_perfect_detector():
    m = ood.detection_metrics(np.linspace(1, 2, 100), np.linspace(-1, 0, 50))
    assert m == {"auroc": 1.0, "aupr": 1.0, "fpr95": 0.0}


def test_a_detector_that_cannot_tell_gives_half():
    s = np.random.default_rng(4).random(2000)
    assert ood.detection_metrics(s, s)["auroc"] == pytest.approx(0.5)
    assert ood.detection_metrics(s, s)["fpr95"] == pytest.approx(0.95, abs=1e-3)


def test_bootstrap_intervals_hold_the_estimate_and_repeat_by_seed(sample_logits, noise_logits):
    s_in, s_out = ood.scores(sample_logits[0]), ood.scores(noise_logits)
    first = ood.bootstrap_intervals(s_in, s_out, 200, seed=5)
    assert first == ood.bootstrap_intervals(s_in, s_out, 200, seed=5)
    assert first != ood.bootstrap_intervals(s_in, s_out, 200, seed=6)
    for name in ood.SCORES:
        point = ood.detection_metrics(s_in[name], s_out[name])
        for key in ood.METRIC_KEYS:
            low, high = first[name][key]
            assert low <= point[key] <= high and low < high, (name, key)
    assert ood.bootstrap_intervals(s_in, s_out, 0, seed=5) == {}


def test_a_resample_is_the_metrics_of_the_drawn_samples():
    """Draw counts through the cumulative sums equal the plain metrics of the samples repeated that often."""
    rng = np.random.default_rng(7)
    s_in, s_out = rng.integers(0, 6, 40).astype(float), rng.integers(0, 5, 30).astype(float)
    c_in, c_out = rng.integers(0, 3, (1, 40)), rng.integers(0, 3, (1, 30))
    stats = ranking.curve_statistics(
        np.r_[s_in, s_out], np.r_[np.ones(40, bool), np.zeros(30, bool)], 0.95, (c_in, c_out)
    )
    expected = sklearn_metrics(np.repeat(s_in, c_in[0]), np.repeat(s_out, c_out[0]))
    for key, stat in zip(ood.METRIC_KEYS, ("auroc", "aupr", "fpr_at_tpr"), strict=True):
        assert stats[stat][0] == pytest.approx(expected[key], abs=1e-6), key  # resamples: float32


def test_the_section_holds_every_score():
    rng = np.random.default_rng(5)
    section = ood.ood_section(rng.normal(size=(40, 3)) * 5, rng.normal(size=(30, 3)), n_resamples=50)
    assert set(section) == set(ood.SCORES)
    assert set(section["msp"]) == {*ood.METRIC_KEYS, "intervals"}
