"""The Report's sections, in the one order every format shows them: Markdown, HTML and terminal walk SECTIONS.

A Section is a key (the HTML anchor, and what a format hangs its extras on: a plot, a heat map), a title,
and `build(report)`: the section's content in no format (tables of strings from reports/tables.py, the
report's particulars for the heading, a caption), or None when the report lacks it. A new section is one
entry in SECTIONS; each format renders its content in its place. What frames the sections is each
format's own: the verdict and the gate's table, the model and runtime, the conventions.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

from macs_audit.metrics.registry import Place
from macs_audit.numbers import format_value
from macs_audit.report import Calibrators, Report
from macs_audit.reports import tables


@dataclasses.dataclass(frozen=True)
class Table:
    header: Sequence[str]
    rows: Sequence[Sequence[str]]
    text_columns: int = 1  # the leading columns that hold text (left-aligned); the others hold numbers
    note: str = ""  # a line under the table


@dataclasses.dataclass(frozen=True)
class Content:
    """What a section shows of one report; no tables: nothing to tabulate (a format may still draw it)."""

    tables: tuple[Table, ...] = ()
    detail: str = ""  # this report's particulars, written after the title in every format's heading
    caption: str = ""  # a sentence under the heading (the terminal writes it after the title)


@dataclasses.dataclass(frozen=True)
class Section:
    key: str
    title: str
    build: Callable[[Report], Content | None]

    def heading(self, content: Content) -> str:
        return f"{self.title}: {content.detail}" if content.detail else self.title


def _clean(report: Report) -> Content:
    return Content((Table(["metric", "value", "95% CI"], tables.clean_rows(report)),))


def _temperature(report: Report) -> Content | None:
    ts = tables.temperature_rows(report)
    if ts is None:
        return None
    caption, rows = ts
    return Content((Table(["metric", "raw", "scaled"], rows),), caption=caption)


def calibrator_content(section: Calibrators) -> Content:
    """The calibrators side by side: the audit's section, or `calibrate --method all`'s choice."""
    caption, header, rows = tables.calibrator_table(section)
    return Content((Table(header, rows),), caption=caption)


def _calibrators(report: Report) -> Content | None:
    return None if report.calibrators is None else calibrator_content(report.calibrators)


def _margins(report: Report) -> Content | None:
    """The logit margin histogram is drawn (HTML), not tabulated: the text formats have nothing to show."""
    return None if report.margin_histogram is None else Content()


def _robustness(report: Report) -> Content | None:
    rb, views = tables.robustness_rows(report), tables.view_rows(report, "perturbation")
    found = [Table(["metric", "value"], rb)] if rb else []
    if views:
        found.append(Table(tables.view_header(), views))
    return Content(tuple(found)) if found else None


def _corruptions(report: Report) -> Content | None:
    grid = tables.corruption_rows(report)
    if grid is None:
        return None
    header, rows = grid
    extra = any(row[0].endswith(" *") for row in rows)
    found = [Table(header, rows, text_columns=2, note="* not one of the 15 benchmark corruptions" if extra else "")]
    summary = tables.corruption_summary_rows(report)
    if summary:
        found.append(Table(["summary", "value"], summary))
    return Content(tuple(found))


def _selective(report: Report) -> Content | None:
    rows = tables.located_rows(report, Place.SELECTIVE)
    if not rows:
        return None
    return Content((Table(["metric", "value"], [r[:2] for r in rows]),), "abstain on the least confident (max softmax)")


def _conformal(report: Report) -> Content | None:
    cf = report.conformal
    if cf is None:
        return None
    detail = (
        f"target coverage {format_value(cf.target_coverage, True)}, fitted on {cf.n_calibration:,} "
        f"held-out images, scored on the other {cf.n_eval:,}"
    )
    header = ["sets", "coverage", "mean set size", "worst class"]
    return Content((Table(header, tables.conformal_rows(report)),), detail)


def _ood(report: Report) -> Content | None:
    o = report.ood
    if o is None:
        return None
    detail = f"{o.n_in:,} evaluation images (positive) against {o.n_out:,} of {o.source}"
    return Content((Table(["metric, score", "value", "95% CI"], tables.located_rows(report, Place.OOD)),), detail)


def _unlabeled(report: Report) -> Content | None:
    u = report.unlabeled
    if u is None:
        return None
    detail = (
        f"{u.n:,} images of {u.source} (fitted on the evaluation data, accuracy "
        f"{format_value(u.source_accuracy, True)})"
    )
    rows = tables.located_rows(report, Place.UNLABELED)
    return Content((Table(["estimator", "value", "95% CI"], rows),), detail)


SECTIONS: tuple[Section, ...] = (
    Section("clean", "Clean calibration", _clean),
    Section("temperature", "Temperature scaling", _temperature),
    Section("calibrators", "Post-hoc calibrators", _calibrators),
    Section("margins", "Logit margins", _margins),
    Section("robustness", "Robustness", _robustness),
    Section("corruptions", "Corruptions (accuracy by severity)", _corruptions),
    Section("selective", "Selective prediction", _selective),
    Section("conformal", "Conformal sets", _conformal),
    Section("ood", "OOD detection", _ood),
    Section("unlabeled", "Accuracy without labels", _unlabeled),
)


def section(key: str) -> Section:
    return next(s for s in SECTIONS if s.key == key)


def present(report: Report) -> list[tuple[Section, Content]]:
    """The sections `report` has, in order, each with its content."""
    built = ((s, s.build(report)) for s in SECTIONS)
    return [(s, content) for s, content in built if content is not None]
