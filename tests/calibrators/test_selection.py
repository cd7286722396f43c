"""Choosing between post-hoc calibrators: the table, the choice, the refusals, and `calibrate --method all`."""

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from macs_audit.calibrators.base import LABELS, METHODS, MIN_IMAGES_PER_CLASS, fit_calibrator
from macs_audit.calibrators.selection import (
    UNCALIBRATED,
    compare_calibrators,
    paired_interval,
    parse_methods,
    scores_of,
)
from macs_audit.cli import app
from macs_audit.errors import UsageError
from macs_audit.metrics.accumulators import calibration_metrics

runner = CliRunner()


def test_every_method_is_scored_on_the_held_out_part_and_the_best_is_chosen(sample_split):
    """On the sample model's real predictions: each row's scores are the metrics of that calibrator's
    output on the held-out half, and the choice is the best row by the chosen score."""
    z_fit, y_fit, z_eval, y_eval = sample_split
    selection = compare_calibrators(z_fit, y_fit, z_eval, y_eval)
    assert [t.method for t in selection.trials] == [UNCALIBRATED, *METHODS]
    assert selection.trials[0].scores == scores_of(z_eval, y_eval)
    for trial in selection.trials[1:]:
        assert trial.refused is None and trial.calibrator is not None
        expected = calibration_metrics(trial.calibrator.transform(z_eval), y_eval, 10)
        assert trial.scores["nll"] == pytest.approx(expected["nll"], rel=1e-12)
        assert trial.scores["smooth_ece"] == pytest.approx(expected["smooth_ece"], rel=1e-12)
    fitted = selection.trials[1:]
    best = min(fitted, key=lambda t: t.scores["nll"])
    assert selection.best.scores["nll"] < selection.trials[0].scores["nll"]  # the overconfident model improves
    # The best by NLL, or a simpler map it does not beat beyond the noise of the 1,000 selection images.
    chosen = selection.best
    assert METHODS.index(chosen.method) <= METHODS.index(best.method)
    if chosen is not best:
        low, high = paired_interval(
            chosen.calibrator.transform(z_eval), best.calibrator.transform(z_eval), y_eval, "nll"
        )
        assert low <= 0 <= high or high >= 0
        assert selection.reason.startswith(f"{LABELS[chosen.method]} kept")
    by_accuracy = compare_calibrators(z_fit, y_fit, z_eval, y_eval, select="accuracy")
    assert by_accuracy.best.scores["accuracy"] <= max(t.scores["accuracy"] for t in by_accuracy.trials[1:])
    table = selection.to_dict()
    assert table["selected"] == selection.selected and table["n_fit"] == len(y_fit) and table["reason"]
    assert set(table["methods"][1]) == {"method", "label", "scores", "n_parameters"}


def test_the_simpler_map_is_kept_unless_the_flexible_one_wins_beyond_the_noise():
    """A small per-class offset scored on 200 images: vector scaling scores a better NLL than temperature
    scaling, but not beyond the noise of those images, so temperature scaling is kept (and says why). A large
    offset on 2,000 images: vector scaling wins beyond the noise and is chosen."""
    rng = np.random.default_rng(0)
    n, k = 4000, 5
    truth = rng.normal(size=(n, k)) * 2
    y = np.array([rng.choice(k, p=np.exp(r) / np.exp(r).sum()) for r in truth])
    fit, held = np.arange(3000), np.arange(3000, 3200)
    slightly = truth * 2.5 + np.array([0.6, 0.0, -0.6, 0.0, 0.0])
    selection = compare_calibrators(slightly[fit], y[fit], slightly[held], y[held], ["temperature", "vector"])
    temperature, vector = selection.trials[1].scores["nll"], selection.trials[2].scores["nll"]
    assert vector < temperature  # the flexible map scored better ...
    assert selection.selected == "temperature" and selection.reason.startswith("temperature scaling kept")
    fit, held = np.arange(0, n, 2), np.arange(1, n, 2)
    biased = truth + np.array([3.0, 0.0, -2.0, 1.0, 0.0])  # a per-class offset a single T cannot undo
    selection = compare_calibrators(biased[fit], y[fit], biased[held], y[held], ["temperature", "vector"])
    assert selection.selected == "vector" and "beats every simpler map" in selection.reason
    low, high = paired_interval(
        selection.trials[1].calibrator.transform(biased[held]),
        selection.best.calibrator.transform(biased[held]),
        y[held],
        "nll",
    )
    assert high < 0


def test_paired_interval_of_per_image_scores_and_of_the_ece():
    rng = np.random.default_rng(1)
    a = np.log(rng.dirichlet(np.ones(3), 500))
    b = np.log(rng.dirichlet(np.ones(3), 500))
    y = rng.integers(0, 3, 500)
    d = -b[np.arange(500), y] + a[np.arange(500), y]
    low, high = paired_interval(a, b, y, "nll")
    assert (low + high) / 2 == pytest.approx(d.mean()) and high - low == pytest.approx(
        2 * 1.96 * d.std(ddof=1) / np.sqrt(500), rel=1e-3
    )
    low, high = paired_interval(a, a.copy(), y, "ece")
    assert low == high == 0.0
    # The bootstrap's ECEs are the table's: on these images, the same values as calibration_metrics.
    from macs_audit.calibrators.selection import _calibration_error

    p = np.exp(a)
    confidence, correct = p.max(axis=1), (p.argmax(axis=1) == y).astype(float)
    metrics = calibration_metrics(a, y, 3)
    for name in ("ece", "smooth_ece"):
        assert _calibration_error(confidence, correct, name) == pytest.approx(metrics[name], abs=1e-12)


