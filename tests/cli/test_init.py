"""`macs-audit init REPORT.json`: starting thresholds from a report, which that report passes and a worse one
fails, and the evaluate table of the options its audit was given; written next to what a pyproject.toml already
holds, never over an existing gate or evaluate table."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest
from fixtures.saved_reports import schema_2_0
from fixtures.synthetic_report import synthetic_report
from typer.testing import CliRunner

from macs_audit import gating as gate
from macs_audit.cli import app
from macs_audit.settings.spec import read_spec

runner = CliRunner()
PYPROJECT = '[project]\nname = "demo"\n\n[tool.ruff]\nline-length = 100\n'


@pytest.fixture()
def workdir(tmp_path, monkeypatch):
    """A report, a worse one, and no config above the directory to find."""
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    (tmp_path / ".git").mkdir()
    (tmp_path / "report.json").write_text(synthetic_report().to_json())
    worse = synthetic_report(accuracy=0.88, ece=0.06)  # 4 points less accurate, 3 points worse calibrated
    (tmp_path / "worse.json").write_text(worse.to_json())
    monkeypatch.chdir(tmp_path)
    return tmp_path


def run(*args):
    return runner.invoke(app, [str(a) for a in args])


def test_init_then_gate_passes_on_the_same_report_and_fails_on_a_worse_one(workdir):
    result = run("init", "report.json")
    assert result.exit_code == 0, result.output
    assert "[gate] written to macs-audit.toml" in result.stderr  # no pyproject.toml here
    assert "[gate]" in (workdir / "macs-audit.toml").read_text()
    passed = run("gate", "report.json")
    assert passed.exit_code == 0, passed.output
    failed = run("gate", "worse.json")
    assert failed.exit_code == 1, failed.output
    assert "min_accuracy" in failed.stderr and "max_ece" in failed.stderr
    junit = run("report", "report.json", "--gate", "--format", "junit")  # needs thresholds: now it has them
    assert junit.exit_code == 0 and ET.fromstring(junit.stdout.encode()).get("failures") == "0"


def test_init_appends_to_a_pyproject_without_a_gate_table_and_keeps_what_it_had(workdir):
    (workdir / "pyproject.toml").write_text(PYPROJECT)
    result = run("init", "report.json", "--margin", "0.05")
    assert result.exit_code == 0, result.output
    text = (workdir / "pyproject.toml").read_text()
    assert text.startswith(PYPROJECT) and "\n[tool.macs-audit.gate]\n" in text
    assert "min_accuracy = 0.87  " in text  # 92% less 5 points
    assert gate.find_config(workdir) == workdir / "pyproject.toml"
    assert run("gate", "report.json").exit_code == 0


def test_init_never_replaces_a_gate_table(workdir):
    (workdir / "pyproject.toml").write_text(PYPROJECT + "\n[tool.macs-audit.gate]\nmin_accuracy = 0.99\n")
    before = (workdir / "pyproject.toml").read_bytes()
    result = run("init", "report.json")
    assert result.exit_code == 2 and "already exists" in result.stderr and "[tool.macs-audit.gate]" in result.stderr
    assert (workdir / "pyproject.toml").read_bytes() == before
    (workdir / "macs-audit.toml").write_text("[gate]\nmax_ece = 0.1\n")
    assert run("init", "report.json", "--out", "macs-audit.toml").exit_code == 2


def test_init_to_stdout_writes_no_file(workdir):
    result = run("init", "report.json", "-o", "-")
    assert result.exit_code == 0 and result.stdout.count("[tool.macs-audit.gate]") >= 1
    assert not (workdir / "macs-audit.toml").exists() and not (workdir / "pyproject.toml").exists()


def test_another_file_name_gets_the_tool_table_and_gate_needs_config(workdir):
    result = run("init", "report.json", "--out", "ci/thresholds.toml")
    assert result.exit_code == 0, result.output
    assert "--config ci/thresholds.toml" in result.stderr  # found only when named
    assert run("gate", "report.json", "--config", "ci/thresholds.toml").exit_code == 0


def test_init_from_a_schema_2_0_report_writes_the_new_key_with_a_warning(workdir):
    (workdir / "old.json").write_text(json.dumps(schema_2_0()))
    result = run("init", "old.json", "--out", "-")
    assert result.exit_code == 0, result.output
    assert "old.json: corruption_summary.relative_mce of a schema 2.0 report is deprecated" in result.stderr
    assert "max_mean_corruption_error = " in result.stdout and "max_corruption_mce" not in result.stdout


def test_init_takes_output_as_the_other_commands_do_and_out_as_its_alias(workdir):
    assert run("init", "report.json", "--output", "a.toml").exit_code == 0
    assert run("init", "report.json", "--out", "b.toml").exit_code == 0
    assert "[tool.macs-audit.gate]" in (workdir / "a.toml").read_text() == (workdir / "b.toml").read_text()


def _with_settings(options: dict, command: str = "evaluate"):
    """The synthetic report with the `settings` record of a run of `command` given `options`."""
    from macs_audit.report import Settings

    report = synthetic_report()
    report.settings = Settings(command=command, options=options)
    return report


def test_init_writes_the_evaluate_table_of_the_options_the_audit_was_given(workdir):
    """The flags and the spec keys the report records, as the spec reads them again (a path from the folder the
    audit ran in, a hostile string whole); a preset's value, a default and the outputs are not written."""
    odd = 'a "quoted"\nline\x7f\\end'
    options = {
        "model": {"value": str(workdir / "models" / "m.onnx"), "source": "spec"},
        "data": {"value": "data/test.npz", "source": "flag"},
        "bootstrap": {"value": 200, "source": "flag"},
        "real_labels": {"value": True, "source": "flag"},
        "shift_data": {"value": [f"a={workdir / 'sets' / 'a'}"], "source": "flag"},
        "problem_bars": {"value": odd, "source": "flag"},
        "corruptions": {"value": "benchmark", "source": "preset"},
        "preset": {"value": "full", "source": "flag"},
        "seed": {"value": 0, "source": "default"},
        "output": {"value": ["r.json"], "source": "flag"},
        "coverage": {"value": "high", "source": "flag"},  # not a number: the spec would refuse it
    }
    (workdir / "set.json").write_text(_with_settings(options).to_json())
    result = run("init", "set.json")
    assert result.exit_code == 0, result.output
    assert "[evaluate] and [gate] written to macs-audit.toml" in result.stderr
    text = (workdir / "macs-audit.toml").read_text()
    assert 'model = "models/m.onnx"' in text and 'data = "data/test.npz"' in text
    spec = read_spec(workdir / "macs-audit.toml")
    assert spec.values("evaluate") == {
        "model": workdir / "models" / "m.onnx",
        "data": workdir / "data" / "test.npz",
        "bootstrap": 200,
        "real_labels": True,
        "shift_data": [f"a={workdir / 'sets' / 'a'}"],
        "problem_bars": odd,
        "preset": "full",
    }
    assert run("gate", "set.json").exit_code == 0


def test_a_report_without_settings_gets_the_common_keys_commented_out(workdir):
    result = run("init", "report.json", "-o", "-")
    assert result.exit_code == 0, result.output
    assert "[tool.macs-audit.evaluate]\n" in result.stdout and '# model = "model.onnx"' in result.stdout
    result = run("init", "report.json")
    assert result.exit_code == 0, result.output
    assert read_spec(workdir / "macs-audit.toml").values("evaluate") == {}


def test_init_keeps_an_evaluate_table_that_exists(workdir):
    (workdir / "pyproject.toml").write_text(PYPROJECT + "\n[tool.macs-audit.evaluate]\nbootstrap = 5\n")
    result = run("init", "report.json")
    assert result.exit_code == 0, result.output
    assert "[tool.macs-audit.gate] written to pyproject.toml" in result.stderr and "evaluate]" not in result.stderr
    text = (workdir / "pyproject.toml").read_text()
    assert text.count("[tool.macs-audit.evaluate]") == 1
    assert read_spec(workdir / "pyproject.toml").values("evaluate") == {"bootstrap": 5}
