"""The default batch size by the model's input size (issue 41, item 12): 500 at CIFAR's 32x32, as before; 64 at
224x224, where 500 took three times the memory (benchmarks/RESULTS.md); an explicit --batch-size kept; the report
records the batch that ran (runtime.batch_size)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import linear_onnx, tiny_images
from typer.testing import CliRunner

from macs_audit.auditing import default_batch_size
from macs_audit.cli import app

runner = CliRunner()


@pytest.mark.parametrize(
    ("size", "channels", "batch"),
    [((32, 32), 3, 500), ((64, 64), 3, 500), ((96, 96), 3, 500), ((128, 128), 3, 256), ((224, 224), 3, 64)]
    + [((224, 224), 1, 256), ((384, 384), 3, 32), ((518, 518), 3, 16), ((4096, 4096), 3, 1)],
)
def test_the_default_batch_fits_the_budget(size, channels, batch):
    assert default_batch_size(size, channels) == batch


@pytest.mark.parametrize(
    ("size", "args", "batch"),
    [(32, (), 500), (224, (), 64), (224, ("--batch-size", "500"), 500), (32, ("--batch-size", "7"), 7)],
    ids=["32px-default", "224px-default", "224px-explicit-500", "32px-explicit-7"],
)
def test_evaluate_records_the_batch_it_ran(size, args, batch, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    x, y = tiny_images(40, seed=1)  # 32x32 arrays, resized to the model's input in the predictor
    np.savez("data.npz", x=x, y=y)
    linear_onnx(tmp_path / "model.onnx", size=size)
    quick = ["--bootstrap", "0", "--perturbations", "none", "--sensitivity-samples", "0", "--calibrators", "none"]
    result = runner.invoke(app, ["evaluate", "model.onnx", "--data", "data.npz", *quick, *args, "-o", "r.json"])
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / "r.json").read_text())["runtime"]["batch_size"] == batch
