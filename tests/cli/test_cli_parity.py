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
    common += ["--calibrators", "none", "--perturbations", "noise", "-q"]
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
    assert "INT8 model written to model.int8.onnx (50 calibration images)" in result.output
    result = runner.invoke(app, ["evaluate", "model.int8.onnx", "--reference", "model.onnx", *audit, "-o", "r.json"])
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / "r.json").read_text())["parity"]["views"][0]["n"] == 200
