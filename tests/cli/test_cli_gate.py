"""`macs-audit gate` through the CLI: exit codes, outputs and the step summary; the verdict function `evaluate
--gate` shares; and no heavy imports in any command that reads saved reports."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET

import pytest
from fixtures.saved_reports import PASSING, run, saved_reports, schema_2_0
from fixtures.synthetic_report import synthetic_report

from macs_audit.cli.output import gate_report, resolve_outputs
from macs_audit.gating import ConfiguredGate


@pytest.fixture()
def files(tmp_path, monkeypatch):
    return saved_reports(tmp_path, monkeypatch)


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


def test_gate_report_function_for_evaluate(files):
    report = synthetic_report()
    assert gate_report(report, ConfiguredGate.load(files["pass"]), step_summary=False) == 0
    failing = ConfiguredGate.load(files["fail"])
    targets = resolve_outputs(["md"], [files["dir"] / "e.md"])
    assert gate_report(report, failing, targets=targets, step_summary=False) == 1
    assert "gate FAILED" in (files["dir"] / "e.md").read_text()


def test_configured_gate_reads_the_found_config_and_its_baseline(files):
    """--config and --baseline where given, else the config found from the working directory and its own
    baseline report; those are the inputs no output may replace."""
    (files["dir"] / "macs-audit.toml").write_text(
        PASSING + '[gate.baseline]\nmax_ece_increase = 0.01\nreport = "a.json"\n'
    )
    found = ConfiguredGate.load()
    assert found.inputs == (files["dir"] / "macs-audit.toml", files["dir"] / "a.json")
    assert found.run(synthetic_report()).baseline == str(files["dir"] / "a.json")
    given = ConfiguredGate.load(files["pass"], files["b"])
    assert given.inputs == (files["pass"], files["b"]) and given.baseline_path == files["b"]
    assert ConfiguredGate.load(files["pass"]).inputs == (files["pass"], None)


# ---------------------------------------------------------------------------------- lazy imports


def test_gate_report_compare_do_not_import_torch_or_onnxruntime(files):
    """The real entry point (`macs-audit` = macs_audit.__main__.main) runs each command in a fresh interpreter."""
    script = textwrap.dedent(f"""
        import sys
        from macs_audit.__main__ import main
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


def test_a_schema_2_0_report_and_the_old_gate_key_are_read_with_a_warning_each(files):
    files["a"].write_text(json.dumps(schema_2_0()))
    files["pass"].write_text("[gate]\nmax_corruption_mce = 1.0\n")
    result = run("gate", files["a"], "--config", files["pass"])
    assert result.exit_code == 0, result.output
    warnings = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 2 and "gate passed: 1 of 1 checks" in result.stderr
    assert "a.json: corruption_summary.relative_mce of a schema 2.0 report is deprecated" in warnings[0]
    assert "max_corruption_mce is deprecated: read as max_mean_corruption_error" in warnings[1]
    assert "max_mean_corruption_error" in result.stdout
