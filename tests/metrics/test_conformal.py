"""Split conformal sets against MAPIE (LAC sets and coverage exactly; APS scores exactly), on the sample model's
predictions, and the finite-sample coverage guarantee on exchangeable synthetic data."""

import math

import numpy as np
import pytest
from sklearn.base import BaseEstimator, ClassifierMixin

from macs_audit.errors import UsageError
from macs_audit.metrics import conformal
from macs_audit.metrics.conventions import softmax64


class GivenProbabilities(ClassifierMixin, BaseEstimator):
    """A prefit 'classifier' whose inputs are already its probabilities: MAPIE then conformalises our model."""

    def fit(self, x, y):
        self.classes_ = np.arange(x.shape[1])
        return self

    def predict_proba(self, x):
        return x

    def predict(self, x):
        return x.argmax(axis=1)


def test_lac_sets_are_mapies_on_the_sample_model(sample_split):
    SplitConformalClassifier = pytest.importorskip("mapie.classification").SplitConformalClassifier

    z_cal, y_cal, z_test, y_test = sample_split
    p_cal, p_test = softmax64(z_cal)[0], softmax64(z_test)[0]
    mapie = SplitConformalClassifier(GivenProbabilities().fit(p_cal, y_cal), confidence_level=0.9, prefit=True)
    mapie.conformalize(p_cal, y_cal)
    expected = mapie.predict_set(p_test)[1][:, :, 0]
    thresholds = conformal.fit_thresholds(z_cal, y_cal, 0.9)
    ours = conformal.prediction_sets(p_test, thresholds["lac"], "lac")
    assert (ours == expected).all()
    stats = conformal.evaluate_sets(z_test, y_test, thresholds)["lac"]
    assert stats["coverage"] == pytest.approx(expected[np.arange(len(y_test)), y_test].mean())
    assert stats["mean_set_size"] == pytest.approx(expected.sum(axis=1).mean())


def test_aps_scores_are_mapies_on_the_sample_model(sample_split):
    APSConformityScore = pytest.importorskip("mapie.conformity_scores").APSConformityScore

    z_cal, y_cal, _, _ = sample_split
    p = softmax64(z_cal)[0]
    # MAPIE's cumulated mass up to the true label, before it subtracts its random share of p_y.
    expected, _ = APSConformityScore().get_true_label_cumsum_proba(y_cal, p, np.arange(p.shape[1]))
    np.testing.assert_allclose(conformal.true_class_scores(p, y_cal, "aps"), expected.ravel(), rtol=0, atol=1e-12)


def test_aps_sets_by_hand():
    p = np.array([[0.5, 0.3, 0.2], [0.1, 0.1, 0.8]])
    # Ranked masses: row 0: 0.5, 0.8, 1.0; row 1 (ties by class index): 0.9, 1.0, 0.8.
    np.testing.assert_allclose(conformal.class_scores(p, "aps"), [[0.5, 0.8, 1.0], [0.9, 1.0, 0.8]])
    sets = conformal.prediction_sets(p, 0.85, "aps")
    assert sets.tolist() == [[True, True, False], [False, False, True]]


def test_threshold_is_the_finite_sample_order_statistic():
    scores = np.arange(1, 20) / 20.0  # n = 19
    assert conformal.conformal_threshold(scores, 0.9) == scores[17]  # ceil(20 x 0.9) = 18th smallest
    assert conformal.conformal_threshold(scores[:5], 0.9) == math.inf  # ceil(6 x 0.9) = 6 > 5: every class


def test_exchangeable_data_covers_within_the_finite_sample_bound():
    """Calibration and test drawn from one distribution: the mean coverage over many draws lies in
    [1 - alpha, 1 - alpha + 1 / (n + 1)] (up to the Monte Carlo error of the mean)."""
    rng = np.random.default_rng(0)
    n_cal, n_test, draws, coverage = 99, 2000, 300, 0.9
    results = {m: [] for m in conformal.METHODS}
    for _ in range(draws):
        z = rng.normal(size=(n_cal + n_test, 5)) * 2
        y = (z + rng.gumbel(size=z.shape) * 2).argmax(axis=1)  # the softmax of z/2 is the true p(y | x)
        thresholds = conformal.fit_thresholds(z[:n_cal], y[:n_cal], coverage)
        for m, stats in conformal.evaluate_sets(z[n_cal:], y[n_cal:], thresholds).items():
            results[m].append(stats["coverage"])
    for m, values in results.items():
        mean, error = np.mean(values), 3 * np.std(values) / np.sqrt(draws)
        assert coverage - error <= mean <= coverage + 1 / (n_cal + 1) + error, (m, mean)


def test_worst_class_and_statistics():
    sets = np.array([[True, False], [True, True], [False, True], [True, False]])
    labels = np.array([0, 1, 0, 1])
    stats = conformal.set_statistics(sets, labels)
    assert stats == {"coverage": 0.5, "mean_set_size": 1.25, "worst_class_coverage": 0.5, "worst_class": 0}


def test_coverage_outside_zero_one_is_a_usage_error():
    with pytest.raises(UsageError, match="--coverage"):
        conformal.fit_thresholds(np.zeros((3, 2)), np.zeros(3, int), 1.0)
