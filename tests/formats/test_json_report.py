"""JSON format: the Report's versioned schema, the gate's results beside it, and a comparison."""

from __future__ import annotations

import json

from report_cases import failed_gate, full_report, regressed_comparison

from macs_audit.formats import json_report
from macs_audit.report import SCHEMA_VERSION, Report


def test_json_round_trips_and_carries_the_gate():
    report, gate_result = full_report(), failed_gate()
    text = json_report.render(report, gate_result)
    data = json.loads(text)
    assert data["schema_version"] == SCHEMA_VERSION
    assert data["gate"]["passed"] is False and data["gate"]["n_failed"] == 2
    back = Report.from_json(text)  # the extra "gate" key does not stop the report being read back
    assert back.to_dict() == report.to_dict()
    assert "gate" not in json.loads(json_report.render(report))


def test_json_comparison_counts_its_rows_and_regressions():
    comparison = regressed_comparison()
    data = json.loads(json_report.render_comparison(comparison))
    assert data["kind"] == "comparison" and data["n_worse"] == len(comparison.worse) > 0
    assert data["n_regressions"] is None and data["gate"] is None  # no gate ran: nothing called a regression
    assert len(data["rows"]) == len(comparison.rows)
