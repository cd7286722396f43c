"""One rule per kind of number: a metric's value (percent with 2 decimals, else 4 decimals) and a change in one
(percentage points, else 4 decimals; signed or not), the same in the report's tables, the gate's checks,
JUnit messages and init's comments."""

from __future__ import annotations

import pytest
from fixtures.synthetic_report import synthetic_report

from macs_audit.formats import junit, tables
from macs_audit.gating import parse_config, run_gate, starting_config
from macs_audit.numbers import format_change, format_value, format_values


@pytest.mark.parametrize(
    "value, percent, text",
    [
        (0.92314, True, "92.31%"),
        (0.43, False, "0.4300"),
        (0.473, False, "0.4730"),
        (12.34567, False, "12.3457"),
        (0.0, True, "0.00%"),
        (None, True, "-"),
        (None, False, "-"),
    ],
)
def test_a_value(value, percent, text):
    assert format_value(value, percent) == text


@pytest.mark.parametrize(
    "change, percent, signed, text",
    [
        (0.0125, True, True, "+1.25 pp"),
        (-0.0125, True, True, "-1.25 pp"),
        (0.0123, False, True, "+0.0123"),
        (-0.0123, False, True, "-0.0123"),
        (0.01, True, False, "1.00 pp"),
        (0.01, False, False, "0.0100"),
        (None, False, True, "-"),
    ],
)
def test_a_change(change, percent, signed, text):
    assert format_change(change, percent, signed) == text


def test_a_gate_check_shows_its_values_as_the_report_table_does():
    """NLL 0.43 reads 0.4300 in the clean table, in the check on it, in its JUnit message and in init's comment."""
    report = synthetic_report()
    assert report.clean.metrics["nll"] == pytest.approx(0.43)
    result = run_gate(report, parse_config({"max_nll": 0.473, "min_accuracy": 0.9}, "test"))
    nll, accuracy = tables.gate_rows(result)
    assert nll[3:5] == ["0.4300", "<= 0.4730"] and accuracy[3:5] == ["92.00%", ">= 90.00%"]
    assert "0.4300" in [value for _, value, _ in tables.clean_rows(report)]
    assert "clean NLL (nats): 0.4300 (must be &lt;= 0.4730)" in junit.render(report, result)
    written = starting_config(report, relative_margin=0.1).splitlines()
    assert any(line.startswith("max_nll = 0.473  # clean NLL (nats): 0.4300 in the report;") for line in written)


@pytest.mark.parametrize(
    ("values", "percent", "text"),
    [
        ((0.17384, 0.1738), False, ("0.17384", "0.17380")),  # 0.1738 <= 0.1738 would not say why it failed
        ((0.050004, 0.05), True, ("5.0004%", "5.0000%")),
        ((0.43, 0.473), False, ("0.4300", "0.4730")),  # distinct at the usual digits: kept
        ((0.05, 0.05), True, ("5.00%", "5.00%")),  # equal values (a pass) keep the usual digits
    ],
)
def test_two_values_side_by_side_get_the_digits_that_tell_them_apart(values, percent, text):
    assert format_values(values, percent) == text


def test_a_failed_check_shows_the_digits_that_make_it_fail():
    report = synthetic_report()
    brier = report.clean.metrics["brier"]
    result = run_gate(report, parse_config({"max_brier": round(brier - 4e-5, 5)}, "test"))
    (row,) = tables.gate_rows(result)
    assert row[0] == "FAIL" and row[3] != row[4].removeprefix("<= ")
    assert float(row[3]) == pytest.approx(brier, abs=1e-5)


def test_a_baseline_allowance_is_an_unsigned_change():
    report = synthetic_report()
    table = {"baseline": {"max_nll_increase": 0.01, "max_accuracy_drop": 0.005, "max_ece_increase_relative": 0.1}}
    nll, accuracy, ece = run_gate(report, parse_config(table, "test"), report).checks
    assert nll.detail.startswith("baseline 0.4300, allowed increase 0.0100;")
    assert accuracy.detail.startswith("baseline 92.00%, allowed drop 0.50 pp;")
    assert "allowed increase 10% of baseline = " in ece.detail and " pp;" in ece.detail
