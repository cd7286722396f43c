"""`export`: a refused or failed run leaves nothing new (an earlier output it was to replace as it was); `-o -` is
refused; a defaulted value is never written as declared (plain, fp16 and int8 builds, calibrated and fine-tuned
models); INT8's default calibration count takes what a smaller set holds."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from typer.testing import CliRunner

from macs_audit.cli import app
from macs_audit.models.config import METADATA_PREFIX
from macs_audit.models.export import save_safetensors

runner = CliRunner()
SAMPLE = Path(__file__).resolve().parents[2] / "sample_models" / "resnet9_c10_ce"


def _listing(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir()) if p.is_file()}


@pytest.fixture
def ce(tmp_path) -> Path:
    """The sample checkpoint and its sidecar, as `ce.safetensors` in a folder of their own."""
    shutil.copy(SAMPLE.with_suffix(".safetensors"), tmp_path / "ce.safetensors")
    shutil.copy(SAMPLE.with_suffix(".json"), tmp_path / "ce.json")
    (tmp_path / "existing.onnx").write_bytes(b"an earlier file")
    return tmp_path / "ce.safetensors"


REFUSED = [
    ("tensorrt-without-a-gpu", ["--precision", "fp16", "--provider", "tensorrt", "-o", "out.onnx"], 2, "CUDA GPU"),
    ("onto-an-existing-file", ["--precision", "fp16", "-o", "existing.onnx"], 2, "already exists"),
    (
        "int8-onto-an-existing-file",
        ["--precision", "int8", "--calibration-data", "builtin", "-o", "existing.onnx"],
        2,
        "already exists",
    ),
    ("to-standard-output", ["-o", "-"], 2, "not a stream"),
    ("build-to-standard-output", ["--precision", "fp16", "-o", "-"], 2, "not a stream"),
    (
        "calibration-beyond-the-data",
        ["--precision", "int8", "--calibration-data", "small.npz", "--calibration-images", "50", "--no-audit"],
        3,
        "more than the 40 images",
    ),
]


@pytest.mark.skipif(torch.cuda.is_available(), reason="the TensorRT row needs a machine without a GPU")
@pytest.mark.parametrize(("args", "code", "message"), [r[1:] for r in REFUSED], ids=[r[0] for r in REFUSED])
def test_a_refused_or_failed_export_leaves_nothing_new(ce, monkeypatch, args, code, message):
    rng = np.random.default_rng(0)
    np.savez(ce.parent / "small.npz", x=rng.integers(0, 256, (40, 32, 32, 3), dtype=np.uint8), y=np.arange(40) % 10)
    before = _listing(ce.parent)
    monkeypatch.chdir(ce.parent)
    result = runner.invoke(app, ["export", str(ce), "--limit", "20", "--bootstrap", "0", *args])
    assert result.exit_code == code, result.output
    assert message in result.output and "unexpected" not in result.output
    assert _listing(ce.parent) == before  # no ce.onnx, no out.onnx; existing.onnx byte-identical


def _metadata(path: Path) -> dict[str, str]:
    return {p.key: p.value for p in onnx.load(str(path)).metadata_props}


@pytest.fixture
def undeclared(tmp_path) -> Path:
    """A 3-class checkpoint whose sidecar declares its architecture and classes, not its mean/std."""
    from macs_audit.models.torch import _create

    torch.manual_seed(0)
    model = _create("macs_resnet9_c10", num_classes=3)
    save_safetensors(model, tmp_path / "net.safetensors")
    (tmp_path / "net.json").write_text('{"arch": "macs_resnet9_c10", "num_classes": 3}')
    return tmp_path / "net.safetensors"


@pytest.mark.parametrize(
    "build",
    [[], ["--precision", "fp16"], ["--precision", "int8", "--calibration-data", "small.npz"]],
    ids=["plain", "fp16", "int8"],
)
def test_export_never_writes_a_defaulted_value_as_declared(undeclared, build):
    rng = np.random.default_rng(0)
    small = undeclared.parent / "small.npz"
    x = rng.integers(0, 256, (30, 32, 32, 3), dtype=np.uint8)
    np.savez(small, x=x, y=np.arange(30) % 3, class_names=np.array(["a", "b", "c"]))
    args = ["export", str(undeclared), *[str(small) if a == "small.npz" else a for a in build], "--no-audit"]
    result = runner.invoke(app, args if build else args[:-1])
    assert result.exit_code == 0, result.output
    assert "warning: no --mean or --std given" in result.output  # as evaluate warns of the same model
    written = undeclared.parent / ("net.onnx" if not build else f"net.{build[1]}.onnx")
    meta = _metadata(written)
    assert f"{METADATA_PREFIX}num_classes" in meta  # what the sidecar declared is carried
    assert f"{METADATA_PREFIX}mean" not in meta and f"{METADATA_PREFIX}std" not in meta


def test_int8_by_default_calibrates_on_every_image_of_a_smaller_set(ce):
    rng = np.random.default_rng(0)
    small = ce.parent / "small.npz"
    np.savez(small, x=rng.integers(0, 256, (40, 32, 32, 3), dtype=np.uint8), y=np.arange(40) % 10)
    result = runner.invoke(
        app, ["export", str(ce), "--precision", "int8", "--calibration-data", str(small), "--no-audit"]
    )
    assert result.exit_code == 0, result.output
    assert "all 40 images of the calibration data" in result.output
    assert (ce.parent / "ce.int8.onnx").is_file()


def _small_sets(folder: Path, classes: int = 3) -> list[str]:
    """--data and --eval-data: 60 random 32x32 images each of `classes` named classes."""
    rng = np.random.default_rng(0)
    for name in ("fit", "held"):
        x = rng.integers(0, 256, (60, 32, 32, 3), dtype=np.uint8)
        names = np.array(["a", "b", "c"][:classes])
        np.savez(folder / f"{name}.npz", x=x, y=np.arange(60) % classes, class_names=names)
    return ["--data", str(folder / "fit.npz"), "--eval-data", str(folder / "held.npz")]


QUICK = ["--bootstrap", "0", "--perturbations", "none", "--sensitivity-samples", "0", "--device", "cpu"]


@pytest.mark.parametrize("source", ["checkpoint", "onnx"])
def test_calibrate_never_writes_a_defaulted_value_as_declared(undeclared, source):
    """The calibrated path: a 3-class checkpoint whose sidecar declares no mean/std, or an ONNX model without
    metadata, calibrated with CIFAR-10's defaults: the calibrated model's sidecar (and ONNX metadata) carries what
    was declared, not the defaults, and the run warns as evaluate does."""
    from conftest import linear_onnx

    folder = undeclared.parent
    model = undeclared if source == "checkpoint" else linear_onnx(folder / "lin.onnx", num_classes=3)
    args = ["calibrate", str(model), *_small_sets(folder), "--out", str(folder / "cal"), *QUICK]
    result = runner.invoke(app, [*args, "--force-calibration"])  # random images: a map written whatever it scores
    assert result.exit_code == 0, result.output
    assert "warning: no --mean or --std given" in result.output  # as evaluate warns of the same model
    written = folder / "cal" / f"{model.stem}_calibrated"
    if source == "checkpoint":
        sidecar = json.loads(written.with_suffix(".json").read_text())
        assert sidecar["num_classes"] == 3 and "calibration" in sidecar  # declared values and the fold's record
        assert "mean" not in sidecar and "std" not in sidecar
    else:  # an ONNX model carries its settings in its metadata, no sidecar
        meta = _metadata(written.with_suffix(".onnx"))
        assert f"{METADATA_PREFIX}num_classes" in meta
        assert f"{METADATA_PREFIX}mean" not in meta and f"{METADATA_PREFIX}std" not in meta


def test_finetune_never_writes_a_defaulted_value_as_declared(undeclared, monkeypatch):
    """The fine-tuned path (the training stubbed: it changes no metadata): the fine-tuned and temperature-only
    models' sidecars and the metadata of their ONNX exports carry what was declared, not CIFAR-10's defaults, and
    the run warns as evaluate does."""
    from macs_audit.atomic import write_text
    from macs_audit.finetune import loop
    from macs_audit.finetune import run as finetune_run

    def instant(model, train_source, options, *args, **kwargs):
        return loop.FinetuneResult(model.eval(), [], 0, None, {"n_train": 0, "n_val": 0})

    exported = {}

    def export(model, path, meta, fmt):  # what the ONNX export is given (torch.onnx.export takes seconds a model)
        exported[path.name] = meta
        write_text(path, "an ONNX export")

    monkeypatch.setattr(loop, "finetune", instant)
    monkeypatch.setattr(finetune_run, "export_if_possible", export)
    folder = undeclared.parent
    args = ["finetune", str(undeclared), *_small_sets(folder), "--out", str(folder / "tuned"), *QUICK, "-q"]
    result = runner.invoke(app, [*args, "--epochs", "1", "--batch-size", "16"])
    assert result.exit_code == 0, result.output
    assert "warning: no --mean or --std given" in result.output  # as evaluate warns of the same model
    assert sorted(exported) == ["model.onnx", "model_temperature_only.onnx"]
    for name in ("model", "model_temperature_only"):
        sidecar = json.loads((folder / "tuned" / f"{name}.json").read_text())
        assert sidecar["num_classes"] == 3 and "calibration" in sidecar  # declared values and the fold's record
        for meta in (sidecar, exported[f"{name}.onnx"]):
            assert "mean" not in meta and "std" not in meta


def test_a_build_that_fails_in_its_audit_leaves_what_it_was_to_replace(ce, monkeypatch):
    """--force replaces the float export and the build's output only when the run succeeds: an audit that fails
    after both were written leaves each earlier file byte-identical (and nothing new)."""
    from macs_audit import deployment
    from macs_audit.errors import InputError

    def failing(*args, **kwargs):
        raise InputError("the parity audit failed")

    monkeypatch.setattr(deployment, "run_audit", failing)
    (ce.parent / "ce.onnx").write_bytes(b"an earlier float export")
    before = _listing(ce.parent)
    monkeypatch.chdir(ce.parent)
    args = ["export", str(ce), "--precision", "fp16", "-o", "existing.onnx", "--force", "--limit", "20"]
    result = runner.invoke(app, [*args, "--bootstrap", "0", "--perturbations", "none", "-q"])
    assert result.exit_code == 3, result.output
    assert result.stderr.strip().splitlines()[-1] == "error: the parity audit failed"
    assert _listing(ce.parent) == before
