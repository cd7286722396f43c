"""Feature-space OOD detectors against pytorch-ood's (the same features, the relation where their definition
differs from the paper's) and against direct numpy computations; shrinkage, bad input and the metrics they plug
into. Features: scikit-learn's digits through a fixed random projection and a ReLU, a ridge-regression head."""

import contextlib
from unittest import mock

import numpy as np
import pytest
from sklearn.covariance import ledoit_wolf
from sklearn.datasets import load_digits

from macs_audit.errors import InputError, UsageError
from macs_audit.metrics import feature_ood, ood

N_FIT = 1200


@pytest.fixture(scope="module")
def digits():
    """Fit features and labels, scored in-distribution and noise features, the head (W, b) and its logits."""
    pixels, labels = load_digits(return_X_y=True)
    rng = np.random.default_rng(0)
    projection = rng.normal(size=(64, 64)) / 8
    features = np.maximum(pixels @ projection, 0)
    # A feature that is 0 on nearly every digit leaves the covariance near-singular, which pytorch-ood's 1e-6
    # ridge and our shrinkage treat differently: the reference comparisons keep the features that vary.
    live = features[:N_FIT].std(axis=0) > 1
    projection = projection[:, live]
    features = features[:, live].astype(np.float32)
    noise = np.maximum(rng.uniform(0, 16, size=(300, 64)) @ projection, 0).astype(np.float32)
    fit_x, fit_y = features[:N_FIT], labels[:N_FIT]
    design = np.c_[fit_x, np.ones(N_FIT)]
    solution = np.linalg.solve(design.T @ design + np.eye(design.shape[1]), design.T @ (10 * np.eye(10)[fit_y]))
    weight, bias = solution[:-1].T, solution[-1]
    scored = np.concatenate([features[N_FIT:], noise])
    return {
        "fit_x": fit_x,
        "fit_y": fit_y,
        "x": scored,
        "n_in": len(features) - N_FIT,
        "weight": weight,
        "bias": bias,
        "logits": lambda f: f.astype(np.float64) @ weight.T + bias,
    }


def fitted(digits, names=feature_ood.DETECTORS, **options):
    d = digits
    return feature_ood.fit_detectors(
        d["fit_x"], d["fit_y"], d["logits"](d["fit_x"]), d["weight"], d["bias"], names, **options
    )


def scores(digits, names=feature_ood.DETECTORS, **options):
    return fitted(digits, names, **options).scores(digits["x"], digits["logits"](digits["x"]))


def direct_mahalanobis(fit_x, fit_y, x, covariance=None):
    """-min_k (x - mu_k)^T S^-1 (x - mu_k), S the class-centred second moment / N, by its definition."""
    fit_x, x = fit_x.astype(np.float64), x.astype(np.float64)
    means = np.stack([fit_x[fit_y == k].mean(axis=0) for k in range(10)])
    centred = fit_x - means[fit_y]
    precision = np.linalg.inv(centred.T @ centred / len(fit_x) if covariance is None else covariance)
    distances = np.stack([np.einsum("nd,de,ne->n", x - mu, precision, x - mu) for mu in means], axis=1)
    return -distances.min(axis=1)


def direct_knn(fit_x, x, k):
    """-(k-th smallest distance) between L2-normalised rows, from the full distance matrix."""
    unit = lambda a: a.astype(np.float64) / np.linalg.norm(a.astype(np.float64), axis=1, keepdims=True)  # noqa: E731
    distances = np.linalg.norm(unit(x)[:, None, :] - unit(fit_x)[None, :, :], axis=2)
    return -np.sort(distances, axis=1)[:, k - 1]


def test_mahalanobis_is_its_direct_computation(digits):
    ours = scores(digits, ["mahalanobis"])["mahalanobis"]
    np.testing.assert_allclose(ours, direct_mahalanobis(digits["fit_x"], digits["fit_y"], digits["x"]), rtol=1e-9)


