"""The robustness half of the audit end to end through the CLI."""

import json

import numpy as np
import pytest
from conftest import linear_onnx, tiny_images
from typer.testing import CliRunner

from macs_audit.cli import app

runner = CliRunner()


def test_corruption_grid_end_to_end_through_the_cli(tmp_path):
    model = linear_onnx(tmp_path / "m.onnx")
    x, y = tiny_images(40)
    np.savez(tmp_path / "d.npz", x=x, y=y)
    grid = ["--corruptions", "gaussian_noise,brightness,glass_blur", "--severities", "1,5"]
    grid += ["--perturbations", "all", "--sensitivity-samples", "20", "--bootstrap", "0"]

    def evaluate(out):
        return runner.invoke(app, ["evaluate", str(model), "--data", str(tmp_path / "d.npz"), "-o", str(out), *grid])

    out = tmp_path / "r.json"
    result = evaluate(out)
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    cells = [v for v in report["views"] if v["kind"] == "corruption"]
    assert [(v["corruption"], v["severity"]) for v in cells] == [
        ("gaussian_noise", 1),
        ("gaussian_noise", 5),
        ("brightness", 1),
        ("brightness", 5),
        ("glass_blur", 1),
        ("glass_blur", 5),
    ]
    assert all(v["metrics"]["n"] == 40 for v in cells)
    summary = report["corruption_summary"]
    assert set(summary["corruptions"]) == {"gaussian_noise", "brightness", "glass_blur"}
    assert summary["families"]["noise"]["accuracy"] == pytest.approx(
        summary["corruptions"]["gaussian_noise"]["accuracy"]
    )
    rob = report["robustness"]
    assert rob["robust_view"] == "noise+blur" and 0 <= rob["robust_accuracy"] <= 1
    assert rob["sensitivity"]["n"] == 20 and rob["robustness_ratio"] is not None
    assert "Corruptions (accuracy by severity)" in result.stdout
    # The same seed gives the same grid.
    again = tmp_path / "r2.json"
    evaluate(again)
    assert json.loads(again.read_text())["views"] == report["views"]
