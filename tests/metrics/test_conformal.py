"""Split conformal sets against MAPIE and TorchCP on the sample model's predictions (LAC sets and coverage
exactly; randomised APS and RAPS scores and thresholds exactly for the same draws u, set sizes within the
noise of the draws), and the finite-sample coverage guarantee on exchangeable synthetic data."""

import importlib
import importlib.util
import math
import sys
import types
from pathlib import Path

import numpy as np
import pytest
from sklearn.base import BaseEstimator, ClassifierMixin

from macs_audit.errors import UsageError
from macs_audit.metrics import conformal
from macs_audit.metrics.conventions import softmax_with_log


def reference(module: str):
    """A reference library of the test extra, imported; a failure naming the install when it is missing (MAPIE
    and TorchCP are both in the extra: a reference test that skips silently could never fail)."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        pytest.fail(f"{module} is not importable ({exc}): pip install -e '.[test]'")


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
    SplitConformalClassifier = reference("mapie.classification").SplitConformalClassifier

    z_cal, y_cal, z_test, y_test = sample_split
    p_cal, p_test = softmax_with_log(z_cal)[0], softmax_with_log(z_test)[0]
    mapie = SplitConformalClassifier(GivenProbabilities().fit(p_cal, y_cal), confidence_level=0.9, prefit=True)
    mapie.conformalize(p_cal, y_cal)
    expected = mapie.predict_set(p_test)[1][:, :, 0]
    thresholds = conformal.fit_thresholds(z_cal, y_cal, 0.9)
    ours = conformal.prediction_sets(p_test, thresholds["lac"], "lac")
    assert (ours == expected).all()
    stats = conformal.evaluate_sets(z_test, y_test, thresholds)["lac"]
    assert stats["coverage"] == pytest.approx(expected[np.arange(len(y_test)), y_test].mean())
    assert stats["mean_set_size"] == pytest.approx(expected.sum(axis=1).mean())


def test_deterministic_aps_scores_are_mapies_on_the_sample_model(sample_split):
    APSConformityScore = reference("mapie.conformity_scores").APSConformityScore

    z_cal, y_cal, _, _ = sample_split
    p = softmax_with_log(z_cal)[0]
    # MAPIE's cumulated mass up to the true label, before it subtracts its random share of p_y.
    expected, _ = APSConformityScore().get_true_label_cumsum_proba(y_cal, p, np.arange(p.shape[1]))
    scores = conformal.true_class_scores(p, y_cal, "aps_deterministic")
    np.testing.assert_allclose(scores, expected.ravel(), rtol=0, atol=1e-12)


def test_aps_sets_by_hand():
    p = np.array([[0.5, 0.3, 0.2], [0.1, 0.1, 0.8]])
    # Ranked masses: row 0: 0.5, 0.8, 1.0; row 1 (ties by class index): 0.9, 1.0, 0.8.
    np.testing.assert_allclose(conformal.class_scores(p, "aps_deterministic"), [[0.5, 0.8, 1.0], [0.9, 1.0, 0.8]])
    sets = conformal.prediction_sets(p, 0.85, "aps_deterministic")
    assert sets.tolist() == [[True, True, False], [False, False, True]]
    # Randomised: the mass ranked above plus u times the class's own; u = 0.5 for both rows.
    u = np.array([0.5, 0.5])
    np.testing.assert_allclose(conformal.class_scores(p, "aps", u), [[0.25, 0.65, 0.9], [0.85, 0.95, 0.4]])
    # (row 1's top class alone scores 0.4 > 0.3: an empty set, as the exact inversion gives)
    assert conformal.prediction_sets(p, 0.3, "aps", u).tolist() == [[True, False, False], [False, False, False]]
    # RAPS adds penalty x (rank - k_reg)+: ranks 1, 2, 3 with k_reg 1 and penalty 0.1 add 0, 0.1, 0.2.
    raps = conformal.class_scores(p, "raps", u, k_reg=1, penalty=0.1)
    np.testing.assert_allclose(raps, [[0.25, 0.75, 1.1], [0.95, 1.15, 0.4]])


def torchcp_scores():
    """TorchCP's LAC, APS and RAPS score classes and its threshold function, imported without the torchcp
    package's __init__ (which imports its losses and graph modules, needing torchsort and torch_geometric)."""
    if "torchcp" not in sys.modules:  # once: the stand-in package below has no spec to find again
        spec = importlib.util.find_spec("torchcp")
        if spec is None:  # 1.2.0 in the test extra: it declares no dependencies (1.2.1 declares torchsort)
            pytest.fail("torchcp is not installed (the test extra pins torchcp==1.2.0): pip install -e '.[test]'")
        root = Path(spec.origin).parent
        for name, path in (("torchcp", root), ("torchcp.classification", root / "classification")):
            module = types.ModuleType(name)
            module.__path__ = [str(path)]
            sys.modules[name] = module
    from torchcp.classification.score.aps import APS
    from torchcp.classification.score.lac import LAC
    from torchcp.classification.score.raps import RAPS
    from torchcp.utils.common import calculate_conformal_value

    return LAC, APS, RAPS, calculate_conformal_value


