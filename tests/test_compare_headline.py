"""The comparison's headline counts what a team calls a regression (issue 41, item 8): a check the gate failed,
as many as the gate failed; a metric worse beyond the noise that the gate passed is said as such, never a
regression; without a gate none is. Every format says the same (compare.Comparison.headline)."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest
from fixtures.synthetic_report import synthetic_report

from macs_audit.compare import compare
from macs_audit.formats import html, json_report, junit, markdown, terminal
from macs_audit.gating.checks import run_gate
from macs_audit.gating.config import parse_config

# B is 7 points less accurate and 6 points less calibrated than A: worse beyond the noise either way.
A, B = synthetic_report(accuracy=0.92, ece=0.03), synthetic_report(accuracy=0.85, ece=0.09)


def _gated(config: dict):
    """As `compare --gate` runs it: A the baseline where the config sets allowances."""
    parsed = parse_config(config)
    return compare(A, B, "main.json", "pr.json", gate=run_gate(B, parsed, A if parsed.baseline else None))


def _formats(comparison) -> dict[str, str]:
    """The headline line of each human format."""
    return {
        "terminal": terminal.to_text(terminal.comparison_table(comparison), width=200).splitlines()[0],
        "md": markdown.render_comparison(comparison).splitlines()[0].replace("\\_", "_"),
        "html": html.render_comparison(comparison),
    }


@pytest.mark.parametrize(
    "config, headline, failed",
    [
        # The PR passed the gate: no regression, the worse rows said as such.
        (
            {"min_accuracy": 0.8, "max_ece": 0.1},
            "0 regressions: the gate passed; {w} metrics worse beyond the noise",
            [],
        ),
        # A failed check is a regression, the other worse rows "more".
        (
            {"min_accuracy": 0.9, "max_ece": 0.1},
            "1 regression: the gate failed min_accuracy; {m} more metrics worse beyond the noise",
            ["min_accuracy"],
        ),
        # Two checks on one metric: counted as the gate counts them, both named.
        (
            {"min_accuracy": 0.9, "baseline": {"max_accuracy_drop": 0.01}},
            "2 regressions: the gate failed min_accuracy, baseline.max_accuracy_drop; {m} more metrics worse "
            "beyond the noise",
            ["min_accuracy", "baseline.max_accuracy_drop"],
        ),
    ],
)
def test_the_headline_agrees_with_the_gate_in_every_format(config, headline, failed):
    comparison = _gated(config)
    worse = len(comparison.worse)
    assert worse >= 3 and {"accuracy", "ece", "nll"} <= {r.key for r in comparison.worse}
    expected = headline.format(w=worse, m=worse - len(comparison.regressions))
    assert comparison.headline == expected and comparison.n_regressions == len(failed)
    assert [r.gate_failed for r in comparison.regressions] == ([", ".join(failed)] if failed else [])
    assert [r.key for r in comparison.regressions] == (["accuracy"] if failed else [])
    for name, text in _formats(comparison).items():
        assert expected in text, name
    data = json.loads(json_report.render_comparison(comparison))
    assert data["headline"] == expected and data["n_regressions"] == len(failed) and data["n_worse"] == worse
    assert data["gate"]["passed"] is (not failed) and data["gate"]["failed"] == failed
    root = ET.fromstring(junit.render_comparison(comparison).encode("utf-8"))
    assert root.get("failures") == str(len(comparison.regressions))
    messages = [e.get("message") for e in root.iter("failure")]
    assert messages == [m for m in messages if "the gate failed" in m]
    assert all(any(name in m for m in messages) for name in failed)


def test_without_a_gate_no_worse_row_is_called_a_regression():
    comparison = compare(A, B, "main.json", "pr.json")
    expected = f"{len(comparison.worse)} metrics worse beyond the noise (no gate ran)"
    assert comparison.regressions == [] and comparison.n_regressions is None
    for name, text in _formats(comparison).items():
        assert expected in text and "regression" not in text.split("\n")[0].lower().replace("macs-audit", ""), name
    data = json.loads(json_report.render_comparison(comparison))
    assert data["headline"] == expected and data["n_regressions"] is None and data["gate"] is None


def test_nothing_worse_and_a_gate_passed():
    assert compare(A, A, gate=run_gate(A, parse_config({"min_accuracy": 0.5}))).headline == (
        "0 regressions: the gate passed"
    )
    assert compare(A, A).headline == "0 metrics worse beyond the noise (no gate ran)"
