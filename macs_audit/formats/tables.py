"""The Report's sections as plain rows of strings, shared by the Markdown, HTML and terminal formats
(formats/layout.py puts them in order and titles them); the parity section's rows are formats/parity_tables.py's.

Each function returns None (or []) when its section is absent, so every format skips it the same
way. Values and changes are written by macs_audit.numbers (fractions as percent, other values with 4
decimals). Labels, units and directions come from the metric registry.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from macs_audit.gating import Check, GateResult
from macs_audit.metrics.conventions import INTERVAL_METRICS, SLICE_CORRECTIONS
from macs_audit.metrics.metric_row import Metric, Place
from macs_audit.metrics.registry import CONFORMAL_METHOD_LABELS, METRICS, TEMPERATURE_METRICS, VIEW_METRICS, in_place
from macs_audit.numbers import format_change, format_value, format_values
from macs_audit.report import (
    Calibrators,
    Report,
    SliceResult,
    Slices,
    ViewResult,
    multicalibration_where,
    slice_label,
)

if TYPE_CHECKING:
    from macs_audit.compare import Comparison

# Raw against scaled: every temperature metric but accuracy, which dividing logits by T leaves alone.
TEMPERATURE_ROWS = tuple(name for name in TEMPERATURE_METRICS if name != "accuracy")


def shown(value: Any, default: Any = "?") -> Any:
    """A report value for display, or `default` where the report does not have it."""
    return default if value is None else value


def title(report: Report) -> str:
    n = report.clean.metrics.get("n", 0)
    if report.model.format == "predictions" and report.model.path == report.data.source:
        return f"saved predictions {shown(report.data.source)} (n={n:,})"
    return f"{shown(report.model.path)} on {shown(report.data.source)} (n={n:,})"


def ran_as(report: Report) -> str:
    """How the model ran: "onnx via CPUExecutionProvider on cpu", or, for an audit of saved predictions, that none
    did."""
    m, r = report.model, report.runtime
    if m.format == "predictions":
        return "saved predictions (no model ran)"
    return f"{shown(m.format)} via {shown(r.provider)} on {shown(r.device)}"


def header_rows(report: Report) -> list[tuple[str, str]]:
    """Who/what/when: model, data, runtime, tool."""
    m, d = report.model, report.data
    rows = [
        ("model", str(shown(m.path))),
        ("format", ran_as(report)),
        ("sha256", str(shown(m.sha256, "-"))),
        ("data", f"{shown(d.source)}, n={shown(d.n)}, {shown(d.num_classes)} classes"),
        *([("classes", class_matching(d.class_matching, d.num_classes, report.clean))] if d.class_matching else []),
        (
            "created",
            f"{report.created or '-'} by macs-audit {shown(report.tool.version)} "
            f"(report schema {report.schema_version})",
        ),
    ]
    if m.arch:
        rows.insert(1, ("architecture", str(m.arch)))
    if m.mean is not None and m.std is not None:
        # The normalisation applied, and whether anyone chose it (config_sources lacks what nobody set).
        size = f"{m.input_size[0]}x{m.input_size[1]}, " if m.input_size else ""
        values = f"mean {','.join(f'{v:g}' for v in m.mean)}, std {','.join(f'{v:g}' for v in m.std)}"
        sources = m.config_sources
        defaulted = [key for key in ("mean", "std") if sources is not None and key not in sources]
        default = f" ({'' if len(defaulted) == 2 else defaulted[0] + ': '}CIFAR-10 default)" if defaulted else ""
        rows.insert(2 if m.arch else 1, ("input", f"{size}{values}{default}"))
    if m.checkpoint_prefix_stripped:
        rows.append(("checkpoint", f"key prefix {m.checkpoint_prefix_stripped!r} stripped from every key"))
    rows += [("warning", w) for w in m.warnings or []]
    return rows


def class_matching(record: dict[str, Any], num_classes: int | None, clean: ViewResult | None = None) -> str:
    """How the data's classes met the model's outputs (data.class_matching), in words; for a subset, the clean
    view's unrestricted accuracy beside."""
    by = record.get("by")
    if by == "position":
        text = f"by position ({record.get('reason', 'a side names no classes')})"
    elif by == "name":
        text = f"by name ({record.get('mapped_by')})"
    else:
        text = f"by {record.get('mapped_by')}"
    outputs = record.get("num_outputs")
    if record.get("restricted") and isinstance(outputs, int):
        text += f"; {shown(num_classes)} of the model's {outputs} outputs, every metric restricted to them"
        accuracy = (clean.unrestricted or {}).get("accuracy") if clean is not None else None
        if accuracy is not None:
            text += f" (accuracy over every output: {format_value(accuracy, True)})"
    return text