def test_lac_threshold_and_sets_are_torchcps_on_the_sample_model(sample_split):
    """TorchCP's LAC (1 - p_y, its threshold calculate_conformal_value, its sets scores <= q) in float64 on the
    same split: the same threshold to 1e-12 and the same sets, coverage and mean set size."""
    torch = pytest.importorskip("torch")
    LAC, _, _, calculate_conformal_value = torchcp_scores()
    z_cal, y_cal, z_test, y_test = sample_split
    lac = LAC()
    q_theirs = float(calculate_conformal_value(lac(torch.tensor(z_cal), torch.tensor(y_cal)), 0.1))
    thresholds = conformal.fit_thresholds(z_cal, y_cal, 0.9)
    assert float(thresholds["lac"]) == pytest.approx(q_theirs, abs=1e-12)
    theirs = (lac(torch.tensor(z_test)) <= q_theirs).numpy()
    ours = conformal.prediction_sets(softmax_with_log(z_test)[0], thresholds["lac"], "lac")
    assert (ours == theirs).all()
    stats = conformal.evaluate_sets(z_test, y_test, thresholds)["lac"]
    assert stats["coverage"] == pytest.approx(theirs[np.arange(len(y_test)), y_test].mean(), abs=1e-12)
    assert stats["mean_set_size"] == pytest.approx(theirs.sum(axis=1).mean(), abs=1e-12)


def test_randomised_aps_and_raps_thresholds_are_torchcps_for_the_same_draws(sample_split):
    """TorchCP's score is cumsum - U p_y (the mass up to y less U of it): ours with u = 1 - U, the same draws
    (torch.rand after manual_seed, as TorchCP draws them) give the same scores and thresholds to 1e-6 (TorchCP
    works in float32). Its sets draw U per class, ours per image: the mean set sizes agree in expectation and,
    averaged over 10 seeds, within 0.05 (four standard errors of the mean of the difference here)."""
    torch = pytest.importorskip("torch")
    _, APS, RAPS, calculate_conformal_value = torchcp_scores()
    z_cal, y_cal, z_test, y_test = sample_split
    p_cal = softmax_with_log(z_cal)[0]
    sizes_ours, sizes_theirs = [], []
    for seed in range(10):
        for method, score in (("aps", APS()), ("raps", RAPS(penalty=0.1, kreg=2))):
            torch.manual_seed(seed)
            u = 1.0 - torch.rand(len(y_cal)).double().numpy()
            torch.manual_seed(seed)
            theirs = score(torch.tensor(z_cal, dtype=torch.float32), torch.tensor(y_cal)).double().numpy()
            params = {"k_reg": 2, "penalty": 0.1} if method == "raps" else {}
            ours = conformal.true_class_scores(p_cal, y_cal, method, u, **params)
            np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-6)
            q_theirs = float(calculate_conformal_value(torch.tensor(theirs), 0.1))
            assert conformal.conformal_threshold(ours, 0.9) == pytest.approx(q_theirs, abs=1e-6)
        thresholds = conformal.fit_thresholds(z_cal, y_cal, 0.9, seed=seed)
        sizes_ours.append(conformal.evaluate_sets(z_test, y_test, thresholds)["aps"]["mean_set_size"])
        torch.manual_seed(seed)
        aps = APS()
        q = calculate_conformal_value(aps(torch.tensor(z_cal), torch.tensor(y_cal)), 0.1)
        sizes_theirs.append((aps(torch.tensor(z_test)) <= q).sum(1).double().mean().item())
    assert np.mean(sizes_ours) == pytest.approx(np.mean(sizes_theirs), abs=0.05)


