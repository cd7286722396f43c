"""`macs-audit compare` through the CLI: two saved reports side by side, in the terminal, JSON and the step
summary; exit 0."""

from __future__ import annotations

import json

import pytest
from fixtures.saved_reports import run, saved_reports, schema_1_2


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
    assert data["n_regressions"] > 0 and data["a"]["name"] == "a.json"


def test_a_schema_1_2_report_is_compared_on_the_new_key_with_a_warning(files):
    files["a"].write_text(json.dumps(schema_1_2(mce=0.8)))
    data = json.loads(files["b"].read_text())
    data["corruption_summary"].update(mean_corruption_error=0.7, relative_mean_corruption_error=0.9)
    files["b"].write_text(json.dumps(data))
    result = run("compare", files["a"], files["b"], "-f", "json", "--no-step-summary")
    assert result.exit_code == 0, result.output
    (row,) = [r for r in json.loads(result.stdout)["rows"] if r["key"] == "mean_corruption_error"]
    assert row["a"] == 0.8 and row["b"] == 0.7 and row["status"] == "better"
    assert "a.json: corruption_summary.mce of a schema 1.2 report is deprecated" in result.stderr
