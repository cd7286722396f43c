"""--corruption-set end to end: `corrupt` and `evaluate` on a tiny model at 224 px and 64 px pick the
set by the images' size (or take the flag), write and read the grid, and the report names the set."""

import json

import numpy as np
import pytest
from conftest import linear_onnx, tiny_images
from typer.testing import CliRunner

from macs_audit.cli import app

runner = CliRunner()
GRID = ["--corruptions", "gaussian_noise,pixelate", "--batch-size", "5"]
QUICK = ["--perturbations", "none", "--sensitivity-samples", "0", "--bootstrap", "0", "--calibration-split", "0"]


def _evaluate(model, data, report, *extra):
    result = runner.invoke(app, ["evaluate", str(model), "--data", str(data), "-o", str(report), *QUICK, *extra])
    return result, (json.loads(report.read_text()) if result.exit_code == 0 else None)


@pytest.mark.parametrize(("size", "expected"), [(224, "imagenet"), (64, "tiny-imagenet")])
def test_auto_set_generated_written_and_read(tmp_path, size, expected):
    x, y = tiny_images(10, size=size)
    data = tmp_path / "d.npz"
    np.savez(data, x=x, y=y)
    model = linear_onnx(tmp_path / "m.onnx", size=size)

    grid = tmp_path / "grid"
    result = runner.invoke(app, ["corrupt", "--data", str(data), "--out", str(grid), *GRID])
    assert result.exit_code == 0, result.output
    assert f"{expected} set on {size}x{size} images (auto" in result.output
    # Written in the layout the set was released in: an image tree, one folder per severity and class.
    assert "tree layout" in result.output
    assert sorted(p.name for p in (grid / "pixelate").iterdir()) == ["1", "2", "3", "4", "5"]
    assert sum(1 for _ in (grid / "pixelate" / "3").rglob("*.jpg")) == 10

    result, generated = _evaluate(model, data, tmp_path / "g.json", *GRID)
    assert result.exit_code == 0, result.output
    summary = generated["corruption_summary"]
    assert summary["corruption_set"] == expected and summary["image_size"] == [size, size]
    assert summary["corruption_set_choice"].startswith("auto")
    assert f"{expected} set on {size}x{size} images" in result.output
    if expected == "imagenet":  # CE against AlexNet's published ImageNet-C errors, the benchmark's normaliser
        from macs_audit.metrics import alexnet

        errors = {
            v["severity"]: 1 - v["metrics"]["accuracy"] for v in generated["views"] if v["corruption"] == "pixelate"
        }
        assert summary["baseline"]["model"] == alexnet.NAME and set(summary["ce"]) == {"gaussian_noise", "pixelate"}
        assert summary["ce"]["pixelate"] == pytest.approx(sum(errors.values()) / sum(alexnet.ERRORS["pixelate"]))
    else:
        assert "ce" not in summary  # no published baseline for Tiny-ImageNet-C

    result, read = _evaluate(model, data, tmp_path / "r.json", *GRID, "--corrupted-data", str(grid))
    assert result.exit_code == 0, result.output
    assert read["corruption_summary"]["corruption_set_choice"] == "read from files"
    # JPEG, as released: the predictions read back agree with the generated ones up to its loss.
    for got, want in zip(read["views"], generated["views"], strict=True):
        assert abs(got["metrics"]["accuracy"] - want["metrics"]["accuracy"]) <= 0.2


def test_a_size_far_from_every_set_needs_the_flag(tmp_path):
    x, y = tiny_images(10, size=128)
    data = tmp_path / "d.npz"
    np.savez(data, x=x, y=y)
    model = linear_onnx(tmp_path / "m.onnx", size=128)
    result, _ = _evaluate(model, data, tmp_path / "r.json", *GRID)
    assert result.exit_code == 2 and "--corruption-set" in result.output and "128x128" in result.output
    result, report = _evaluate(model, data, tmp_path / "r.json", *GRID, "--corruption-set", "imagenet")
    assert result.exit_code == 0, result.output
    summary = report["corruption_summary"]
    assert summary["corruption_set"] == "imagenet" and summary["corruption_set_choice"] == "--corruption-set imagenet"
    result = runner.invoke(app, ["corrupt", "--data", str(data), "--out", str(tmp_path / "o"), *GRID])
    assert result.exit_code == 2 and "--corruption-set" in result.output
    result = runner.invoke(app, ["corrupt", "--data", str(data), "--out", str(tmp_path / "o"), "--corruption-set", "x"])
    assert result.exit_code == 2 and "tiny-imagenet" in result.output
