"""A failed run leaves nothing new (issue 47): `finetune` and `calibrate` write their outputs one by one and audit
what they wrote; a run that fails after its first write removes what it created and puts back, byte for byte,
what it was to replace with --force (atomic.all_or_nothing)."""

from __future__ import annotations

import dataclasses
import hashlib
import os
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from conftest import linear_onnx, tiny_images
from typer.testing import CliRunner

from macs_audit.atomic import all_or_nothing, write_text
from macs_audit.cli import app
from macs_audit.errors import InputError

runner = CliRunner()
SIZE = 16  # 16x16 images keep the ResNet-9 cheap
QUICK = ("--bootstrap", "0", "--perturbations", "none", "--sensitivity-samples", "0", "--device", "cpu", "-q")
EARLIER = b"an earlier run's file"

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _listing(root: Path) -> dict[str, str]:
    """Every file and folder under `root`, a file by its content's hash."""
    return {
        str(p.relative_to(root)): "dir" if p.is_dir() else hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
    }


def _fail_after_audit(monkeypatch, module) -> None:
    """The audit of the written model (the after-audit) fails: the run has written its model by then."""
    from macs_audit.before_after import AFTER

    audit_model = module.audit_model

    def failing(*args, **kwargs):
        if AFTER in args:
            raise InputError("the after-audit failed")
        return audit_model(*args, **kwargs)

    monkeypatch.setattr(module, "audit_model", failing)


def _quick_onnx_export(monkeypatch) -> None:
    """The ONNX exports beside the weights written as small files (torch.onnx.export takes seconds a model)."""
    from macs_audit.finetune import run

    def export(model, path, meta, fmt):
        write_text(path, "an ONNX export")

    monkeypatch.setattr(run, "export_if_possible", export)


def _fail_in_training(monkeypatch) -> None:
    """The training fails: the temperature-only start model is written by then."""
    from macs_audit.finetune import loop

    def failing(*args, **kwargs):
        raise InputError("the training failed")

    _quick_onnx_export(monkeypatch)
    monkeypatch.setattr(loop, "finetune", failing)


def _instant_training(monkeypatch) -> None:
    """Training that returns the start model as it is (the run's writes and audits are the point)."""
    from macs_audit.finetune import loop

    def instant(model, train_source, options, *args, **kwargs):
        return loop.FinetuneResult(model.eval(), [], 0, None, {"n_train": 0, "n_val": 0})

    monkeypatch.setattr(loop, "finetune", instant)


def _finetune_after_audit(monkeypatch) -> None:
    from macs_audit.finetune import run

    _instant_training(monkeypatch)
    _quick_onnx_export(monkeypatch)
    _fail_after_audit(monkeypatch, run)


def _calibrate_after_audit(monkeypatch) -> None:
    from macs_audit import calibrating as calibrate

    _fail_after_audit(monkeypatch, calibrate)


@dataclasses.dataclass(frozen=True)
class Row:
    id: str
    command: str  # finetune or calibrate
    fail: Callable[[pytest.MonkeyPatch], None]
    existing: tuple[str, ...]  # the outputs an earlier run left in OUT (replaced only with --force)


ROWS = [
    Row("finetune-fails-in-training", "finetune", _fail_in_training, ()),
    Row("finetune-fails-in-training-with-force", "finetune", _fail_in_training, ("model_temperature_only.json",)),
    Row(
        "finetune-fails-in-the-after-audit-with-force",
        "finetune",
        _finetune_after_audit,
        ("model.safetensors", "model_temperature_only.safetensors", "audit_before.json", "finetune_config.json"),
    ),
    Row("calibrate-fails-in-the-after-audit", "calibrate", _calibrate_after_audit, ()),
    Row(
        "calibrate-fails-in-the-after-audit-with-force",
        "calibrate",
        _calibrate_after_audit,
        ("model_calibrated.onnx", "model_calibrated.json", "calibration.json"),
    ),
]