def _interval(ci: list[float] | None, percent: bool) -> str:
    return f"[{format_value(ci[0], percent)}, {format_value(ci[1], percent)}]" if ci else ""


def clean_label(report: Report, metric: Metric) -> str:
    """A clean metric's row label: log p statistics named so for a probability model, the margin target given."""
    text = metric.table_label_for(report.model.output)
    target = report.conventions.margin_target
    if metric.name == "frac_margin_below_target" and isinstance(target, (int, float)):
        return f"{text} (target {target:.1f}, logits)"  # the report's own target
    return text


def clean_rows(report: Report) -> list[tuple[str, str, str]]:
    """(label, value, 95% CI) for the clean metrics present."""
    m, ci = report.clean.metrics, report.clean.intervals
    # Resamples asked for but too few samples: say so instead of leaving the cell blank.
    missing = f"n/a (n = {m.get('n')})" if report.conventions.bootstrap_note else ""
    return [
        (
            clean_label(report, metric),
            format_value(m[metric.name], metric.percent),
            _interval(ci.get(metric.name), metric.percent) or (missing if metric.name in INTERVAL_METRICS else ""),
        )
        for metric in in_place(Place.CLEAN)
        if metric.name in m
    ]


def per_class_header(report: Report) -> list[str]:
    """per_class_rows' columns: the LAC sets' coverage last where the report has it."""
    header = ["class", "images", "accuracy", "mean confidence", "ECE (15 bins)"]
    if any("coverage" in e for e in report.clean.per_class or []):
        header.append("LAC set coverage (held-out images)")
    return header


def per_class_rows(report: Report, limit: int | None = None) -> list[list[str]]:
    """[class, images, accuracy, mean confidence, ECE(, LAC coverage)] of the clean view's classes, the least
    accurate first (then the worse calibrated); `limit`: the first that many."""
    entries = report.clean.per_class or []
    ordered = sorted(entries, key=lambda e: (e.get("accuracy", 1.0), -(e.get("ece") or 0.0)))
    coverage = len(per_class_header(report)) > 5
    rows = []
    for e in ordered[:limit]:
        row = [
            str(e.get("name", e.get("class"))),
            f"{e.get('n', 0):,}",
            format_value(e.get("accuracy"), True),
            format_value(e.get("mean_confidence"), True),
            format_value(e.get("ece"), True),
        ]
        if coverage:
            n = e.get("n_coverage")
            row.append(f"{format_value(e.get('coverage'), True)} of {n:,}" if "coverage" in e and n else "-")
        rows.append(row)
    return rows


def temperature_caption(report: Report) -> str | None:
    ts = report.temperature_scaling
    if ts is None:
        return None
    return (
        f"T = {ts.temperature:.3f}, fitted on {shown(ts.n_fit, 0):,} held-out images, "
        f"scored on the other {shown(ts.n_eval, 0):,}"
    )


def temperature_rows(report: Report) -> tuple[str, list[tuple[str, str, str]]] | None:
    """(caption, [(label, raw, scaled)])."""
    ts, caption = report.temperature_scaling, temperature_caption(report)
    if ts is None or caption is None:
        return None
    rows = [
        (
            METRICS[name].label,
            format_value(ts.raw.get(name), METRICS[name].percent),
            format_value(ts.scaled.get(name), METRICS[name].percent),
        )
        for name in TEMPERATURE_ROWS
        if name in ts.raw
    ]
    return caption, rows


