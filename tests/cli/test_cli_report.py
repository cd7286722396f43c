"""`macs-audit report` through the CLI: a saved report re-rendered in every format, with and without the gate;
`-` and /dev/stdout as standard output."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest
from fixtures.saved_reports import run, saved_reports, schema_2_0


@pytest.fixture()
def files(tmp_path, monkeypatch):
    return saved_reports(tmp_path, monkeypatch)


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


def test_a_schema_2_0_report_is_rendered_with_a_warning_and_its_key_kept(files):
    old = schema_2_0()
    files["a"].write_text(json.dumps(old))
    result = run("report", files["a"], "-f", "json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == old  # a 2.0 report re-rendered as JSON is still 2.0
    (warning,) = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
    assert "corruption_summary.relative_mce of a schema 2.0 report is deprecated" in warning
    assert "mCE vs baseline 80.0%" in run("report", files["a"]).stdout