def test_class_dependent_maps_are_not_fitted_without_every_class():
    """Fit data lacking classes 8 and 9 (as the last images of a class-sorted file): every map with parameters
    per class is refused and says which classes it lacks; temperature scaling is fitted and chosen."""
    rng = np.random.default_rng(2)
    z = rng.normal(size=(3000, 10)) * 3
    y = (z + rng.gumbel(size=z.shape) * 3).argmax(axis=1)
    fit = np.flatnonzero(y < 8)
    selection = compare_calibrators(z[fit], y[fit], z[:500], y[:500])
    rows = {t.method: t for t in selection.trials}
    assert selection.selected == "temperature" and rows["temperature"].refused is None
    for method in ("vector", "matrix", "dirichlet", "isotonic", "histogram"):
        assert rows[method].calibrator is None, method
        assert f"at least {MIN_IMAGES_PER_CLASS[method]} fit images of every class; class 8, 9 have fewer" in (
            rows[method].refused
        )
    with pytest.raises(UsageError, match="class 8, 9 have fewer"):
        fit_calibrator("dirichlet", z[fit], y[fit])


def test_methods_the_split_is_too_small_for_are_listed_as_refused_not_fitted():
    rng = np.random.default_rng(0)
    z = rng.normal(size=(60, 10)) * 3
    y = rng.integers(0, 10, 60)
    selection = compare_calibrators(z[:20], y[:20], z[30:], y[30:], ["temperature", "matrix", "isotonic"])
    rows = {t.method: t for t in selection.trials}
    assert rows["temperature"].scores is not None and selection.selected == "temperature"
    assert "needs a calibration split of at least 100 images, got 20" in rows["isotonic"].refused
    assert "at least 28 images, got 20" in rows["matrix"].refused and rows["matrix"].calibrator is None
    assert rows["isotonic"].to_dict()["refused"].startswith("isotonic regression on 10 classes")
    with pytest.raises(UsageError, match="no calibration method can be fitted on 30 images"):
        compare_calibrators(z[:30], y[:30], z[30:], y[30:], ["isotonic", "histogram"])


def test_method_lists_and_scores_are_checked():
    assert parse_methods("all") == list(METHODS)
    assert parse_methods("isotonic, temperature") == ["temperature", "isotonic"]
    with pytest.raises(UsageError, match="unknown calibration method platt; choose all or any of temperature"):
        parse_methods("temperature,platt")
    with pytest.raises(UsageError, match="--select 'auroc' is not a score"):
        compare_calibrators(
            np.zeros((4, 2)), np.array([0, 1, 0, 1]), np.zeros((4, 2)), np.array([0, 1, 0, 1]), select="auroc"
        )