CALIBRATOR_SCORES = ("accuracy", "nll", "ece", "smooth_ece", "brier")  # calibrators/selection.py SCORES


def calibrator_table(section: Calibrators) -> tuple[str, list[str], list[list[str]]]:
    """(caption, header, rows) of a calibrator comparison: one row per method, the selected one starred."""
    header = ["method", *(METRICS[name].label for name in CALIBRATOR_SCORES), "parameters"]
    rows = []
    for row in section.methods:
        label = str(row.get("method"))
        if row.get("method") == section.selected:
            label += " *"
        if row.get("refused"):  # the reason the report holds: too few images, or classes without any
            rows.append([label, *("-" for _ in CALIBRATOR_SCORES), f"not fitted: {row.get('refused')}"])
            continue
        scores = row.get("scores") or {}
        values = [format_value(scores.get(name), METRICS[name].percent) for name in CALIBRATOR_SCORES]
        rows.append([label, *values, f"{row.get('n_parameters', 0):,}"])
    caption = (
        f"fitted on {section.n_fit:,} held-out images, scored on the other {section.n_eval:,}; "
        f"* best by {METRICS[section.select].with_unit if section.select in METRICS else section.select}"
    )
    return caption, header, rows


def robustness_rows(report: Report) -> list[tuple[str, str]]:
    rb = report.robustness
    if not rb:
        return []
    rows = []
    robust_accuracy, gradient_norm = METRICS["robust_accuracy"], METRICS["mean_gradient_norm"]
    if rb.robust_accuracy is not None:
        rows.append(
            (
                f"{robust_accuracy.label} ({report.robust_view_name()})",
                format_value(rb.robust_accuracy, robust_accuracy.percent),
            )
        )
    sens = rb.sensitivity
    if sens is not None and sens.mean_gradient_norm is not None:
        method = str(shown(sens.method)).split(" (")[0]  # the long form is in the JSON
        rows.append(
            (
                f"{gradient_norm.label} ({gradient_norm.note}; {method}, n={shown(sens.n)})",
                format_value(sens.mean_gradient_norm, gradient_norm.percent),
            )
        )
    for name in ("robustness_ratio", "median_flip_radius"):
        metric, value = METRICS[name], getattr(rb, name)
        if value is not None:
            rows.append((metric.table_label, format_value(value, metric.percent)))
    return rows


def view_header(first: str = "view") -> list[str]:
    return [first, *(METRICS[name].label for name in VIEW_METRICS)]


def view_row(view: ViewResult) -> list[str]:
    """[name, accuracy, ECE, NLL, Brier] of one view."""
    return [view.name, *(format_value(view.metrics.get(name), METRICS[name].percent) for name in VIEW_METRICS)]


def view_rows(report: Report, kind: str = "perturbation") -> list[list[str]]:
    """A row per view of `kind`, after the clean view for reference; [] when there are none."""
    views = report.views_of(kind)
    return [view_row(v) for v in ([report.clean] + views if views else [])]


def corruption_grid(report: Report) -> tuple[list[str], list[int], dict[tuple[str, int], ViewResult]]:
    """(corruption names in report order, severities, (name, severity) -> view)."""
    cells = {
        (v.corruption, v.severity): v
        for v in report.views
        if v.kind == "corruption" and v.corruption and v.severity is not None
    }
    names = list(dict.fromkeys(name for name, _ in cells))
    severities = sorted({s for _, s in cells})
    return names, severities, cells


