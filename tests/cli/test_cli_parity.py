"""`evaluate CANDIDATE --reference REFERENCE` through the CLI: the parity section in the JSON and the terminal,
and `--gate` on [gate.parity] failing a broken candidate with the keys it breaks (exit 1)."""

import json
import shutil

import numpy as np
from conftest import linear_onnx, tiny_images
from fixtures.broken_models import scaled_logits
from typer.testing import CliRunner

from macs_audit.cli import app

runner = CliRunner()


def test_evaluate_with_a_reference(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    x, y = tiny_images(200, seed=2)
    np.savez(tmp_path / "data.npz", x=x, y=y)
    reference = linear_onnx(tmp_path / "reference.onnx", seed=3)
    shutil.copy(reference, tmp_path / "copy.onnx")
    scaled_logits(reference, tmp_path / "scaled.onnx")
    (tmp_path / "macs-audit.toml").write_text("[gate.parity]\nmax_ece_increase = 0.01\nmin_agreement = 0.99\n")
    common = ["--reference", "reference.onnx", "--data", "data.npz", "--sensitivity-samples", "0", "--bootstrap", "50"]
    common += ["--calibrators", "none", "--perturbations", "noise"]  # not -q: the tables are read
    result = runner.invoke(app, ["evaluate", "copy.onnx", *common, "-o", "copy.json", "--gate"])
    assert result.exit_code == 0, result.output
    assert "Deployment parity" in result.output
    parity = json.loads((tmp_path / "copy.json").read_text())["parity"]
    assert [v["name"] for v in parity["views"]] == ["clean", "noise"]
    assert parity["reference"]["path"] == "reference.onnx"
    assert all(v["metrics"]["ece"]["interval"] == [0.0, 0.0] for v in parity["views"])
    result = runner.invoke(app, ["evaluate", "scaled.onnx", *common, "--gate"])
    assert result.exit_code == 1, result.output
    assert "parity.clean.max_ece_increase" in result.output and "parity.noise.max_ece_increase" in result.output


def test_export_builds_fp16_and_int8_and_prints_their_parity(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    x, y = tiny_images(200, seed=4)
    np.savez(tmp_path / "data.npz", x=x, y=y)
    linear_onnx(tmp_path / "model.onnx", seed=5)
    audit = ["--data", "data.npz", "--bootstrap", "20", "--perturbations", "none", "-q"]
    result = runner.invoke(app, ["export", "model.onnx", "--precision", "fp16", *audit])
    assert result.exit_code == 0, result.output
    assert "FP16 model written to model.fp16.onnx" in result.output and "Deployment parity" in result.output
    result = runner.invoke(
        app,
        [
            "export",
            "model.onnx",
            "--precision",
            "int8",
            "--calibration-data",
            "data.npz",
            "--calibration-images",
            "50",
            *audit,
        ],
    )
    assert result.exit_code == 0, result.output
    assert (
        "INT8 model written to model.int8.onnx (50 calibration images; for x86-64 CPUs, uint8 activations and 7-bit "
        "weights)" in " ".join(result.output.split())
    )
    result = runner.invoke(app, ["evaluate", "model.int8.onnx", "--reference", "model.onnx", *audit, "-o", "r.json"])
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / "r.json").read_text())["parity"]["views"][0]["n"] == 200


def test_a_shift_set_through_the_cli_gets_its_parity_view_and_gate_keys(tmp_path, monkeypatch):
    from fixtures.shift_trees import image_tree, imagenet_model, subset_classes

    monkeypatch.chdir(tmp_path)
    imagenet_model(tmp_path / "reference.onnx", seed=1)
    imagenet_model(tmp_path / "candidate.onnx", seed=2)
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "val.npz", x=rng.integers(0, 256, (1000, 32, 32, 3), dtype=np.uint8), y=np.arange(1000))
    image_tree(tmp_path / "a", subset_classes("imagenet_a", 3), per_class=2)
    (tmp_path / "macs-audit.toml").write_text('[gate.parity."imagenet-a"]\nmin_agreement = 1.0\n')
    args = ["evaluate", "candidate.onnx", "--reference", "reference.onnx", "--data", "val.npz"]
    args += ["--shift-data", "imagenet-a=a", "--bootstrap", "20", "--perturbations", "none"]
    args += ["--sensitivity-samples", "0", "--calibrators", "none", "-o", "report.json", "--gate"]  # tables read
    result = runner.invoke(app, args)
    assert result.exit_code == 1, result.output  # two random models disagree on the set's six photographs
    assert "parity.imagenet-a.min_agreement" in result.output and "imagenet-a" in result.output
    views = json.loads((tmp_path / "report.json").read_text())["parity"]["views"]
    assert [(v["name"], v["kind"], v["n"]) for v in views] == [("clean", "clean", 1000), ("imagenet-a", "shift", 6)]