def _model_and_data(folder: Path, command: str) -> list[str]:
    """MODEL and its data options: a 16-pixel ResNet-9 checkpoint to fine-tune, an overconfident linear ONNX model
    (which temperature scaling improves) to calibrate."""
    for name, seed, n in (("train", 0, 100), ("test", 1, 50)):
        x, y = tiny_images(n, seed=seed, size=SIZE if command == "finetune" else 32)
        np.savez(folder / f"{name}.npz", x=x, y=y)
    data = ["--data", str(folder / "train.npz"), "--eval-data", str(folder / "test.npz")]
    if command == "finetune":
        import timm
        import torch

        from macs_audit.models import architectures  # noqa: F401
        from macs_audit.models.export import save_safetensors, write_sidecar

        torch.manual_seed(0)
        save_safetensors(timm.create_model("macs_resnet9_c10", num_classes=10), folder / "start.safetensors")
        write_sidecar(
            folder / "start.json", {"arch": "macs_resnet9_c10", "num_classes": 10, "input_size": [SIZE, SIZE]}
        )
        return [str(folder / "start.safetensors"), *data, "--name", "model", "--epochs", "1", "--batch-size", "32"]
    from fixtures.broken_models import scaled_logits

    linear_onnx(folder / "linear.onnx", seed=4)
    scaled_logits(folder / "linear.onnx", folder / "model.onnx", factor=20.0)
    return [str(folder / "model.onnx"), *data]


@pytest.mark.parametrize("row", ROWS, ids=[row.id for row in ROWS])
def test_a_failed_run_leaves_nothing_new(row: Row, tmp_path: Path, monkeypatch) -> None:
    args = [row.command, *_model_and_data(tmp_path, row.command)]
    out = tmp_path / "out"
    if row.existing:
        out.mkdir()
        for name in row.existing:
            (out / name).write_bytes(EARLIER)
    before = _listing(tmp_path)
    row.fail(monkeypatch)
    result = runner.invoke(app, [*args, "--out", str(out), *QUICK, *(["--force"] if row.existing else [])])
    assert result.exit_code == 3, result.output
    failed = "the training failed" if row.fail is _fail_in_training else "the after-audit failed"
    assert result.stderr.strip() == f"error: {failed}", result.output  # failed where the row fails it
    assert _listing(tmp_path) == before  # nothing new (no OUT if there was none); the earlier files as they were


def test_all_or_nothing_puts_back_what_a_failed_block_replaced(tmp_path: Path) -> None:
    """A file, a file written through a link, a folder replaced whole (a Hugging Face save_pretrained folder), and
    a new file in a new folder."""
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "a.json").write_text("old a")
    (tmp_path / "elsewhere.json").write_text("old b")
    os.symlink(tmp_path / "elsewhere.json", tmp_path / "out" / "b.json")
    (tmp_path / "out" / "hf").mkdir()
    (tmp_path / "out" / "hf" / "config.json").write_text("old config")
    before = _listing(tmp_path)
    paths = [tmp_path / "out" / name for name in ("a.json", "b.json", "hf")] + [tmp_path / "new" / "sub" / "c.json"]
    with pytest.raises(InputError), all_or_nothing(paths):
        for path in (paths[0], paths[1], paths[3]):  # as every output is written: a new file renamed onto the old
            write_text(path, "new")
        assert not paths[2].exists()  # an earlier folder is set aside while the block runs
        paths[2].mkdir()  # the new folder, as save_pretrained lands it
        (paths[2] / "config.json").write_text("new config")
        raise InputError("failed")
    assert _listing(tmp_path) == before
    assert os.readlink(tmp_path / "out" / "b.json") == str(tmp_path / "elsewhere.json")


def test_all_or_nothing_drops_what_a_successful_block_replaced(tmp_path: Path) -> None:
    (tmp_path / "a.json").write_text("old")
    (tmp_path / "hf").mkdir()
    with all_or_nothing([tmp_path / "a.json", tmp_path / "hf", tmp_path / "c.json"]):
        write_text(tmp_path / "a.json", "new")
        write_text(tmp_path / "c.json", "c")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json", "c.json"]  # the old folder and copies dropped
    assert (tmp_path / "a.json").read_text() == "new"
