"""`compare` runs the gate `gate` would run (issue 41, item 8): with no option, the config found from the working
directory (a pyproject.toml's [tool.macs-audit.gate], a macs-audit.toml's [gate]); its headline counts the
checks that gate fails as regressions, and no worse row of a PR that passed it; without a config it calls
nothing a regression. b.json is 1 point less accurate than a.json, worse beyond the noise (saved_reports)."""

from __future__ import annotations

import json

import pytest
from fixtures.saved_reports import run, saved_reports

PASSES = "[tool.macs-audit.gate]\nmin_accuracy = 0.9\n"  # b: 91%
FAILS = "[gate]\nmin_accuracy = 0.95\nmax_ece = 0.05\n"


@pytest.fixture()
def files(tmp_path, monkeypatch):
    return saved_reports(tmp_path, monkeypatch)


def _compare(files, *options):
    result = run("compare", files["a"], files["b"], "-f", "json", "--no-step-summary", *options)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout), result


@pytest.mark.parametrize(
    "config_file, text, options, n_regressions, headline",
    [
        ("pyproject.toml", PASSES, (), 0, "0 regressions: the gate passed; {w} metrics worse beyond the noise"),
        ("macs-audit.toml", FAILS, (), 1, "1 regression: the gate failed min_accuracy; {m} more metrics worse"),
        (None, None, (), None, "{w} metrics worse beyond the noise (no gate ran)"),
        ("macs-audit.toml", FAILS, ("--no-gate",), None, "{w} metrics worse beyond the noise (no gate ran)"),
        (None, None, ("--config", "fail.toml"), 1, "1 regression: the gate failed min_accuracy"),
    ],
)
def test_the_headline_counts_what_the_found_gate_fails(files, config_file, text, options, n_regressions, headline):
    if text is not None:
        (files["dir"] / config_file).write_text(text)
    data, _ = _compare(files, *options)
    worse = data["n_worse"]
    assert worse >= 1 and any(r["key"] == "accuracy" and r["status"] == "worse" for r in data["rows"])
    assert data["n_regressions"] == n_regressions
    assert data["headline"].startswith(headline.format(w=worse, m=worse - (n_regressions or 0)))
    if n_regressions is not None:  # the same checks fail as `macs-audit gate` fails
        gate = run("gate", files["b"], "-f", "json", "--no-step-summary", *options)
        assert gate.exit_code == (1 if n_regressions else 0), gate.output
        failed = [c["name"] for c in json.loads(gate.stdout)["gate"]["checks"] if not c["passed"]]
        assert data["gate"]["failed"] == failed and data["gate"]["passed"] is (not failed)
    terminal = run("compare", files["a"], files["b"], "--no-step-summary", *options)
    assert data["headline"] in " ".join(terminal.stdout.split())


def test_a_found_gate_that_cannot_judge_b_is_said_and_left_out_but_an_asked_one_is_an_error(files):
    (files["dir"] / "macs-audit.toml").write_text("[gate.parity]\nmin_agreement = 0.99\n")  # b has no parity
    data, result = _compare(files)
    assert data["gate"] is None and data["headline"].endswith("(no gate ran)")
    assert "cannot judge" in result.stderr and "compared without a gate" in result.stderr
    asked = run("compare", files["a"], files["b"], "--gate", "--no-step-summary")
    assert asked.exit_code == 3 and "no parity section" in asked.stderr


@pytest.mark.parametrize(
    "options, message",
    [
        (("--gate",), "no gate thresholds found"),
        (("--no-gate", "--config", "pass.toml"), "--no-gate runs no gate but --config pass.toml names one"),
    ],
)
def test_gate_options_that_cannot_be_met_are_usage_errors(files, options, message):
    result = run("compare", files["a"], files["b"], "--no-step-summary", *options)
    assert result.exit_code == 2 and message in result.stderr and result.stdout == ""
