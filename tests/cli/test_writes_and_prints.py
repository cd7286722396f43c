"""What a command writes and prints: `evaluate -o` repeated writes each format, `--quiet` prints the verdict
line alone, a log gets lines as wide as the reports' text files and a suggested command never split; `finetune`
reports the user's own mistake first and names the options it has."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from conftest import linear_onnx, tiny_images
from fixtures.synthetic_report import synthetic_report
from typer.testing import CliRunner

from macs_audit.cli import app

runner = CliRunner()
QUICK = ("--bootstrap", "0", "--perturbations", "none", "--sensitivity-samples", "0", "--calibrators", "none")
FINETUNE_COMMAND = "macs-audit finetune MODEL.safetensors --arch ARCH --data TRAIN.npz --out finetuned"


@pytest.fixture()
def workdir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    (tmp_path / ".git").mkdir()  # stops the gate config search here
    linear_onnx(tmp_path / "model.onnx")
    x, y = tiny_images(60)
    np.savez(tmp_path / "data.npz", x=x, y=y)
    return tmp_path


def test_evaluate_writes_every_output_it_is_given(workdir: Path) -> None:
    args = ["evaluate", "model.onnx", "--data", "data.npz", *QUICK, "-o", "a.json", "-o", "a.html", "-o", "a.md"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert json.loads((workdir / "a.json").read_text())["data"]["n"] == 60
    assert "<html" in (workdir / "a.html").read_text().lower()
    assert (workdir / "a.md").read_text().startswith("#")
    for name in ("json", "html", "md"):
        assert f"{name} report written to a.{name}" in result.stderr


def test_evaluate_formats_pair_with_outputs_in_order(workdir: Path) -> None:
    args = ["evaluate", "model.onnx", "--data", "data.npz", *QUICK, "-f", "md", "-o", "a", "-f", "json", "-o", "b"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert (workdir / "a").read_text().startswith("#") and json.loads((workdir / "b").read_text())["data"]["n"] == 60


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("-o", "a.json", "-o", "a.json"), "--output a.json is given twice"),
        (("-o", "a.json", "--save-predictions", "a.json"), "--output and --save-predictions name a.json"),
        (("-f", "md", "-f", "json", "-o", "a.md"), "2 --format but 1 --output"),
        (("-o", "checks.xml"), "JUnit output lists gate checks"),
    ],
)
def test_evaluate_output_mistakes_fail_before_the_audit(workdir: Path, args, message) -> None:
    result = runner.invoke(app, ["evaluate", "model.onnx", "--data", "data.npz", *QUICK, *args])
    assert result.exit_code == 2 and message in result.stderr, result.output
    assert not any(workdir.glob("a.*")) and not (workdir / "checks.xml").exists()


def test_quiet_prints_the_verdict_line_only(workdir: Path) -> None:
    args = ["evaluate", "model.onnx", "--data", "data.npz", *QUICK, "-q", "-o", "a.json", "-o", "a.html"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("audit: "), result.output
    assert (workdir / "a.json").is_file() and (workdir / "a.html").is_file()  # written as asked


def test_quiet_with_the_gate_prints_the_gates_verdict_only(workdir: Path) -> None:
    (workdir / "macs-audit.toml").write_text("[gate]\nmin_accuracy = 0.0\n")
    args = ["evaluate", "model.onnx", "--data", "data.npz", *QUICK, "-q", "--gate", "-o", "a.json"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "PASSED" in lines[0].upper(), result.output


@pytest.mark.parametrize("columns", [None, "60"])
def test_a_log_gets_wide_lines_and_commands_whole(workdir: Path, columns) -> None:
    """Piped (not a terminal), the console is as wide as the reports' text files instead of 80 columns; a
    suggested command stays on one line even on a console narrower than it (COLUMNS=60)."""
    (workdir / "r.json").write_text(synthetic_report().to_json())
    result = runner.invoke(app, ["report", "r.json"], env={"COLUMNS": columns} if columns else {})
    assert result.exit_code == 0, result.output
    assert any(line.strip() == FINETUNE_COMMAND for line in result.stdout.splitlines()), result.stdout
    if columns is None:
        assert max(len(line) for line in result.stdout.splitlines()) > 80


def _resnet9(path: Path, num_classes: int) -> None:
    import timm

    from macs_audit.models import architectures  # noqa: F401
    from macs_audit.models.export import save_safetensors, write_sidecar

    save_safetensors(timm.create_model("macs_resnet9_c10", num_classes=num_classes), path)
    write_sidecar(path.with_suffix(".json"), {"arch": "macs_resnet9_c10", "num_classes": num_classes})


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_finetune_resume_without_a_checkpoint_is_said_first_and_writes_nothing(workdir: Path) -> None:
    """The user's explicit request first: before the model loads, the contamination check and any output."""
    _resnet9(workdir / "net.safetensors", 10)
    before = _files(workdir)
    args = ["finetune", "net.safetensors", "--data", "data.npz", "--out", "ft", "--from-scratch", "--resume", "-q"]
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert "--resume: no checkpoint at ft/checkpoint.pt" in result.stderr
    assert _files(workdir) == before and not (workdir / "ft").exists()


def test_finetune_of_another_class_count_names_eval_data(workdir: Path) -> None:
    """Without --eval-data the before/after audit reads CIFAR-10's test set: a 3-class model is told to pass
    --eval-data (an option finetune has), before its training data is read or anything is written."""
    _resnet9(workdir / "net.safetensors", 3)
    x, y = tiny_images(30)
    np.savez(workdir / "three.npz", x=x, y=y % 3)
    before = _files(workdir)
    result = runner.invoke(app, ["finetune", "net.safetensors", "--data", "three.npz", "--out", "ft", "-q"])
    assert result.exit_code == 2, result.output
    assert "the model has 3 classes" in result.stderr and "pass --eval-data" in result.stderr
    assert "--shift-data" not in result.stderr and "--class-map" not in result.stderr
    assert _files(workdir) == before and not (workdir / "ft").exists()
