"""No output replaces an input: every file a run reads (model folder members, the Hugging Face cache's blobs a
hub link resolves to, class prompts, images of a shift set, shards and their classes.txt) is an input, compared
through links, and --force never allows replacing one (macs_audit.inputs, macs_audit.outputs).

Each row runs one command in a fresh directory and checks: exit 2 before the model loads, a one-line error
naming the clash, every file as it was before the run and nothing new beside it."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from conftest import linear_onnx, tiny_images
from test_bad_input import _snapshot
from typer.testing import CliRunner

from macs_audit.cli import app

runner = CliRunner()
QUICK = ("--bootstrap", "0", "--perturbations", "none", "--sensitivity-samples", "0", "-q")
HUB = "hub"  # HF_HUB_CACHE in the run's directory
SNAPSHOT = f"{HUB}/models--org--net/snapshots/0123abcd"


@dataclasses.dataclass(frozen=True)
class Row:
    id: str
    args: tuple[str, ...]
    message: str
    setup: Callable[[Path], object] | None = None


def _timm_folder(tmp: Path) -> None:
    (tmp / "timm").mkdir()
    (tmp / "timm" / "config.json").write_text(json.dumps({"architecture": "resnet18", "num_classes": 10}))
    (tmp / "timm" / "model.safetensors").write_bytes(b"weights")


def _hf_folder(tmp: Path) -> None:
    (tmp / "hf").mkdir()
    (tmp / "hf" / "config.json").write_text(json.dumps({"model_type": "convnext", "num_labels": 10}))
    (tmp / "hf" / "model.safetensors").write_bytes(b"weights")
    (tmp / "hf" / "preprocessor_config.json").write_text(json.dumps({"image_processor_type": "ConvNextImageProcessor"}))


def _hub_cache(tmp: Path) -> None:
    """A local Hugging Face cache as huggingface_hub lays it out: refs/main names the snapshot, whose files are
    links to ../../blobs/<hash>."""
    repo = tmp / HUB / "models--org--net"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text("0123abcd")
    (repo / "blobs").mkdir()
    (tmp / SNAPSHOT).mkdir(parents=True)
    for name, content in (("config.json", json.dumps({"architecture": "resnet18"})), ("model.safetensors", "w")):
        digest = hashlib.sha256(content.encode()).hexdigest()
        (repo / "blobs" / digest).write_text(content)
        os.symlink(f"../../blobs/{digest}", tmp / SNAPSHOT / name)
    os.symlink(os.path.realpath(tmp / SNAPSHOT / "config.json"), tmp / "elsewhere.json")  # a link to a blob


def _prompts(tmp: Path) -> None:
    (tmp / "prompts.json").write_text(json.dumps({"classes": [f"c{i}" for i in range(10)]}))


def _shift_tree(tmp: Path) -> None:
    from PIL import Image

    for i, name in enumerate(("airplane", "cat")):
        (tmp / "shift" / name).mkdir(parents=True)
        Image.fromarray(tiny_images(1, seed=i)[0][0]).save(tmp / "shift" / name / "0.png")
    (tmp / "outside.png").write_bytes((tmp / "shift" / "cat" / "0.png").read_bytes())
    (tmp / "shift" / "cat" / "0.png").unlink()
    os.symlink(tmp / "outside.png", tmp / "shift" / "cat" / "0.png")  # an image linked from outside the folder


def _shards(tmp: Path) -> None:
    import io
    import tarfile

    from PIL import Image

    for s in range(2):
        with tarfile.open(tmp / f"s-{s:03d}.tar", "w") as tar:
            for i in range(3):
                image = io.BytesIO()
                Image.fromarray(tiny_images(1, seed=i)[0][0]).save(image, format="PNG")
                for member, data in ((f"k{s}{i}.png", image.getvalue()), (f"k{s}{i}.cls", str(i).encode())):
                    info = tarfile.TarInfo(member)
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
    (tmp / "classes.txt").write_text("a\nb\nc\n")


def _hf_folder_and_data_folder(tmp: Path) -> None:
    _hf_folder(tmp)
    (tmp / "d").mkdir()
    (tmp / "d" / "data.npz").write_bytes((tmp / "data.npz").read_bytes())


def _calibrated_folder(tmp: Path) -> None:
    _hf_folder(tmp)
    (tmp / "out" / "hf_calibrated").mkdir(parents=True)  # a previous run's calibrated Hugging Face model
    (tmp / "out" / "hf_calibrated" / "config.json").write_text("{}")


def _evaluate(model: str, *extra: str) -> tuple[str, ...]:
    return ("evaluate", model, "--data", "data.npz", *QUICK, *extra)


SHARDS = "s-{000..001}.tar"
ROWS = [
    Row("timm-weights", _evaluate("timm", "-o", "timm/model.safetensors"), "input folder timm", _timm_folder),
    Row("timm-config", _evaluate("timm", "-o", "timm/config.json"), "input folder timm", _timm_folder),
    Row("hf-weights", _evaluate("hf", "-o", "hf/model.safetensors"), "input folder hf", _hf_folder),
    Row("hf-config", _evaluate("hf", "-o", "hf/config.json"), "input folder hf", _hf_folder),
    Row("hf-processor", _evaluate("hf", "-o", "hf/preprocessor_config.json"), "input folder hf", _hf_folder),
    Row("hf-new-file", _evaluate("hf", "-o", "hf/report.json"), "input folder hf", _hf_folder),
    Row(
        "hf-predictions",
        _evaluate("hf", "--save-predictions", "hf/model.safetensors"),
        "--save-predictions hf/model.safetensors would write into the input folder hf",
        _hf_folder,
    ),
    Row(
        "hub-snapshot-link",
        _evaluate("hf-hub:org/net", "-o", f"{SNAPSHOT}/config.json"),
        "models--org--net",
        _hub_cache,
    ),
    Row("hub-link-to-blob", _evaluate("hf-hub:org/net", "-o", "elsewhere.json"), "models--org--net", _hub_cache),
    Row(
        "hub-arch-config",
        _evaluate("model.onnx", "--arch", "hf-hub:org/net", "-o", f"{SNAPSHOT}/config.json"),
        "models--org--net",
        _hub_cache,
    ),
    Row(
        "class-prompts",
        _evaluate("model.onnx", "--class-prompts", "prompts.json", "-o", "prompts.json"),
        "prompts.json",
        _prompts,
    ),
    Row(
        "shift-image",
        _evaluate("model.onnx", "--shift-data", "s=shift", "-o", "shift/airplane/0.png"),
        "input folder shift",
        _shift_tree,
    ),
    Row(
        "shift-image-linked-from-outside",
        _evaluate("model.onnx", "--shift-data", "s=shift", "-o", "outside.png"),
        "would replace the input shift/cat/0.png",
        _shift_tree,
    ),
    Row(
        "shard",
        ("evaluate", "model.onnx", "--data", SHARDS, *QUICK, "-o", "s-001.tar"),
        "would replace the input",
        _shards,
    ),
    Row(
        "shard-predictions-onto-classes",
        ("evaluate", "model.onnx", "--data", SHARDS, *QUICK, "--save-predictions", "classes.txt"),
        "would replace the input classes.txt",
        _shards,
    ),
    Row(
        "finetune-hf-folder-replaced",
        ("finetune", "hf", "--data", "data.npz", "--out", ".", "--name", "hf", "--force", "-q"),
        "would replace the input hf",
        _hf_folder,
    ),
    Row(
        "finetune-hf-folder-holding-the-data",
        ("finetune", "hf", "--data", "d/data.npz", "--out", ".", "--name", "d", "--force", "-q"),
        "would replace the folder d, which holds the input d/data.npz",
        _hf_folder_and_data_folder,
    ),
    Row(
        "calibrate-existing-folder",
        ("calibrate", "hf", "--data", "data.npz", "--out", "out", "-q"),
        "already holds hf_calibrated",
        _calibrated_folder,
    ),
    Row(
        "calibrate-into-the-model-folder",
        ("calibrate", "hf", "--data", "data.npz", "--out", "hf", "--force", "-q"),
        "input folder hf",
        _hf_folder,
    ),
    # export: every file the export and its build read (issue 47).
    Row("export-timm-member", ("export", "timm", "-o", "timm/config.json"), "input folder timm", _timm_folder),
    Row(
        "export-hub-snapshot-link",
        ("export", "hf-hub:org/net", "-o", f"{SNAPSHOT}/config.json"),
        "models--org--net",
        _hub_cache,
    ),
    Row(
        "export-hub-arch-link-to-blob",
        ("export", "w.safetensors", "--arch", "hf-hub:org/net", "-o", "elsewhere.json"),
        "models--org--net",
        _hub_cache,
    ),
    Row(
        "export-class-prompts",
        (
            "export",
            "clip.safetensors",
            "--arch",
            "open_clip:RN50",
            "--class-prompts",
            "prompts.json",
            "-o",
            "prompts.json",
        ),
        "would replace the input prompts.json",
        _prompts,
    ),
    Row(
        "export-int8-onto-its-calibration-data",
        ("export", "timm", "--precision", "int8", "--calibration-data", "data.npz", "-o", "data.npz"),
        "would replace the input data.npz",
        _timm_folder,
    ),
    Row(
        "export-fp16-onto-its-audit-data",
        ("export", "timm", "--precision", "fp16", "--data", "data.npz", "-o", "data.npz"),
        "would replace the input data.npz",
        _timm_folder,
    ),
    Row(
        "export-build-hub-arch",
        ("export", "model.onnx", "--precision", "fp16", "--arch", "hf-hub:org/net", "-o", f"{SNAPSHOT}/config.json"),
        "models--org--net",
        _hub_cache,
    ),
]


@pytest.fixture()
def workdir(tmp_path, monkeypatch):
    import huggingface_hub.constants

    monkeypatch.chdir(tmp_path)
    (tmp_path / ".git").mkdir()  # stops the gate config search here
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / HUB))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / HUB))  # read once on import
    linear_onnx(tmp_path / "model.onnx")
    x, y = tiny_images(30)
    np.savez(tmp_path / "data.npz", x=x, y=y)
    return tmp_path


@pytest.mark.parametrize("row", ROWS, ids=[row.id for row in ROWS])
def test_no_output_replaces_an_input(row: Row, workdir: Path, monkeypatch) -> None:
    from macs_audit import deployment
    from macs_audit.finetune import run
    from macs_audit.models import export, predictor

    def never(*args, **kwargs):
        raise AssertionError("the model was loaded before the outputs were checked")

    # calibrate loads through before_after, which reads models.predictor's at the call.
    loaders = ((predictor, "load_predictor"), (run, "load_torch_predictor"))
    loaders += ((export, "load_torch_predictor"), (deployment, "load_predictor"))
    for module, name in loaders:
        monkeypatch.setattr(module, name, never)
    if row.setup is not None:
        row.setup(workdir)
    before = _snapshot(workdir)
    result = runner.invoke(app, list(row.args))
    assert result.exit_code == 2, result.output
    assert row.message in result.stderr, result.stderr
    assert len([line for line in result.stderr.splitlines() if line.strip()]) == 1, result.stderr
    assert _snapshot(workdir) == before, "an input changed or a file appeared"


def test_an_output_beside_the_inputs_is_written(workdir: Path) -> None:
    """The checks refuse only what would replace an input: a report beside an image folder it reads."""
    _shift_tree(workdir)
    result = runner.invoke(app, list(_evaluate("model.onnx", "--ood-data", "shift", "-o", "shift-report.json")))
    assert result.exit_code == 0, result.output
    assert json.loads((workdir / "shift-report.json").read_text())["data"]["n"] == 30