def corruption_rows(report: Report) -> tuple[list[str], list[list[str]]] | None:
    """Header and rows of the corruption x severity accuracy table with per-corruption means."""
    names, severities, cells = corruption_grid(report)
    per = report.corruption_summary.corruptions if report.corruption_summary is not None else {}
    names = names or list(per)
    if not names:
        return None
    accuracy, ece = METRICS["accuracy"], METRICS["ece"]
    header = ["corruption", "family", *(f"sev {s}" for s in severities), "mean acc", f"mean {ece.label}"]
    rows = []
    for name in names:
        entry = per.get(name)
        family = (entry.family if entry else None) or next(
            (v.family for (n, _), v in cells.items() if n == name and v.family), ""
        )
        label = name + (" *" if entry and entry.extra else "")
        accs = [
            format_value(cells[(name, s)].metrics.get("accuracy"), accuracy.percent) if (name, s) in cells else "-"
            for s in severities
        ]
        rows.append(
            [
                label,
                family or "-",
                *accs,
                format_value(entry.accuracy if entry else None, accuracy.percent),
                format_value(entry.ece if entry else None, ece.percent),
            ]
        )
    return header, rows


def corruption_summary_rows(report: Report) -> list[tuple[str, str]]:
    cs = report.corruption_summary
    if not cs:
        return []
    rows = [
        (metric.table_label, format_value(getattr(cs, metric.report_key), metric.percent))
        for metric in in_place(Place.CORRUPTION)
        if getattr(cs, metric.report_key) is not None
    ]
    accuracy, ece = METRICS["accuracy"], METRICS["ece"]
    for family, values in cs.families.items():
        rows.append(
            (
                f"family {family}: {accuracy.label} / {ece.label}",
                f"{format_value(values.accuracy, accuracy.percent)} / {format_value(values.ece, ece.percent)}",
            )
        )
    return rows


def _observed_and_bound(c: Check) -> list[str]:
    """The observed value and `op threshold`, with the digits that tell them apart (format_values)."""
    observed, bound = format_values((c.observed, c.threshold), c.percent)
    return [observed, f"{c.op} {bound}"]


def gate_rows(gate: GateResult) -> list[list[str]]:
    """[PASS/FAIL, check, metric, observed, op threshold, detail] per check."""
    return [
        [
            "PASS" if c.passed else "FAIL",
            c.name,
            c.metric,
            *_observed_and_bound(c),
            c.detail,
        ]
        for c in gate.checks
    ]


def gate_verdict(gate: GateResult) -> str:
    n, failed = len(gate.checks), len(gate.failures)
    skipped = "".join(f"; skipped {reason}" for reason in gate.skipped)
    if not failed:
        return f"gate passed: {n} of {n} checks{skipped}"
    return f"gate FAILED: {failed} of {n} checks failed ({', '.join(c.name for c in gate.failures)}){skipped}"


def convention_rows(report: Report) -> list[tuple[str, str]]:
    return [(str(k), str(v)) for k, v in report.conventions.to_dict().items()]


def comparison_rows(comparison: Comparison) -> list[list[str]]:
    """[section, metric, A, B, delta, status] per compared value."""
    return [
        [
            r.section,
            r.label,
            format_value(r.a, r.percent),
            format_value(r.b, r.percent),
            format_change(r.delta, r.percent),
            r.status,
        ]
        for r in comparison.rows
    ]


def located_rows(report: Report, place: Place) -> list[list[str]]:
    """[label, value, 95% CI] for every metric of `place` the report holds (gate.locate finds them)."""
    from macs_audit.gating import locate

    rows = []
    for metric in in_place(place):
        value, ci = locate(report, metric)
        if isinstance(value, (int, float)):
            rows.append([metric.table_label, format_value(value, metric.percent), _interval(ci, metric.percent)])
    return rows


def percent_with_interval(value: float | None, interval: list[float] | None, change: bool = False) -> str:
    """'81.25% [71.0, 89.1]': a fraction and its 95% interval in percent, the interval with one decimal (compact,
    for tables of several intervals); `change`: a difference, '-22.24 pp [-27.2, -17.1]'. The bare value where the
    report has no interval."""
    text = format_change(value, True) if change else format_value(value, True)
    if not interval or len(interval) != 2 or not all(isinstance(v, (int, float)) for v in interval):
        return text
    sign = "+" if change else ""
    return f"{text} [{100 * interval[0]:{sign}.1f}, {100 * interval[1]:{sign}.1f}]"


