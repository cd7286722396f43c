"""`macs-audit compare` through the CLI: two saved reports side by side, in the terminal, JSON and the step
summary; exit 0."""

from __future__ import annotations

import json

import pytest
from fixtures.saved_reports import run, saved_reports, schema_2_0


@pytest.fixture()
def files(tmp_path, monkeypatch):
    return saved_reports(tmp_path, monkeypatch)


def test_compare_renders_and_exits_0(files, monkeypatch):
    summary = files["dir"] / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    result = run("compare", files["a"], files["b"])
    assert result.exit_code == 0, result.output
    assert "A = a.json, B = b.json" in result.stdout and "worse" in result.stdout
    assert "macs-audit compare" in summary.read_text()
    data = json.loads(run("compare", files["a"], files["b"], "-f", "json", "--no-step-summary").stdout)
    assert data["n_worse"] > 0 and data["n_regressions"] is None and data["a"]["name"] == "a.json"


def test_a_schema_2_0_report_is_compared_on_the_new_key_with_a_warning(files):
    files["a"].write_text(json.dumps(schema_2_0()))
    data = json.loads(files["b"].read_text())
    data["corruption_summary"].update(mean_corruption_error=0.7, relative_mean_corruption_error=0.8)
    files["b"].write_text(json.dumps(data))
    result = run("compare", files["a"], files["b"], "-f", "json", "--no-step-summary")
    assert result.exit_code == 0, result.output
    (row,) = [r for r in json.loads(result.stdout)["rows"] if r["key"] == "relative_mean_corruption_error"]
    assert row["a"] == 0.9 and row["b"] == 0.8 and row["status"] == "better"
    assert "a.json: corruption_summary.relative_mce of a schema 2.0 report is deprecated" in result.stderr