def test_randomised_aps_threshold_is_mapies_for_the_same_seed(sample_split):
    """MAPIE's APS score is cumsum - u p_y with u from random_state: ours with 1 - u for the same seed gives
    its threshold exactly; its randomised sets (include_last_label="randomized") draw differently, so the mean
    set sizes over 10 seeds agree within 0.05 (as for TorchCP)."""
    mapie_classification = reference("mapie.classification")
    from sklearn.utils import check_random_state

    z_cal, y_cal, z_test, y_test = sample_split
    p_cal, p_test = softmax_with_log(z_cal)[0], softmax_with_log(z_test)[0]
    sizes_ours, sizes_theirs = [], []
    for seed in range(10):
        mapie = mapie_classification.SplitConformalClassifier(
            GivenProbabilities().fit(p_cal, y_cal),
            confidence_level=0.9,
            conformity_score="aps",
            prefit=True,
            random_state=seed,
        )
        mapie.conformalize(p_cal, y_cal)
        u = 1.0 - check_random_state(seed).uniform(size=len(y_cal))
        ours = conformal.conformal_threshold(conformal.true_class_scores(p_cal, y_cal, "aps", u), 0.9)
        fitted = mapie._mapie_classifier
        scores = conformal.true_class_scores(p_cal, y_cal, "aps", u)
        np.testing.assert_allclose(scores, np.ravel(fitted.conformity_scores_), rtol=0, atol=1e-12)
        theirs = fitted.conformity_score_function_.get_conformity_score_quantiles(
            fitted.conformity_scores_, np.array([0.1]), "prefit"
        )
        assert ours == pytest.approx(float(np.ravel(theirs)[0]), abs=1e-12)
        sets = mapie.predict_set(p_test, conformity_score_params={"include_last_label": "randomized"})[1][:, :, 0]
        sizes_theirs.append(sets.sum(axis=1).mean())
        thresholds = conformal.fit_thresholds(z_cal, y_cal, 0.9, seed=seed)
        sizes_ours.append(conformal.evaluate_sets(z_test, y_test, thresholds)["aps"]["mean_set_size"])
    assert np.mean(sizes_ours) == pytest.approx(np.mean(sizes_theirs), abs=0.05)


def test_randomised_aps_sets_are_smaller_than_the_deterministic_ones_at_the_same_coverage(sample_split):
    z_cal, y_cal, z_test, y_test = sample_split
    p_cal, p_test = softmax_with_log(z_cal)[0], softmax_with_log(z_test)[0]
    thresholds = conformal.fit_thresholds(z_cal, y_cal, 0.9)
    randomised = conformal.evaluate_sets(z_test, y_test, thresholds)["aps"]
    q = conformal.conformal_threshold(conformal.true_class_scores(p_cal, y_cal, "aps_deterministic"), 0.9)
    deterministic = conformal.set_statistics(conformal.prediction_sets(p_test, q, "aps_deterministic"), y_test)
    assert randomised["mean_set_size"] < deterministic["mean_set_size"]
    assert abs(randomised["coverage"] - 0.9) < 0.03


def test_raps_parameters_by_the_papers_rule():
    rng = np.random.default_rng(1)
    z = rng.normal(size=(600, 8)) * 3
    y = (z + rng.gumbel(size=z.shape) * 3).argmax(axis=1)
    p = softmax_with_log(z)[0]
    u = conformal.uniforms(len(y), 0)
    k_reg, penalty = conformal.raps_parameters(p, y, u, 0.9)
    ranks = np.argmax(np.argsort(-p, axis=1, kind="stable") == y[:, None], axis=1) + 1
    assert k_reg == np.sort(ranks)[math.ceil(0.9 * 601) - 1] and penalty in conformal.RAPS_PENALTIES
    given = conformal.fit_thresholds(z, y, 0.9, raps=(2, 0.2))["raps"]
    assert (given.k_reg, given.penalty) == (2, 0.2)
    # The tuned threshold is fitted on the 70% the parameters were not chosen on.
    tuned = conformal.fit_thresholds(z, y, 0.9)["raps"]
    _, rest = conformal._split_for_tuning(len(y), 0)
    scores = conformal.true_class_scores(p[rest], y[rest], "raps", u[rest], k_reg=tuned.k_reg, penalty=tuned.penalty)
    assert float(tuned) == conformal.conformal_threshold(scores, 0.9)


