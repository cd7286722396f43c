"""Choosing between post-hoc calibrators: the table, the choice, the refusals, and `calibrate --method all`."""

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from macs_audit.calibrators.base import METHODS
from macs_audit.calibrators.selection import UNCALIBRATED, compare_calibrators, parse_methods, scores_of
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
    assert selection.best.scores["nll"] == min(t.scores["nll"] for t in fitted)
    assert selection.best.scores["nll"] < selection.trials[0].scores["nll"]  # the overconfident model improves
    by_accuracy = compare_calibrators(z_fit, y_fit, z_eval, y_eval, select="accuracy")
    assert by_accuracy.best.scores["accuracy"] == max(t.scores["accuracy"] for t in by_accuracy.trials[1:])
    table = selection.to_dict()
    assert table["selected"] == selection.selected and table["n_fit"] == len(y_fit)
    assert set(table["methods"][1]) == {"method", "label", "scores", "n_parameters"}


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
    written = load_predictor(out / "model.onnx", device="cpu").predict(images)
    assert np.allclose(written, original / record["parameters"]["temperature"], rtol=1e-5, atol=1e-6)
