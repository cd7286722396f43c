"""`macs-audit compare` through the CLI: two saved reports side by side, in the terminal, JSON and the step
summary; exit 0."""

from __future__ import annotations

import json

import pytest
from fixtures.saved_reports import run, saved_reports


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