@pytest.mark.parametrize("k", [1, 7, 50])
def test_knn_is_its_direct_computation_in_any_chunks(digits, k, monkeypatch):
    expected = direct_knn(digits["fit_x"], digits["x"], k)
    np.testing.assert_allclose(scores(digits, ["knn"], knn_k=k)["knn"], expected, rtol=1e-12)
    monkeypatch.setattr(feature_ood, "CHUNK_ELEMENTS", 5000)  # one scored row per chunk
    np.testing.assert_allclose(scores(digits, ["knn"], knn_k=k)["knn"], expected, rtol=1e-12)
    monkeypatch.setattr(feature_ood, "KNN_GROUP", 2)  # enough groups on the digits for the grouped selection
    np.testing.assert_allclose(scores(digits, ["knn"], knn_k=k)["knn"], expected, rtol=1e-12)


@pytest.mark.parametrize(("columns", "c"), [(5003, 20), (4800, 75), (300, 20)])
def test_the_grouped_selection_finds_each_rows_largest_values(columns, c):
    """The c largest of each row (as values: ties may pick either column), grouped or, for few columns, not."""
    similarity = np.random.default_rng(columns).standard_normal((40, columns)).astype(np.float32)
    similarity[3] = 0.5  # a row of ties
    picked = feature_ood._most_similar(similarity, c)
    assert picked.shape == (40, c) and all(len(set(row)) == c for row in picked)
    ours = np.sort(np.take_along_axis(similarity, picked, axis=1), axis=1)
    np.testing.assert_array_equal(ours, np.sort(similarity, axis=1)[:, -c:])


def test_knn_scores_a_fit_feature_at_distance_zero(digits):
    d = digits
    s = fitted(digits, ["knn"], knn_k=1).scores(d["fit_x"][:50], d["logits"](d["fit_x"][:50]))["knn"]
    np.testing.assert_allclose(s, 0, atol=1e-7)


def test_knn_k_is_fifty_per_fifty_thousand_and_vim_dimension_the_papers_rule():
    assert [feature_ood.knn_k(n) for n in (50_000, 1_200, 100, 1_281_167)] == [50, 1, 1, 1281]
    assert [feature_ood.vim_dimension(d) for d in (64, 512, 768, 2048)] == [32, 256, 512, 1000]


@contextlib.contextmanager
def pytorch_ood_in_float64():
    """pytorch-ood's detectors with float64 tensors: its Mahalanobis/RMD allocate with the default dtype, and ViM
    casts W, b and the features with `.float()`, made a no-op here, so that both sides compute in float64 (in
    float32 they agree to about 1e-4 only)."""
    pytest.importorskip("pytorch_ood", reason="pytorch-ood (the test extra) is the detectors' reference")
    import torch

    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        with mock.patch.object(torch.Tensor, "float", lambda self: self):
            yield torch
    finally:
        torch.set_default_dtype(previous)


def test_every_detector_equals_pytorch_oods(digits):
    """Each detector against pytorch-ood 0.4 on the same features. pytorch-ood returns outlier scores (higher =
    OOD); where its definition differs from the paper's by a constant factor, ours is the paper's:
    - Mahalanobis: it scores half the squared distance and inverts the class-centred sum of f f^T, not its mean
      (a covariance N times too large): ours = -2 N theirs. Its 1e-6 ridge on that sum is below the tolerance here.
    - RMD: both covariances are sums, not means: ours = -N theirs.
    - KNN (scikit-learn's NearestNeighbors; no faiss), ViM, ReAct (energy), ASH-S (energy): ours = -theirs.
    - GEN: it averages the top-M terms and clamps p to [1e-7, 1 - 1e-7]; the paper's code sums and does not clamp:
      ours = -M theirs where no probability is clamped (test_gen_follows_the_paper covers the others)."""
    from pytorch_ood.detector import ASH, GEN, KNN, RMD, Mahalanobis, ReAct, ViM

    d = digits
    n, k = N_FIT, 10
    ours = fitted(digits, knn_k=50)
    ours_scores = ours.scores(d["x"], d["logits"](d["x"]))
    with pytorch_ood_in_float64() as torch:
        f, y, x = (torch.from_numpy(np.asarray(a, dtype=np.float64)) for a in (d["fit_x"], d["fit_y"], d["x"]))
        y = y.long()
        w, b = torch.from_numpy(d["weight"]), torch.from_numpy(d["bias"])

        def head(maps):
            return maps.flatten(1) @ w.T + b

        theirs = {
            "mahalanobis": -2 * n * Mahalanobis(None).fit_features(f, y).predict_features(x),
            "rmds": -n * RMD(None).fit_features(f, y).predict_features(x),
            "knn": -KNN(None, k=50).fit_features(f, y).predict_features(x),
            "vim": -ViM(None, d=ours.settings()["vim"]["dimension"], w=w, b=b).fit_features(f, y).predict_features(x),
            "react": -ReAct(None, head, percentile=0.9)
            .fit_feature_maps(f[:, :, None, None], y)
            .predict_feature_maps(x[:, :, None, None]),
            "ash_s": -ASH(None, head, variant="ash-s", percentile=0.9).predict_feature_maps(x[:, :, None, None]),
            "gen": -k * GEN.score(head(x), gamma=0.1, M=100),
        }
        probabilities = torch.softmax(head(x), dim=1).numpy()
    unclamped = ((probabilities > 1e-7) & (probabilities < 1 - 1e-7)).all(axis=1)
    assert unclamped.sum() > 200
    for name in feature_ood.DETECTORS:
        rows = unclamped if name == "gen" else slice(None)
        np.testing.assert_allclose(ours_scores[name][rows], theirs[name].numpy()[rows], rtol=1e-6, err_msg=name)


