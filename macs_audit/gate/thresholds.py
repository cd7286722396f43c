"""`macs-audit init`'s starting gate table: a report's values loosened by a margin, written as TOML.

The thresholds are ones the report passes, for every gated metric it holds (and the worst
corruption's mean accuracy and ECE); the table is added to a TOML file atomically, never over a
gate table the file already has, and only once the gate accepts what would be written.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

from macs_audit.errors import InputError, UsageError
from macs_audit.gate.checks import locate
from macs_audit.gate.config import (
    MACS_AUDIT_TOML,
    PYPROJECT_TOML,
    TOOL_TABLE,
    bound_key,
    gate_table,
    parse_config,
    read_toml,
    table_name,
)
from macs_audit.metrics.registry import GATE_METRICS, METRICS, Metric
from macs_audit.numbers import format_value
from macs_audit.report import Report
from macs_audit.text import printable

MARGIN = 0.02  # fractions (accuracy, ECE, ...): 2 percentage points either way
RELATIVE_MARGIN = 0.10  # the other metrics (NLL, Brier, ratios): 10% of the value


@dataclasses.dataclass
class StartingThreshold:
    key: str  # "min_accuracy", or "min_accuracy" under corruptions
    bound: float
    observed: float
    what: str  # what was observed, in words (for the comment)
    percent: bool


def _loosened(value: float, metric: Metric, margin: float, relative_margin: float) -> float:
    """`value` moved by the margin in the allowed direction, rounded outwards to 4 decimals."""
    allowance = margin if metric.unit.bounded else relative_margin * abs(value)
    if metric.higher_is_better:
        bound = math.floor((value - allowance) * 1e4) / 1e4
    else:
        bound = math.ceil((value + allowance) * 1e4) / 1e4
    return min(1.0, max(0.0, bound)) if metric.unit.bounded else bound


def starting_thresholds(
    report: Report, margin: float = MARGIN, relative_margin: float = RELATIVE_MARGIN
) -> tuple[list[StartingThreshold], list[StartingThreshold]]:
    """(thresholds, per-corruption defaults) at the report's values loosened by the margins: a config that
    the report passes, for every gated metric it holds. The per-corruption defaults bound the worst
    corruption's mean accuracy and ECE."""
    if not (0 <= margin < 1 and 0 <= relative_margin < 1):
        raise UsageError(f"margins must lie in [0, 1), got {margin:g} and {relative_margin:g}")
    absolute = []
    for metric in GATE_METRICS.values():
        value, _ = locate(report, metric)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            continue
        bound = _loosened(float(value), metric, margin, relative_margin)
        absolute.append(StartingThreshold(bound_key(metric), bound, float(value), metric.title, metric.percent))
    per_corruption = []
    entries = report.corruption_summary.corruptions if report.corruption_summary is not None else {}
    for name in ("accuracy", "ece"):
        metric = METRICS[name]
        values = {c: getattr(e, name) for c, e in entries.items()}
        values = {c: v for c, v in values.items() if isinstance(v, (int, float)) and math.isfinite(v)}
        if not values:
            continue
        pick = min if metric.higher_is_better else max
        worst = pick(values, key=values.__getitem__)
        bound = _loosened(values[worst], metric, margin, relative_margin)
        what = f"{'lowest' if metric.higher_is_better else 'highest'} per-corruption mean {metric.label} ({worst})"
        per_corruption.append(StartingThreshold(bound_key(metric), bound, values[worst], what, metric.percent))
    if not absolute and not per_corruption:
        raise InputError("the report holds no gated metric (no clean metrics): is it a report written by evaluate?")
    return absolute, per_corruption


def _comment(text: str) -> str:
    """One TOML comment line's text: a report's line breaks and control characters shown as escapes."""
    return printable(text)


def starting_config(
    report: Report,
    table: str = TOOL_TABLE,
    margin: float = MARGIN,
    relative_margin: float = RELATIVE_MARGIN,
    report_name: str = "the report",
) -> str:
    """The TOML text of a starting gate table `table` from `report` (see starting_thresholds)."""
    absolute, per_corruption = starting_thresholds(report, margin, relative_margin)
    model, data = report.model, report.data
    lines = [
        _comment(f"# Starting gate thresholds, written by `macs-audit init` from {report_name}"),
        _comment(f"# ({model.path or '?'} on {data.source or '?'}, n={data.n or '?'}): each is the report's value"),
        f"# loosened by {margin:g} for fractions (accuracy, ECE, ...) and by {100 * relative_margin:g}% of",
        "# the value for the other metrics, on point estimates (use_interval = true gates on",
        "# the pessimistic end of the 95% interval instead). Tighten them as the model",
        "# improves; docs/gate.md lists every key.",
        f"[{table}]",
    ]

    def row(t: StartingThreshold) -> str:
        return f"{t.key} = {t.bound!r}  " + _comment(f"# {t.what}: {format_value(t.observed, t.percent)} in the report")

    lines += [row(t) for t in absolute]
    if per_corruption:
        lines += ["", "# Every corruption's mean over severities; [...corruptions.<name>] overrides one."]
        lines += [f"[{table}.corruptions]", *(row(t) for t in per_corruption)]
    lines += [
        "",
        "# Regression checks against a saved baseline report (gate --baseline BASE.json, or report = below):",
        f"# [{table}.baseline]",
        '# report = "baseline.json"',
        "# max_ece_increase = 0.01",
        "# max_accuracy_drop = 0.01",
    ]
    return "\n".join(lines) + "\n"


def write_starting_config(
    path: Path,
    report: Report,
    margin: float = MARGIN,
    relative_margin: float = RELATIVE_MARGIN,
    report_name: str = "the report",
) -> str:
    """Add a starting gate table to the TOML file `path` (created, or appended to when it has no gate table
    yet), atomically; return the table's name. A file that already has one is refused: init never
    replaces thresholds. A stream (`-`, a FIFO, a character device) is written to like every output
    (macs_audit.atomic.destination), never read: it gets the table alone."""
    from macs_audit.atomic import destination, write_text

    table = table_name(path)
    if path.is_dir():
        raise UsageError(f"{path} is a directory; give a TOML file ({PYPROJECT_TOML} or {MACS_AUDIT_TOML})")
    existing = ""
    dest = destination(path)  # a block device or a socket: UsageError
    if dest.file is not None and dest.file.exists():
        found, source = gate_table(read_toml(path), path)
        if found is not None:
            raise UsageError(
                f"{source} already exists: init does not replace thresholds; edit them there, "
                "or remove that table and run init again"
            )
        try:
            existing = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise UsageError(f"cannot read {path}: {exc.strerror}") from None
    block = starting_config(report, table, margin, relative_margin, report_name)
    text = existing + ("\n" if existing and not existing.endswith("\n") else "") + ("\n" if existing else "") + block
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:  # e.g. an inline `tool.macs-audit = {...}` the table cannot extend
        raise UsageError(f"cannot add [{table}] to {path}: the result would not be valid TOML ({exc})") from None
    found, source = gate_table(doc, path)
    parse_config(found or {}, source, base_dir=path.parent)  # what was written is a config the gate accepts
    write_text(path, text)
    return table