def test_calibrate_method_all_writes_the_chosen_model_and_its_table(tmp_path):
    """End to end on a tiny ONNX model: the table on screen and in calibration.json, the chosen model
    written, and the written model reads back the chosen calibrator's probabilities."""
    from conftest import linear_onnx, tiny_images

    from macs_audit.models.predictor import load_predictor

    model = linear_onnx(tmp_path / "model.onnx")
    for name, seed in (("val", 1), ("test", 2)):
        x, y = tiny_images(400, seed=seed)
        np.savez(tmp_path / f"{name}.npz", x=x, y=y)
    out = tmp_path / "cal"
    args = ["calibrate", str(model), "--data", str(tmp_path / "val.npz"), "--eval-data", str(tmp_path / "test.npz")]
    args += ["--out", str(out), "--method", "all", "--select", "ece", "--device", "cpu", "--quiet"]
    args += ["--bootstrap", "0", "--perturbations", "none", "--sensitivity-samples", "0"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    record = json.loads((out / "calibration.json").read_text())
    table = record["selection"]
    assert table["select"] == "ece" and table["n_fit"] + table["n_eval"] == 400 and record["fit_data"]["n"] == 400
    chosen = table["selected"]
    assert record["method"] == chosen
    fitted = [row for row in table["methods"][1:] if "scores" in row]
    assert (
        min(row["scores"]["ece"] for row in fitted) == next(r for r in fitted if r["method"] == chosen)["scores"]["ece"]
    )
    assert "Post-hoc calibrators" in result.output and f"{chosen} *" in result.output
    # On these images temperature scaling has the lowest held-out ECE; the written model applies it.
    assert chosen == "temperature"
    x, _ = tiny_images(50, seed=3)
    images = x.transpose(0, 3, 1, 2).astype(np.float32) / 255
    original = load_predictor(model, device="cpu").predict(images)
    written = load_predictor(out / record["calibrated_model"], device="cpu").predict(images)
    assert np.allclose(written, original / record["parameters"]["temperature"], rtol=1e-5, atol=1e-6)


def test_calibrate_on_fit_data_without_some_classes_warns_first_and_refits_the_choice_on_all_of_it(tmp_path):
    """Fit data holding classes 0-7 only (a class-sorted file cut short): a one-line warning before the table,
    the per-class maps refused in it, and the chosen map (temperature scaling) fitted again on all the images."""
    from conftest import linear_onnx, tiny_images

    from macs_audit.calibrators.temperature import optimal_temperature
    from macs_audit.models.predictor import load_predictor

    model = linear_onnx(tmp_path / "model.onnx")
    x, y = tiny_images(500, seed=1)
    keep = y < 8
    np.savez(tmp_path / "fit.npz", x=x[keep], y=y[keep])
    x, y = tiny_images(200, seed=2)
    np.savez(tmp_path / "test.npz", x=x, y=y)
    out = tmp_path / "cal"
    args = ["calibrate", str(model), "--data", str(tmp_path / "fit.npz"), "--eval-data", str(tmp_path / "test.npz")]
    args += ["--out", str(out), "--method", "all", "--device", "cpu", "--quiet", "--bootstrap", "0"]
    args += ["--perturbations", "none", "--sensitivity-samples", "0", "--calibration-split", "0"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    stderr = " ".join(result.stderr.split())
    assert "the fit data has no images of class 8, 9" in stderr
    record = json.loads((out / "calibration.json").read_text())
    assert record["method"] == "temperature" and record["selection"]["reason"]
    refused = {row["method"]: row.get("refused", "") for row in record["selection"]["methods"]}
    assert all("class 8, 9" in refused[m] for m in ("vector", "matrix", "dirichlet", "isotonic", "histogram"))
    n = int(keep.sum())
    assert record["fit_data"]["n_fitted_on"] == n and record["fit_data"]["n_selected_on"] < n
    # The written T is the one fitted on all the fit images, not on the selection's part of them.
    fit_x = np.load(tmp_path / "fit.npz")
    logits = load_predictor(model, device="cpu").predict(fit_x["x"].transpose(0, 3, 1, 2).astype(np.float32) / 255)
    t_all = optimal_temperature(logits.astype(np.float64), fit_x["y"])
    assert record["parameters"]["temperature"] == pytest.approx(t_all, rel=1e-3)


def test_no_map_is_chosen_when_none_beats_the_uncalibrated_model(sample_logits):
    """The uncalibrated model is a candidate: temperature scaling fitted on 20 of the sample model's images
    (2 a class, as a 100-image audit's split) sharpens it (T = 0.02) and its held-out NLL is 40x the
    uncalibrated model's, so no map is chosen, and `best_map` names the map a forced write would use. A map
    that scores better than no map is applied (the noise rule is between maps). choose_on_holdout, what
    calibrate and finetune decide by, returns no map to write in the first case."""
    from macs_audit.calibrators.selection import choose_on_holdout
    from macs_audit.data.splits import stratified_split

    z, y = sample_logits
    z = z.astype(np.float64)
    fit, held = stratified_split(y, 0.01, seed=0)
    selection = compare_calibrators(z[fit], y[fit], z[held], y[held], ["temperature"])
    uncalibrated, temperature = selection.trials
    assert temperature.calibrator.temperature < 0.1 and temperature.scores["nll"] > 10 * uncalibrated.scores["nll"]
    assert selection.selected == UNCALIBRATED and not selection.calibrates and selection.best_map == "temperature"
    assert selection.best is uncalibrated and selection.to_dict()["selected"] == UNCALIBRATED
    assert selection.reason.startswith("temperature scaling, the map chosen, scored no better held-out nll than")
    by_ece = compare_calibrators(z[fit], y[fit], z[held], y[held], ["temperature"], select="ece")
    assert by_ece.trials[1].scores["ece"] > by_ece.trials[0].scores["ece"] and by_ece.selected == UNCALIBRATED
    # Another 20 images (seed 2): T = 1.54 scores a better held-out NLL than no map, and is chosen.
    fit, held = stratified_split(y, 0.01, seed=2)
    selection = compare_calibrators(z[fit], y[fit], z[held], y[held], ["temperature"])
    assert selection.trials[1].scores["nll"] < selection.trials[0].scores["nll"] and selection.calibrates
    assert selection.selected == selection.best_map == "temperature"
    # 30 images (3 a class), 20 fitted on and 10 scored on: through choose_on_holdout, nothing to write.
    small = stratified_split(y, 0.013, seed=0)[0]
    chosen, calibrator = choose_on_holdout(z[small], y[small], ["temperature"], holdout=0.3, seed=0)
    assert calibrator is None and chosen.selected == UNCALIBRATED
    # With enough images a map that wins is fitted again on all of them.
    chosen, calibrator = choose_on_holdout(z, y, ["temperature"], holdout=0.5, seed=0)
    assert chosen.selected == "temperature" and calibrator is not None and calibrator.fit_size == len(y)