def test_gen_follows_the_paper():
    """The paper's code (softmax, the M largest, sum of p^g (1 - p)^g, negated) on moderate logits with M < K; on
    a confident sample, the closed form, whose 1 - p of the largest class float64's softmax rounds to 0."""
    z = np.random.default_rng(1).normal(size=(40, 150)) * 3
    p = np.exp(z - z.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    top = np.sort(p, axis=1)[:, -100:]
    np.testing.assert_allclose(feature_ood.gen_scores(z), -(top**0.1 * (1 - top) ** 0.1).sum(axis=1), rtol=1e-12)
    # logits (40, 0, 0): p_1 = 1 / (1 + 2e), p_2 = p_3 = e / (1 + 2e), e = exp(-40)
    e = np.exp(-40.0)
    log_first = -np.log1p(2 * e) + np.log(2 * e) - np.log1p(2 * e)  # log p_1 + log(1 - p_1)
    log_other = -40 - np.log1p(2 * e) + np.log1p(-e / (1 + 2 * e))
    expected = -(np.exp(0.1 * log_first) + 2 * np.exp(0.1 * log_other))
    assert feature_ood.gen_scores(np.array([[40.0, 0.0, 0.0]]))[0] == pytest.approx(expected, rel=1e-12)


def test_energy_is_the_logit_scores_energy():
    z = np.random.default_rng(2).normal(size=(30, 7)) * 5
    np.testing.assert_allclose(feature_ood.energy(z), ood.scores(z)["energy"], rtol=1e-14)


def test_a_fit_set_smaller_than_the_feature_dimension_is_shrunk_by_ledoit_wolf(digits):
    d = digits
    index = np.concatenate([np.flatnonzero(d["fit_y"] == c)[:2] for c in range(10)])  # 20 samples, 30+ features
    fit_x, fit_y = d["fit_x"][index], d["fit_y"][index]
    assert len(fit_x) < fit_x.shape[1]
    detectors = feature_ood.fit_detectors(
        fit_x, fit_y, d["logits"](fit_x), d["weight"], d["bias"], ["mahalanobis", "rmds"]
    )
    notes = detectors.notes()
    assert len(notes) == 2 and all("Ledoit-Wolf" in note for note in notes), notes
    ours = detectors.scores(d["x"], d["logits"](d["x"]))
    means = np.stack([fit_x[fit_y == c].mean(axis=0) for c in range(10)]).astype(np.float64)
    class_covariance, _ = ledoit_wolf(fit_x - means[fit_y], assume_centered=True)
    mahalanobis = direct_mahalanobis(fit_x, fit_y, d["x"], class_covariance)
    np.testing.assert_allclose(ours["mahalanobis"], mahalanobis, rtol=1e-8)
    centred = d["x"].astype(np.float64) - fit_x.mean(axis=0, dtype=np.float64)
    background, _ = ledoit_wolf(fit_x - fit_x.mean(axis=0, dtype=np.float64), assume_centered=True)
    background_distance = np.einsum("nd,de,ne->n", centred, np.linalg.inv(background), centred)
    np.testing.assert_allclose(ours["rmds"], background_distance + mahalanobis, rtol=1e-8)
    assert detectors.settings()["mahalanobis"]["covariance_shrinkage"] > 0


def test_scores_plug_into_the_ood_metrics(digits):
    d = digits
    s = scores(digits)
    logit_scores = ood.scores(d["logits"](d["x"]))
    both = {**logit_scores, **s}
    s_in, s_out = (
        {name: v[: d["n_in"]] for name, v in both.items()},
        {name: v[d["n_in"] :] for name, v in both.items()},
    )
    section = ood.scores_section(s_in, s_out, n_resamples=50, seed=3)
    assert list(section) == list(dict.fromkeys([*ood.SCORES, *feature_ood.DETECTORS]))  # gen: a logit score too
    logit_section = ood.ood_section(d["logits"](d["x"])[: d["n_in"]], d["logits"](d["x"])[d["n_in"] :], 50, 3)
    assert {name: section[name] for name in ood.SCORES} == logit_section  # the same resamples, the same numbers
    for name in ("mahalanobis", "knn", "vim"):  # the noise images are far from every digit
        assert section[name]["auroc"] > 0.9, (name, section[name])
        lo, hi = section[name]["intervals"]["auroc"]
        assert lo <= section[name]["auroc"] <= hi


def test_a_class_missing_from_the_fit_set_is_named(digits):
    d = digits
    keep = d["fit_y"] != 3
    fit_x, fit_y = d["fit_x"][keep], d["fit_y"][keep]
    names = [f"digit {c}" for c in range(10)]
    with pytest.raises(InputError, match=r"no sample of class 3 \(digit 3\)") as caught:
        feature_ood.fit_detectors(
            fit_x, fit_y, d["logits"](fit_x), d["weight"], d["bias"], ["knn", "rmds"], class_names=names
        )
    assert "\n" not in str(caught.value)
    # the detectors without class means fit without it
    feature_ood.fit_detectors(fit_x, fit_y, d["logits"](fit_x), d["weight"], d["bias"], ["knn", "vim", "react"])


def test_nan_features_are_refused_with_their_count_and_first_index(digits):
    d = digits
    bad = d["fit_x"].copy()
    bad[[5, 9], [0, 3]] = np.nan
    with pytest.raises(InputError, match=r"fit features: 2 samples .*NaN .*sample 5\)"):
        feature_ood.fit_detectors(bad, d["fit_y"], d["logits"](d["fit_x"]), d["weight"], d["bias"])
    scored = d["x"].copy()
    scored[7, 1] = np.inf
    with pytest.raises(InputError, match=r"scored features: 1 samples .*sample 7\)"):
        fitted(digits, ["gen"]).scores(scored, d["logits"](d["x"]))


def test_bad_detectors_options_and_shapes_are_refused(digits):
    with pytest.raises(UsageError, match="unknown feature OOD detector 'odin'"):
        fitted(digits, ["odin"])
    with pytest.raises(UsageError, match="react_percentile"):
        fitted(digits, ["react"], react_percentile=100)
    with pytest.raises(UsageError, match="unknown detector option 'k'"):
        fitted(digits, ["knn"], k=5)
    with pytest.raises(InputError, match="exceeds the 1200 fit samples"):
        fitted(digits, ["knn"], knn_k=5000)
    d = digits
    with pytest.raises(InputError, match="dimensions"):
        fitted(digits, ["knn"]).scores(d["x"][:, :-1], d["logits"](d["x"]))


def test_a_zero_feature_vector_scores_finitely(digits):
    d = digits
    x = np.zeros((2, d["x"].shape[1]), dtype=np.float32)
    s = fitted(digits).scores(x, d["logits"](x))
    assert all(np.isfinite(v).all() for v in s.values())
    np.testing.assert_allclose(s["ash_s"], feature_ood.energy(d["bias"][None]).repeat(2))  # nothing kept: W 0 + b
