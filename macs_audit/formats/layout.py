"""The Report's sections, in the one order every format shows them: Markdown, HTML and terminal walk SECTIONS.

A Part is a key (the HTML anchor, and what a format hangs its extras on: a plot, a heat map), a title,
and `build(report)`: the section's content in no format (tables of strings from formats/tables.py, the
report's particulars for the heading, a caption), or None when the report lacks it. A new section is one
entry in SECTIONS; each format renders its content in its place. What frames the sections is each
format's own: the verdict and the gate's table, the model and runtime, the conventions.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

from macs_audit.formats import parity_tables, tables
from macs_audit.metrics.metric_row import Place
from macs_audit.numbers import format_value
from macs_audit.report import Calibrators, Conformal, OODDetection, RealLabels, Report, Shift, Unlabeled


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
class Part:
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


def _part(
    name: str, header: list[str], rows: Callable[[Report], list[list[str]]], detail: Callable[[Any], str]
) -> Callable[[Report], Content | None]:
    """The section of the report's part `name` (None where the report lacks it): one table, and the part's
    particulars in the heading."""

    def build(report: Report) -> Content | None:
        part = getattr(report, name)
        return None if part is None else Content((Table(header, rows(report)),), detail(part))

    return build


def _conformal_detail(cf: Conformal) -> str:
    return (
        f"target coverage {format_value(cf.target_coverage, True)}, fitted on {cf.n_calibration:,} "
        f"held-out images, scored on the other {cf.n_eval:,}; intervals: Clopper-Pearson"
    )


def _ood_detail(o: OODDetection) -> str:
    detail = f"{o.n_in:,} evaluation images (positive) against {o.n_out:,} of {o.source}"
    if o.features is not None:
        f = o.features
        detail += f"; feature scores fitted on {f.n_fit:,} of {f.fit}, scored on {f.n_in:,} ({f.dimension} features)"
    return detail


def _unlabeled_detail(u: Unlabeled) -> str:
    accuracy = format_value(u.source_accuracy, True)
    return f"{u.n:,} images of {u.source} (fitted on the evaluation data, accuracy {accuracy})"


_conformal = _part(
    "conformal",
    ["sets", "coverage [95% CI]", "mean set size", "worst class [95% CI]"],
    tables.conformal_rows,
    _conformal_detail,
)
_ood = _part("ood", ["metric, score", "value", "95% CI"], partial(tables.located_rows, place=Place.OOD), _ood_detail)
_unlabeled = _part(
    "unlabeled",
    ["estimator", "value", "95% CI"],
    partial(tables.located_rows, place=Place.UNLABELED),
    _unlabeled_detail,
)


def _shift_detail(shift: Shift) -> str:
    mapped = sorted({f"{name}: {entry.mapped_by}" for name, entry in shift.sets.items()})
    return f"{len(shift.sets)} set{'s' if len(shift.sets) != 1 else ''} ({'; '.join(mapped)})"


def _shift(report: Report) -> Content | None:
    shift = report.shift
    if shift is None:
        return None
    outputs = sorted({entry.num_outputs for entry in shift.sets.values()})
    caption = (
        "restricted (the default): softmax over the logits of the set's classes; unrestricted: softmax over all "
        f"{'/'.join(map(str, outputs))} outputs, a prediction outside the set counts as wrong"
    )
    table = Table(
        tables.shift_header(), tables.shift_rows(report), note="RMS error: the RMS calibration error (100-sample bins)"
    )
    return Content((table,), _shift_detail(shift), caption)


def _parity(report: Report) -> Content | None:
    parity = report.parity
    if parity is None:
        return None
    reference = parity.reference
    detail = f"against {reference.path} ({reference.provider or reference.backend})"
    caption = (
        "candidate (this report's model) - reference on the same images; 95% intervals paired (the same "
        f"{parity.bootstrap_resamples:,} resamples for both models); ref q: the reference's conformal threshold, "
        "own q: the candidate's"
    )
    legend = "c->w, w->c: predictions that turned wrong, right; max |dz|: the largest logit difference"
    found = [Table(parity_tables.parity_header(), parity_tables.parity_rows(report), note=legend)]
    differences = parity_tables.parity_difference_rows(report)
    if differences:
        found.append(Table(["view", "metric", "ref", "cand", "change", "95% CI"], differences, text_columns=2))
    return Content(tuple(found), detail, caption)


REPRESENTATION_ROWS = 8  # the corruption and perturbation views shown: those farthest from the clean features


def _representation(report: Report) -> Content | None:
    section = report.representation_shift
    if section is None:
        return None
    data = [t for t in section.tests if t.kind in ("ood", "unlabeled", "shift")]
    views = sorted((t for t in section.tests if t not in data), key=lambda t: -t.mmd2)
    shown = data + views[:REPRESENTATION_ROWS]
    rows = [[t.name, t.kind, f"{t.n:,}", f"{t.mmd:.4f}", f"{t.p_value:.4f}"] for t in shown]
    note = (
        f"{len(views) - REPRESENTATION_ROWS} more views in the JSON report" if len(views) > REPRESENTATION_ROWS else ""
    )
    table = Table(["set or view", "kind", "n", "MMD", "p-value"], rows, text_columns=2, note=note)
    detail = f"features of {section.layer} against the clean images' ({section.permutations} permutations)"
    return Content((table,), detail)


def _real_labels_detail(real: RealLabels) -> str:
    return f"{real.n:,} images with ReaL labels ({real.n_without_labels:,} without, left out), from {real.source}"


_real_labels = _part(
    "real_labels",
    ["metric", "value", "95% CI"],
    partial(tables.located_rows, place=Place.REAL_LABELS),
    _real_labels_detail,
)


def _per_class(report: Report) -> Content | None:
    rows = tables.per_class_rows(report)
    if not rows:
        return None
    header = tables.per_class_header(report)
    return Content((Table(header, rows),), caption="the clean images of each class, the least accurate first")


def _slices(report: Report) -> Content | None:
    """The scored slices, worst accuracy gap first (every one: the terminal lists the first tables.SLICE_ROWS),
    then the multicalibration error, the slices too small to score and the columns not sliced."""
    section = report.slices
    if section is None:
        return None
    found = [Table(tables.SLICE_HEADER, [tables.slice_row(s) for s in section.slices])] if section.slices else []
    notes = tables.slice_note_rows(section)
    if notes:
        found.append(Table(["finding", "detail"], notes, text_columns=2))
    return Content(tuple(found), caption=tables.slice_caption(section))


SECTIONS: tuple[Part, ...] = (
    Part("clean", "Clean calibration", _clean),
    Part("per_class", "Per class", _per_class),
    Part("slices", "Where it breaks: slices", _slices),
    Part("temperature", "Temperature scaling", _temperature),
    Part("calibrators", "Post-hoc calibrators", _calibrators),
    Part("margins", "Logit margins", _margins),
    Part("robustness", "Robustness", _robustness),
    Part("corruptions", "Corruptions (accuracy by severity)", _corruptions),
    Part("shift", "Natural shift", _shift),
    Part("real", "ImageNet ReaL labels", _real_labels),
    Part("selective", "Selective prediction", _selective),
    Part("conformal", "Conformal sets", _conformal),
    Part("ood", "OOD detection", _ood),
    Part("representation", "Representation shift", _representation),
    Part("unlabeled", "Accuracy without labels", _unlabeled),
    Part("parity", "Deployment parity", _parity),
)


def section(key: str) -> Part:
    return next(s for s in SECTIONS if s.key == key)


def present(report: Report) -> list[tuple[Part, Content]]:
    """The sections `report` has, in order, each with its content."""
    built = ((s, s.build(report)) for s in SECTIONS)
    return [(s, content) for s, content in built if content is not None]
