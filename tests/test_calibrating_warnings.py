"""`calibrate` refuses fit data the model looks trained on (as `finetune` does), and warns, on stderr and in its
result, when the fitted temperature makes the held-out metrics worse, and says why (fit data the model was trained
on, or data unlike the evaluation data)."""

import json

import numpy as np
from conftest import fit_right_held_wrong, linear_onnx, tiny_images
from fixtures.synthetic_report import synthetic_report
from typer.testing import CliRunner

from macs_audit.calibrating import held_out_warnings
from macs_audit.cli import app
from macs_audit.models.predictor import load_predictor

runner = CliRunner()


def test_a_worse_held_out_nll_warns_and_names_the_training_data_as_the_likely_cause():
    before = synthetic_report(accuracy=0.80, ece=0.03)
    after = synthetic_report(accuracy=0.80, ece=0.09)  # NLL and ECE both higher after
    (message,) = held_out_warnings(before, after, "temperature scaling (T = 0.4100)", fit_accuracy=0.999)
    assert "T = 0.4100" in message and "NLL 0.7300 -> 0.7900" in message and "ECE 3.00% -> 9.00%" in message
    assert "99.9% accurate on the fit data but 80.0% on the evaluation data" in message
    assert "trained on" in message
    (other,) = held_out_warnings(before, after, "temperature scaling (T = 0.4100)", fit_accuracy=0.80)
    assert "differ" in other and "trained on" in other  # the advice stands; the cause is not the training set
    assert (
        held_out_warnings(after, before, "temperature scaling (T = 2.0000)", fit_accuracy=0.999) == []
    )  # better held out: nothing to say


def test_calibrate_fit_on_data_the_model_gets_right_warns_on_stderr_and_in_calibration_json(tmp_path):
    """Fit data labelled with the model's own predictions (it is 100% right there, like its training set):
    the fit sharpens the model, which the evaluation data punishes."""
    model = linear_onnx(tmp_path / "model.onnx")
    x, y = tiny_images(200, seed=1)
    predicted = load_predictor(model, device="cpu").predict(x.transpose(0, 3, 1, 2).astype(np.float32) / 255)
    np.savez(tmp_path / "train.npz", x=x, y=predicted.argmax(1))
    x, y = tiny_images(200, seed=2)
    np.savez(tmp_path / "test.npz", x=x, y=y)
    args = ["calibrate", str(model), "--eval-data", str(tmp_path / "test.npz"), "--device", "cpu", "--quiet"]
    args += ["--bootstrap", "0", "--perturbations", "none", "--sensitivity-samples", "0", "--calibration-split", "0"]
    # The decision finetune makes: such fit data is refused before anything is written ...
    refused = runner.invoke(app, [*args, "--data", str(tmp_path / "train.npz"), "--out", str(tmp_path / "no")])
    assert refused.exit_code == 2, refused.output
    message = " ".join(refused.output.split())
    assert "the fit data looks trained on: the model is 100.0% accurate on the fit data" in message
    assert "--force-calibration" in message and not (tmp_path / "no").exists()
    # ... unless forced: then written, with both warnings.
    forced = [*args, "--data", str(tmp_path / "train.npz"), "--out", str(tmp_path / "bad"), "--force-calibration"]
    result = runner.invoke(app, forced)
    assert result.exit_code == 0, result.output
    saved = json.loads((tmp_path / "bad" / "calibration.json").read_text())
    assert saved["parameters"]["temperature"] < 1
    # (the model predicts only some classes, so these labels lack the others: that warning comes first)
    missing, trained_on, worse = saved["warnings"]
    assert missing.startswith("the fit data has no images of class 0, 3, 5, 6, 7, 8, 9:")
    assert trained_on.startswith("the fit data looks trained on:") and "--force-calibration" in trained_on
    assert worse.startswith("the fitted temperature scaling (T = ")
    assert "warning: the fitted temperature scaling (T = " in result.stderr
    assert "100.0% accurate on the fit data" in result.stderr
    assert "made the held-out metrics worse (NLL" in " ".join(result.stderr.split())
    x, y = tiny_images(200, seed=3)  # held-out data like the evaluation data: the fit helps, no warning
    np.savez(tmp_path / "val.npz", x=x, y=y)
    result = runner.invoke(app, [*args, "--data", str(tmp_path / "val.npz"), "--out", str(tmp_path / "good")])
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / "good" / "calibration.json").read_text())["warnings"] == []
    assert "warning" not in result.stderr


def test_calibrate_writes_nothing_when_no_map_beats_the_uncalibrated_model(tmp_path):
    """Fit data whose --holdout part the model gets wrong and whose fitted part it gets right (built with the
    documented split, data.splits.stratified_split, seed 0): the temperature fitted on the right part sharpens
    the model, the held-out part punishes it, so no map beats the uncalibrated model there. calibrate exits 2
    and writes nothing; --force-calibration writes the best map (fitted on all of it) and says why it should not."""
    model = linear_onnx(tmp_path / "model.onnx")
    x, _ = tiny_images(2000, seed=1)
    predicted = load_predictor(model, device="cpu").predict(x.transpose(0, 3, 1, 2).astype(np.float32) / 255)
    predicted = predicted.argmax(1)
    images, labels = fit_right_held_wrong(x, predicted, 4)  # 4 a class: 1 held out, 3 fitted on
    np.savez(tmp_path / "fit.npz", x=images, y=labels)
    x, y = tiny_images(200, seed=2)
    np.savez(tmp_path / "test.npz", x=x, y=y)
    args = ["calibrate", str(model), "--data", str(tmp_path / "fit.npz"), "--eval-data", str(tmp_path / "test.npz")]
    args += ["--device", "cpu", "--quiet", "--bootstrap", "0", "--perturbations", "none"]
    args += ["--sensitivity-samples", "0", "--calibration-split", "0"]
    refused = runner.invoke(app, [*args, "--out", str(tmp_path / "no")])
    assert refused.exit_code == 2, refused.output
    message = " ".join(refused.output.split())
    # 3 held-out images cannot tell a map from none: the refusal says so (the map's loss there is in brackets).
    assert "too few images to select a map: 3 held-out images, need at least 100" in message
    assert "scored no better held-out nll than the uncalibrated model" in message
    assert "nothing written" in message and "--force-calibration" in message and not (tmp_path / "no").exists()
    forced = runner.invoke(app, [*args, "--out", str(tmp_path / "forced"), "--force-calibration"])
    assert forced.exit_code == 0, forced.output
    saved = json.loads((tmp_path / "forced" / "calibration.json").read_text())
    assert saved["method"] == "temperature" and saved["fit_data"]["n_fitted_on"] == 12  # fitted again on all
    assert saved["selection"]["selected"] == "uncalibrated" and saved["selection"]["best_map"] == "temperature"
    assert any(w.startswith("too few images to select a map: 3 held-out images") for w in saved["warnings"])
