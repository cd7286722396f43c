"""`macs-audit evaluate` driven by the audit spec: the spec and the equivalent flags give the same report, a flag
wins over the spec, a bad spec key is one line naming the closest key, and with no MODEL the spec's model runs."""

import json

from typer.testing import CliRunner

from macs_audit.cli import app

runner = CliRunner()

# The same audit as options: small and fast (the clean view, conformal sets, a perturbation view, 40 resamples).
SETTINGS = {"bootstrap": 40, "seed": 3, "calibration_split": 0.5, "perturbations": "noise", "sensitivity_samples": 0}
FLAGS = ["--bootstrap", "40", "--seed", "3", "--calibration-split", "0.5", "--perturbations", "noise"]
FLAGS += ["--sensitivity-samples", "0"]


def _spec(folder, model, data, **more):
    lines = [f'model = "{model.name}"', f'data = "{data.name}"']
    lines += [f"{key} = {json.dumps(value)}" for key, value in {**SETTINGS, **more}.items()]
    (folder / "pyproject.toml").write_text("[tool.macs-audit.evaluate]\n" + "\n".join(lines) + "\n")


def _without_timings(report: dict) -> dict:
    """The report less what differs between two runs of one audit: when it was made, and how it was configured."""
    return {key: value for key, value in report.items() if key not in ("created", "settings")}


def test_the_spec_and_the_equivalent_flags_give_the_same_report(tmp_path, onnx_model, npz_data, monkeypatch):
    monkeypatch.chdir(tmp_path)
    by_flags = runner.invoke(
        app, ["evaluate", str(onnx_model), "--data", str(npz_data), *FLAGS, "-o", "flags.json", "-q"]
    )
    assert by_flags.exit_code == 0, by_flags.output
    _spec(tmp_path, onnx_model, npz_data)
    by_spec = runner.invoke(app, ["evaluate", "-o", "spec.json", "-q"])  # no MODEL: the spec's
    assert by_spec.exit_code == 0, by_spec.output
    flags, spec = (json.loads((tmp_path / name).read_text()) for name in ("flags.json", "spec.json"))
    assert _without_timings(flags) == _without_timings(spec)
    settings = spec["settings"]
    assert settings["spec"] == str(tmp_path / "pyproject.toml") and len(settings["spec_sha256"]) == 64
    assert settings["options"]["bootstrap"] == {"value": 40, "source": "spec"}
    assert settings["options"]["coverage"] == {"value": 0.9, "source": "default"}
    assert flags["settings"]["options"]["bootstrap"] == {"value": 40, "source": "flag"}


def test_a_flag_wins_over_the_spec(tmp_path, onnx_model, npz_data, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _spec(tmp_path, onnx_model, npz_data)
    result = runner.invoke(app, ["evaluate", "--bootstrap", "0", "-o", "r.json", "-q"])
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["conventions"]["bootstrap_resamples"] == 0
    assert report["settings"]["options"]["bootstrap"]["source"] == "flag"
    assert report["settings"]["options"]["seed"] == {"value": 3, "source": "spec"}


def test_an_unknown_spec_key_is_one_line_naming_the_closest(tmp_path, onnx_model, npz_data, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _spec(tmp_path, onnx_model, npz_data, calibration_splt=0.2)
    result = runner.invoke(app, ["evaluate", "-o", "r.json"])
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines() == [
        f"error: unknown key 'calibration_splt' in {tmp_path / 'pyproject.toml'} [tool.macs-audit.evaluate]; "
        "did you mean 'calibration_split'?"
    ]
    assert not (tmp_path / "r.json").exists()


def test_no_model_and_no_spec_is_a_usage_error(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".git").mkdir()  # the search for a spec stops here
    result = runner.invoke(app, ["evaluate"])
    assert result.exit_code == 2
    assert "give MODEL (or the model in the spec's evaluate table" in result.stderr