def conformal_coverage(value: float | None, interval: list[float] | None) -> str:
    """'81.25% [71.0, 89.1]': a coverage and its 95% Clopper-Pearson interval (percent_with_interval)."""
    return percent_with_interval(value, interval)


def conformal_rows(report: Report) -> list[list[str]]:
    """[sets, coverage [95% CI], mean set size, the worst class's coverage [95% CI], name and image count]."""
    cf = report.conformal
    if cf is None:
        return []
    names = report.data.class_names or []

    def row(label: str, stats: dict) -> list[str]:
        worst, n = stats.get("worst_class"), stats.get("worst_class_n")
        which = [names[worst]] if isinstance(worst, int) and 0 <= worst < len(names) else []
        which += [f"n={n:,}"] if isinstance(n, int) else []  # the images its interval rests on
        worst_text = ""
        if "worst_class_coverage" in stats:
            worst_text = conformal_coverage(stats["worst_class_coverage"], stats.get("worst_class_coverage_interval"))
            worst_text += f" {', '.join(which)}" if which else ""
        return [
            label,
            conformal_coverage(stats.get("coverage"), stats.get("coverage_interval")),
            format_value(stats.get("mean_set_size"), False),
            worst_text,
        ]

    def shown(method: str) -> str:
        return CONFORMAL_METHOD_LABELS.get(method, method.upper())

    rows = [row(f"{shown(method)}, clean", stats) for method, stats in cf.methods.items()]
    for view in report.views:
        for method, stats in (view.conformal or {}).items():
            if view.kind == "perturbation":
                rows.append(row(f"{shown(method)}, {view.name}", stats))
    for method, stats in (cf.corruption_mean or {}).items():
        rows.append(row(f"{shown(method)}, mean over corruptions", stats))
        rows.append(
            [
                f"{shown(method)}, lowest: {stats.get('lowest_view')}",
                conformal_coverage(stats.get("lowest_coverage"), stats.get("lowest_coverage_interval")),
                "",
                "",
            ]
        )
    return rows


SHIFT_METRICS = ("accuracy", "ece", "nll", "rms_calibration_error")  # a shift view's, in its table


def shift_header() -> list[str]:
    labels = [METRICS[name].label for name in SHIFT_METRICS[:-1]]
    return ["set, convention", *labels, "RMS error"]


def shift_rows(report: Report) -> list[list[str]]:
    """[set and convention, accuracy, ECE, NLL, RMS calibration error]: each natural-shift set under the
    restricted and the unrestricted convention, then their means."""
    shift = report.shift
    if shift is None:
        return []

    def row(label: str, metrics: dict) -> list[str]:
        # Fractions but the NLL (the RMS calibration error is no view metric of the registry's).
        return [label, *(format_value(metrics.get(k), k != "nll") for k in SHIFT_METRICS)]

    rows = []
    for name, entry in shift.sets.items():
        rows.append(row(name, entry.restricted.metrics))
        rows.append(row(f"{name}, unrestricted", entry.unrestricted.metrics))
    for convention, means in shift.mean.items():
        rows.append(row("mean" if convention == "restricted" else f"mean, {convention}", means))
    return rows


SLICE_ROWS = 10  # the slices the terminal lists (the worst accuracy gaps); Markdown and HTML list every one
SLICE_HEADER = [
    "slice",
    "n",
    "accuracy [95% CI]",
    "accuracy gap [95% CI]",
    "overconfidence gap [95% CI]",
    f"{METRICS['ece'].label} [95% CI]",
    "adjusted p",
    "significant",
]


