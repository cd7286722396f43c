"""`macs-audit gate`, `report` and `compare` through the CLI: exit codes, outputs, no heavy imports."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET

import pytest
from fixtures.synthetic_report import synthetic_report
from typer.testing import CliRunner

from macs_audit.cli import app
from macs_audit.cli.output import gate_report

runner = CliRunner()
PASSING = "[gate]\nmin_accuracy = 0.9\nmax_ece = 0.05\n"
FAILING = "[gate]\nmin_accuracy = 0.95\nmax_ece = 0.05\n"


@pytest.fixture()
def files(tmp_path, monkeypatch):
    """Two reports and two configs in a directory with no pyproject.toml above it to find."""
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    (tmp_path / ".git").mkdir()  # stops the config search here
    paths = {
        "a": tmp_path / "a.json",
        "b": tmp_path / "b.json",
        "pass": tmp_path / "pass.toml",
        "fail": tmp_path / "fail.toml",
        "dir": tmp_path,
    }
    paths["a"].write_text(synthetic_report(corruptions=["fog"]).to_json())
    paths["b"].write_text(synthetic_report(accuracy=0.91, ece=0.04, corruptions=["fog"]).to_json())
    paths["pass"].write_text(PASSING)
    paths["fail"].write_text(FAILING)
    monkeypatch.chdir(tmp_path)
    return paths


def run(*args):
    return runner.invoke(app, [str(a) for a in args])


# ---------------------------------------------------------------------------------- exit codes


def test_gate_exit_0_on_pass_and_1_on_fail(files):
    result = run("gate", files["a"], "--config", files["pass"])
    assert result.exit_code == 0, result.output
    assert "gate passed: 2 of 2 checks" in result.stderr and "min_accuracy" in result.stdout
    result = run("gate", files["a"], "--config", files["fail"])
    assert result.exit_code == 1
    assert "gate FAILED: 1 of 2 checks failed (min_accuracy)" in result.stderr


def test_gate_finds_pyproject_in_the_working_directory(files):
    (files["dir"] / "pyproject.toml").write_text("[tool.macs-audit.gate]\nmin_accuracy = 0.95\n")
    assert run("gate", files["a"]).exit_code == 1


def test_gate_against_a_baseline(files):
    files["pass"].write_text(PASSING + "[gate.baseline]\nmax_accuracy_drop = 0.005\nmax_ece_increase = 0.02\n")
    result = run("gate", files["b"], "--config", files["pass"], "--baseline", files["a"])
    assert result.exit_code == 1 and "baseline.max_accuracy_drop" in result.stderr  # 92% -> 91%
    result = run("gate", files["a"], "--config", files["pass"], "--baseline", files["a"])
    assert result.exit_code == 0
    # The config may name the baseline report itself (relative to the config file).
    files["pass"].write_text(files["pass"].read_text() + 'report = "a.json"\n')
    assert run("gate", files["b"], "--config", files["pass"]).exit_code == 1


def test_use_interval_flag_overrides_the_config(files):
    # Accuracy 92% with CI [91.5%, 92.5%]: passes 0.918 on the point, fails on the lower end.
    files["pass"].write_text("[gate]\nmin_accuracy = 0.918\n")
    assert run("gate", files["a"], "-c", files["pass"]).exit_code == 0
    result = run("gate", files["a"], "-c", files["pass"], "--use-interval", "-f", "json")
    assert result.exit_code == 1
    assert json.loads(result.stdout)["gate"]["checks"][0]["detail"].startswith("95% CI lower end")
    files["pass"].write_text("[gate]\nmin_accuracy = 0.918\nuse_interval = true\n")
    assert run("gate", files["a"], "-c", files["pass"]).exit_code == 1
    assert run("gate", files["a"], "-c", files["pass"], "--point-estimate").exit_code == 0


# ---------------------------------------------------------------------------------- outputs


def test_gate_writes_every_format_and_the_step_summary(files, monkeypatch):
    summary = files["dir"] / "summary.md"
    summary.write_text("earlier step\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    result = run(
        "gate",
        files["a"],
        "-c",
        files["fail"],
        "-o",
        "g.json",
        "-o",
        "g.md",
        "-o",
        "g.xml",
        "-o",
        "g.html",
        "-o",
        "g.txt",
    )
    assert result.exit_code == 1, result.output
    assert result.stdout == ""  # everything went to files
    assert json.loads((files["dir"] / "g.json").read_text())["gate"]["n_failed"] == 1
    assert (files["dir"] / "g.md").read_text().startswith("## ❌ macs-audit gate FAILED")
    assert ET.parse(files["dir"] / "g.xml").getroot().get("failures") == "1"
    assert "data:image/png;base64," in (files["dir"] / "g.html").read_text()
    assert "FAIL" in (files["dir"] / "g.txt").read_text()
    text = summary.read_text()
    assert text.startswith("earlier step\n") and "## ❌ macs-audit gate FAILED" in text
    assert not list(files["dir"].glob(".*.tmp"))  # atomic writes leave no temporary files
    run("gate", files["a"], "-c", files["fail"], "--no-step-summary")
    assert summary.read_text() == text


def test_explicit_formats_pair_with_outputs_and_print_to_stdout(files):
    result = run("gate", files["a"], "-c", files["pass"], "-f", "md", "-o", "gate.txt")
    assert (files["dir"] / "gate.txt").read_text().startswith("## ✅ macs-audit gate passed")
    result = run("gate", files["a"], "-c", files["pass"], "-f", "junit")
    assert result.exit_code == 0 and ET.fromstring(result.stdout.encode()).get("tests") == "2"


def test_report_rerenders_without_a_gate_and_with_one(files):
    result = run("report", files["a"], "-f", "md")
    assert result.exit_code == 0 and result.stdout.startswith("## macs-audit calibration audit")
    assert json.loads(run("report", files["a"], "-f", "json").stdout) == json.loads(files["a"].read_text())
    result = run("report", files["a"], "-o", "r.html")
    assert result.exit_code == 0 and "<!DOCTYPE html>" in (files["dir"] / "r.html").read_text()
    result = run("report", files["a"], "-c", files["fail"], "-f", "junit")
    assert result.exit_code == 0  # rendering succeeded; the gate verdict is in the XML
    assert ET.fromstring(result.stdout.encode()).get("failures") == "1"
    assert "Calibration audit" in run("report", files["a"]).stdout


def test_compare_renders_and_exits_0(files, monkeypatch):
    summary = files["dir"] / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    result = run("compare", files["a"], files["b"])
    assert result.exit_code == 0, result.output
    assert "A = a.json, B = b.json" in result.stdout and "worse" in result.stdout
    assert "macs-audit compare" in summary.read_text()
    data = json.loads(run("compare", files["a"], files["b"], "-f", "json", "--no-step-summary").stdout)
    assert data["n_regressions"] > 0 and data["a"]["name"] == "a.json"


def test_gate_report_function_for_evaluate(files, capsys):
    from macs_audit.gate import load_config

    report = synthetic_report()
    assert gate_report(report, files["pass"], step_summary=False) == 0
    assert (
        gate_report(
            report, load_config(files["fail"]), formats=["md"], outputs=[files["dir"] / "e.md"], step_summary=False
        )
        == 1
    )
    assert "gate FAILED" in (files["dir"] / "e.md").read_text()


# ---------------------------------------------------------------------------------- lazy imports


def test_gate_report_compare_do_not_import_torch_or_onnxruntime(files):
    """The real entry point (`macs-audit` = macs_audit.cli.main) runs each command in a fresh interpreter."""
    script = textwrap.dedent(f"""
        import sys
        from macs_audit.cli import main
        a, b, cfg = {str(files["a"])!r}, {str(files["b"])!r}, {str(files["fail"])!r}
        codes = []
        for args in (
            ["gate", a, "-c", cfg, "-o", "x.xml", "-o", "x.md", "-o", "x.json", "-o", "x.txt"],
            ["report", a, "-f", "html", "-o", "x.html"],  # html: matplotlib must not pull torch in either
            ["compare", a, b, "-f", "md", "-f", "junit", "-f", "json", "-f", "terminal"],
        ):
            sys.argv = ["macs-audit", *args]
            try:
                main()
            except SystemExit as exc:
                codes.append(exc.code or 0)
        heavy = [m for m in ("torch", "onnxruntime", "torchvision", "timm") if m in sys.modules]
        print("RESULT", codes, heavy, file=sys.stderr)
        sys.exit(0 if codes == [1, 0, 0] and not heavy else 1)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=files["dir"], timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (files["dir"] / "x.html").is_file() and (files["dir"] / "x.xml").is_file()


def test_dash_and_dev_stdout_mean_standard_output(files):
    result = run("report", files["a"], "-o", "-", "-f", "json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["data"]["n"] > 0
    result = run("report", files["a"], "-o", "/dev/stdout", "-f", "md")
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("## macs-audit calibration audit")
    result = run("report", files["a"], "-o", "-")  # no extension to read: the command's default format
    assert result.exit_code == 0 and "accuracy" in result.stdout
    assert not (files["dir"] / "-").exists()
