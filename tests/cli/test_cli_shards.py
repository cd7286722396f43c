"""`evaluate --data` and `--shift-data` on WebDataset shards (webdataset's own writer) give the report the same
photographs give as a folder: the clean view, a random perturbation view (seeded by batch position), the
intervals, the calibration split and the shift section."""

import json

import pytest
from conftest import linear_onnx
from fixtures.shift_trees import write_folder_and_shards
from typer.testing import CliRunner

from macs_audit.cli import app

wds = pytest.importorskip("webdataset")
runner = CliRunner()
ARGS = ["--bootstrap", "50", "--perturbations", "noise", "--sensitivity-samples", "0", "--calibrators", "none"]


def _same(a, b, path=""):
    """The two JSON values equal, numbers within float rounding."""
    if isinstance(a, dict):
        assert a.keys() == b.keys(), path
        for key in a:
            _same(a[key], b[key], f"{path}.{key}")
    elif isinstance(a, list):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _same(x, y, f"{path}[{i}]")
    elif isinstance(a, float):
        assert a == pytest.approx(b, rel=1e-9, abs=1e-12), path
    else:
        assert a == b, path


def test_shards_and_the_folder_give_the_same_report(tmp_path):
    folder, spec = write_folder_and_shards(tmp_path, classes=10, per_class=4, per_shard=7)
    model = linear_onnx(tmp_path / "m.onnx")
    reports = []
    for data in (str(folder), spec):
        out = tmp_path / f"r{len(reports)}.json"
        args = ["evaluate", str(model), "--data", data, "--shift-data", f"again={data}", "--batch-size", "9"]
        result = runner.invoke(app, [*args, *ARGS, "-o", str(out), "-q"])
        assert result.exit_code == 0, result.output
        reports.append(json.loads(out.read_text()))
    from_folder, from_shards = reports
    assert from_shards["data"]["format"] == "shards" and from_shards["data"]["n"] == 40
    for key in ("clean", "views", "temperature_scaling", "conformal", "margin_histogram"):
        _same(from_folder[key], from_shards[key], key)
    for entry in ("restricted", "unrestricted"):
        _same(from_folder["shift"]["sets"]["again"][entry], from_shards["shift"]["sets"]["again"][entry], entry)
    assert from_shards["shift"]["sets"]["again"]["format"] == "shards"


@pytest.mark.slow
@pytest.mark.parametrize("per_shard", [7, 100])
def test_shards_under_torchrun_equal_one_process(tmp_path, per_shard):
    """2 gloo processes, each with the batches whose first image is in its shards (shard s: rank s % 2; with one
    shard, rank 1 has none), read at their offsets; the merge is the exact one."""
    from test_distributed import compare
    from torchrun import evaluate_alone_and_sharded

    _, spec = write_folder_and_shards(tmp_path, classes=10, per_class=4, per_shard=per_shard)
    model = linear_onnx(tmp_path / "m.onnx")
    args = [str(model), "--data", spec, "--shift-data", f"again={spec}", "--batch-size", "9", *ARGS, "-q"]
    a, b = evaluate_alone_and_sharded(args, tmp_path)
    assert b["runtime"]["world_size"] == 2 and b["data"]["format"] == "shards"
    assert set(compare(a, b)) <= {"/runtime/world_size", "/created"}
