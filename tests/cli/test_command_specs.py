"""Every command's options from the one table, set by the flags or the command's own spec table: a spec table runs
calibrate and corrupt with no flag, a flag wins over it, a required option missing from both is one line naming the
spec's table, and finetune's MaCS presets sit under the spec and the flags with --from-scratch's schedule over them."""

import json
from pathlib import Path

import numpy as np
import pytest
from conftest import linear_onnx, tiny_images
from typer.testing import CliRunner

from macs_audit.cli import app
from macs_audit.cli.finetune import training_options
from macs_audit.finetune.options import FROM_SCRATCH, PRESETS
from macs_audit.settings.resolve import resolve
from macs_audit.settings.spec import Spec

runner = CliRunner()


@pytest.fixture()
def workdir(tmp_path, monkeypatch):
    """A folder the spec is searched from (and no further: .git), with fit and evaluation data and a model."""
    (tmp_path / ".git").mkdir()
    for name, seed in (("val", 1), ("test", 2)):
        x, y = tiny_images(60, seed=seed)
        np.savez(tmp_path / f"{name}.npz", x=x, y=y)
    linear_onnx(tmp_path / "m.onnx")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _spec(folder, command: str, **keys) -> None:
    lines = [f"{key} = {json.dumps(value)}" for key, value in keys.items()]
    (folder / "pyproject.toml").write_text(f"[tool.macs-audit.{command}]\n" + "\n".join(lines) + "\n")


def test_calibrate_runs_from_its_spec_table_alone(workdir):
    _spec(workdir, "calibrate", model="m.onnx", data="val.npz", eval_data="test.npz", out="cal", device="cpu")
    with (workdir / "pyproject.toml").open("a") as spec:
        spec.write('bootstrap = 7\nperturbations = "none"\nsensitivity_samples = 0\nholdout = 0.5\n')
    result = runner.invoke(app, ["calibrate", "--force-calibration", "-q"])  # --force-calibration: the command line's
    assert result.exit_code == 0, result.output
    record = json.loads((workdir / "cal" / "calibration.json").read_text())
    assert record["fit_data"]["n"] == 60
    before = json.loads((workdir / "cal" / "audit_before.json").read_text())
    assert before["conventions"]["bootstrap_resamples"] == 7  # the spec's, not calibrate's default of 200
    assert before["data"]["n"] == 60 and not before["views"]


def test_corrupt_takes_its_spec_table_and_a_flag_wins(workdir):
    _spec(workdir, "corrupt", data="val.npz", out="cc", corruptions=["gaussian_noise", "contrast"], batch_size=20)
    result = runner.invoke(app, ["corrupt", "-q"])
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in (workdir / "cc").iterdir()) == ["contrast.npy", "gaussian_noise.npy", "labels.npy"]
    result = runner.invoke(app, ["corrupt", "-q", "--corruptions", "contrast", "--out", "cc2"])
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in (workdir / "cc2").iterdir()) == ["contrast.npy", "labels.npy"]


@pytest.mark.parametrize(
    "args, message",
    [
        (["finetune"], "give MODEL, or model in the spec's finetune table"),
        (["calibrate", "m.onnx", "--out", "o"], "give --data, or data in the spec's calibrate table"),
        (["export"], "give CHECKPOINT, or checkpoint in the spec's export table"),
        (["corrupt", "--data", "val.npz"], "give --out, or out in the spec's corrupt table"),
    ],
)
def test_a_required_option_given_nowhere_is_one_line_naming_the_table(workdir, args, message):
    result = runner.invoke(app, args)
    assert result.exit_code == 2 and result.stderr.strip().splitlines() == [f"error: {message}"]
    assert not (workdir / "o").exists()


def test_a_spec_key_of_another_command_is_named_with_the_closest(workdir):
    _spec(workdir, "corrupt", data="val.npz", out="cc", calibration_split=0.2)
    result = runner.invoke(app, ["corrupt"])
    assert result.exit_code == 2 and "unknown key 'calibration_split'" in result.stderr
    assert "[tool.macs-audit.corrupt]" in result.stderr and not (workdir / "cc").exists()


def _finetune(flags: dict, spec: dict | None = None):
    required = {"model": "m.pt", "data": "d.npz", "out": "o"}
    tables = {"finetune": spec} if spec is not None else {}
    return training_options(resolve("finetune", {**required, **flags}, Spec(Path("pyproject.toml"), "", tables)))


def test_finetune_presets_sit_under_the_spec_and_the_flags():
    robust = _finetune({"preset": "robust", "lambda_c": 0.5}, {"epochs": 2.0})
    assert robust.preset == "robust" and robust.bn_stats == PRESETS["robust"]["bn_stats"]  # the preset's
    assert robust.lambda_c == 0.5 and robust.epochs == 2.0  # the flag's and the spec's
    assert _finetune({}, {"preset": "robust"}).lambda_c == PRESETS["robust"]["lambda_c"]  # a spec names a preset too
    assert _finetune({}) == _finetune({"preset": "calibrated"})  # the defaults are the calibrated preset


def test_from_scratch_takes_its_schedule_over_the_preset_but_not_over_the_spec_or_a_flag():
    options = _finetune({"from_scratch": True, "preset": "robust", "lr": 0.1}, {"warmup": 0.2})
    assert options.from_scratch and options.epochs == FROM_SCRATCH["epochs"]  # over the preset's epochs
    assert options.batch_size == FROM_SCRATCH["batch_size"]
    assert options.lr == 0.1 and options.warmup == 0.2  # the flag's and the spec's


def test_a_preset_with_another_objective_is_refused_from_the_spec_too():
    from macs_audit.errors import UsageError

    with pytest.raises(UsageError, match="does not apply to --objective ce"):
        _finetune({"objective": "ce"}, {"preset": "robust"})