def test_class_conditional_sets_cover_every_class():
    """Mondrian LAC: one threshold per class, so every class is covered at the target on exchangeable data,
    where the marginal LAC under-covers the hard class."""
    rng = np.random.default_rng(2)
    n = 6000
    y = rng.integers(0, 3, n)
    z = np.eye(3)[y] * np.array([4.0, 4.0, 0.7])[y][:, None] + rng.normal(size=(n, 3))  # class 2 is hard
    fit, scored = np.arange(3000), np.arange(3000, n)
    sets = conformal.SplitConformal.fit(z, y, fit=fit, scored=scored, coverage=0.9)
    stats = sets.evaluate(z)
    assert stats["lac"]["worst_class"] == 2 and stats["lac"]["worst_class_coverage"] < 0.85
    mondrian = stats["lac_class_conditional"]
    assert mondrian["worst_class_coverage"] > 0.87
    low, high = mondrian["worst_class_coverage_interval"]
    n_worst = int((y[scored] == mondrian["worst_class"]).sum())
    assert mondrian["worst_class_n"] == n_worst and low < mondrian["worst_class_coverage"] < high
    assert [low, high] == conformal.clopper_pearson(round(mondrian["worst_class_coverage"] * n_worst), n_worst)
    record = sets.records(z)["lac_class_conditional"]
    assert record["threshold"] is None and len(record["class_thresholds"]) == 3


def test_clopper_pearson_intervals():
    from scipy.stats import binomtest

    for k, n in ((9, 10), (0, 12), (12, 12), (450, 500)):
        expected = binomtest(k, n).proportion_ci(0.95, method="exact")
        assert conformal.clopper_pearson(k, n) == pytest.approx([expected.low, expected.high], abs=1e-9)


def test_clopper_pearson_does_not_import_scipy_stats():
    """Its beta quantiles come from scipy.special: scipy.stats, half a second to import, stays out of an audit."""
    import subprocess

    script = (
        "import sys\nfrom macs_audit.metrics import conformal\nconformal.clopper_pearson(450, 500)\n"
        "sys.exit(int('scipy.stats' in sys.modules))"
    )
    assert subprocess.run([sys.executable, "-c", script], timeout=120).returncode == 0


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
    intervals = (stats.pop("coverage_interval"), stats.pop("worst_class_coverage_interval"))
    assert stats == {
        "coverage": 0.5,
        "mean_set_size": 1.25,
        "worst_class_coverage": 0.5,
        "worst_class": 0,
        "worst_class_n": 2,
    }
    assert intervals == (conformal.clopper_pearson(2, 4), conformal.clopper_pearson(1, 2))


def test_coverage_outside_zero_one_is_a_usage_error():
    with pytest.raises(UsageError, match="--coverage"):
        conformal.fit_thresholds(np.zeros((3, 2)), np.zeros(3, int), 1.0)


def test_the_lowest_view_keeps_its_clopper_pearson_interval():
    views = {
        "fog@1": {"lac": {"coverage": 0.9, "mean_set_size": 1.0, "coverage_interval": [0.85, 0.94]}},
        "fog@5": {"lac": {"coverage": 0.7, "mean_set_size": 2.0, "coverage_interval": [0.62, 0.77]}},
    }
    summary = conformal.summarize_views(views)["lac"]
    assert summary["lowest_view"] == "fog@5" and summary["lowest_coverage_interval"] == [0.62, 0.77]
    assert summary["coverage"] == pytest.approx(0.8) and summary["mean_set_size"] == pytest.approx(1.5)
