"""The terminal tables fit the console they are printed to: at 80 columns (a CI log) and 120 (a terminal, a
file), with the full 19 x 5 corruption grid, no name is cut and no marker wraps onto a line of its own."""

import pytest
from fixtures.synthetic_report import synthetic_report

from macs_audit import gating as gate
from macs_audit.compare import compare
from macs_audit.formats import terminal
from macs_audit.views.corruptions.table import BENCHMARK_CORRUPTIONS, CORRUPTIONS


@pytest.fixture(scope="module")
def report():
    return synthetic_report()  # every section, all 19 corruptions x 5 severities


@pytest.fixture(scope="module")
def gate_result(report):
    config = gate.parse_config(
        {
            "min_accuracy": 0.9,
            "max_ece": 0.05,
            "corruptions": {"min_accuracy": 0.6, "elastic_transform": {"min_accuracy": 0.9}},
            "baseline": {"max_ece_increase": 0.01},
        }
    )
    return gate.run_gate(report, config, synthetic_report(accuracy=0.9, ece=0.05, seed=1), baseline_name="base.json")


def lines_at(renderable, width: int) -> list[str]:
    text = terminal.to_text(renderable, width=width)
    lines = text.splitlines()
    # a suggested command is never wrapped (it is copied whole); the terminal folds it where it must
    assert max(len(line.rstrip()) for line in lines if "macs-audit " not in line) <= width, text
    assert "…" not in text, text
    return lines


def row_of(lines: list[str], name: str) -> str:
    """The one line of the corruption table holding `name` as a whole word."""
    hits = [line for line in lines if name in line.replace("│", " ").split()]
    assert len(hits) == 1, (name, hits)
    return hits[0]


@pytest.mark.parametrize("width", [80, 120])
def test_the_corruption_grid_shows_every_name_whole_with_its_marker(report, width):
    lines = lines_at(terminal.renderable(report), width)
    for name in CORRUPTIONS:
        row = row_of(lines, name)
        extra = name not in BENCHMARK_CORRUPTIONS
        assert (f"{name} *" in row) == extra, row  # the marker on the name's own line
        assert len([cell for cell in row.replace("│", " ").split() if "." in cell]) == 7, row  # 5 severities + 2
    assert not any(line.strip(" │┃") == "*" for line in lines)
    assert any(line.startswith("* extra corruption") for line in lines)


def test_80_columns_use_the_compact_grid_and_state_its_abbreviations(report):
    lines = lines_at(terminal.renderable(report), 80)
    header = next(line for line in lines if "corruption" in line.split() and "s1" in line.split())
    assert header.split()[-2:] == ["acc", "ECE"] and "┃" not in header
    assert any("acc, ECE: mean over them" in line for line in lines)  # the legend of the short headers
    wide = lines_at(terminal.renderable(report), 120)
    assert any("mean acc" in line and "┃" in line for line in wide)  # room for the boxed table and full headers


def test_narrower_still_gives_a_line_per_corruption(report):
    text = terminal.to_text(terminal.renderable(report), width=60)
    assert "…" not in text
    for name in CORRUPTIONS:
        assert any(line.startswith(f"{name} ") for line in text.splitlines()), name


@pytest.mark.parametrize("width", [80, 120])
def test_gate_checks_keep_their_config_keys_whole(gate_result, width):
    lines = lines_at(terminal.gate_table(gate_result), width)
    words = {word.rstrip(":") for line in lines for word in line.replace("│", " ").split()}
    for check in gate_result.checks:
        assert check.name in words, check.name


def check_status(check) -> str:
    return "PASS" if check.passed else "FAIL"


def test_gate_checks_stacked_two_lines_each_when_the_table_does_not_fit(gate_result):
    """At 80 columns the gate's table does not fit: each check is its key and values, then its metric and
    detail on a line of their own (a real line break, not an escaped `\\n`)."""
    lines = lines_at(terminal.gate_table(gate_result), 80)
    assert not any("\\n" in line for line in lines), lines
    for check in gate_result.checks:
        (i,) = [i for i, line in enumerate(lines) if line.split()[:2] == [check_status(check), f"{check.name}:"]]
        assert any(line.strip().startswith(f"{check.metric};") for line in lines[i + 1 : i + 4]), lines[i : i + 4]


@pytest.mark.parametrize("width", [80, 120])
def test_the_comparison_keeps_each_metric_label_on_one_line(report, width):
    comparison = compare(report, synthetic_report(accuracy=0.9, ece=0.05, seed=1), "main.json", "pr.json")
    text = "\n".join(lines_at(terminal.comparison_table(comparison), width))
    for row in comparison.rows:
        assert row.label in text, row.label