def correction_name(correction: str, controls: bool = False) -> str:
    """'Holm', or with `controls` "Holm's correction (family-wise error rate)": a slice section's correction; the
    report's own word where this version does not know it."""
    if correction not in SLICE_CORRECTIONS:
        return correction
    name, rate = SLICE_CORRECTIONS[correction]
    return f"{name}'s correction ({rate})" if controls else name


def _p_value(p: float | None) -> str:
    """'0.866', '3.1e-06': a p-value with its digits however small it is."""
    if not isinstance(p, (int, float)):
        return "-"
    return f"{p:.3f}" if p >= 0.001 else f"{p:.1e}"


def slice_row(entry: SliceResult) -> list[str]:
    """[slice, n, accuracy, accuracy gap, overconfidence gap, ECE (each with its 95% interval), the smaller
    adjusted p-value of its two tests, 'yes' where either is significant] of one scored slice."""
    accuracy, overconfidence = entry.gaps.get("accuracy") or {}, entry.gaps.get("overconfidence") or {}
    adjusted = [
        g["adjusted_p_value"] for g in (accuracy, overconfidence) if isinstance(g.get("adjusted_p_value"), (int, float))
    ]
    return [
        slice_label(entry.column, entry.value),
        f"{entry.n:,}",
        percent_with_interval(entry.metrics.get("accuracy"), entry.intervals.get("accuracy")),
        percent_with_interval(accuracy.get("gap"), accuracy.get("interval"), change=True),
        percent_with_interval(overconfidence.get("gap"), overconfidence.get("interval"), change=True),
        percent_with_interval(entry.metrics.get("ece"), entry.intervals.get("ece")),
        _p_value(min(adjusted) if adjusted else None),
        "yes" if entry.significant else "",
    ]


def _count(n: int, unit: str) -> str:
    return f"{n:,} {unit}{'s' * (n != 1)}"


def metadata_line(metadata: dict[str, Any] | None) -> str:
    """'meta.csv keyed by index: 9,000 of 10,000 images matched, 12 rows unmatched': how a metadata file met the
    data; '' without a file."""
    if not metadata or not metadata.get("file"):
        return ""
    matched, without = metadata.get("matched", 0), metadata.get("images_without_metadata", 0)
    return (
        f"{metadata['file']} keyed by {metadata.get('keyed_by')}: {matched:,} of {matched + without:,} images "
        f"matched, {_count(metadata.get('rows_unmatched', 0), 'row')} unmatched"
    )


def slice_caption(section: Slices) -> str:
    """What was tested: the slices scored, the tests and their correction, and how a metadata file met the data."""
    tested = (
        f"{_count(len(section.slices), 'slice')} of {_count(len(section.columns), 'column')} scored against the "
        f"rest of the data; {_count(section.tests, 'test')}, {correction_name(section.correction, True)} at "
        f"{100 * section.level:g}%"
    )
    metadata = metadata_line(section.metadata)
    return f"{tested}; {metadata}" if metadata else tested


def slice_note_rows(section: Slices) -> list[list[str]]:
    """[what, detail]: the multicalibration error and where it is, each slice too small to score, each column not
    sliced with why."""
    rows = []
    found = section.multicalibration
    if found is not None:
        n = f" ({_count(found['n'], 'image')})" if isinstance(found.get("n"), int) else ""
        rows.append(
            [
                "multicalibration error",
                f"{format_value(found.get('error'), True)} in {multicalibration_where(found)}{n}",
            ]
        )
    for small in section.small:
        rest = small.get("rest")  # a slice whose rest is too small to compare it with
        rows.append(
            [
                f"listed, not scored ({'its rest ' if rest else ''}under {section.min_size:,} images)",
                f"{slice_label(small.get('column'), small.get('value'))} ({_count(small.get('n', 0), 'image')})"
                + (f"; rest: {rest}" if rest else ""),
            ]
        )
    rows += [[f"not sliced: {column}", str(reason)] for column, reason in section.skipped.items()]
    return rows
