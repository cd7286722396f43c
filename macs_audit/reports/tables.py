"""The Report's sections as plain rows of strings, shared by the Markdown, HTML and terminal formats.

Each function returns None (or []) when its section is absent, so every format skips it the same
way. Values are formatted here once: fractions as percent, other values with 4 decimals.
"""

from __future__ import annotations

from macs_audit.gate import GateResult, format_value
from macs_audit.report import Report, ViewResult
from macs_audit.reports.terminal import CLEAN_ROWS, fmt

VIEW_COLUMNS = [("accuracy", "accuracy", True), ("ece", "ECE", True), ("nll", "NLL", False), ("brier", "Brier", False)]


def title(report: Report) -> str:
    return f"{report.model.get('path', '?')} on {report.data.get('source', '?')} (n={report.clean.metrics.get('n', 0):,})"


def header_rows(report: Report) -> list[tuple[str, str]]:
    """Who/what/when: model, data, runtime, tool."""
    m, d, r = report.model, report.data, report.runtime
    rows = [
        ("model", str(m.get("path", "?"))),
        ("format", f"{m.get('format', '?')} via {r.get('provider', '?')} on {r.get('device', '?')}"),
        ("sha256", str(m.get("sha256", "-"))),
        ("data", f"{d.get('source', '?')}, n={d.get('n', '?')}, {d.get('num_classes', '?')} classes"),
        ("created", f"{report.created or '-'} by macs-audit {report.tool.get('version', '?')} "
                    f"(report schema {report.schema_version})"),
    ]
    if m.get("arch"):
        rows.insert(1, ("architecture", str(m["arch"])))
    return rows


def clean_rows(report: Report) -> list[tuple[str, str, str]]:
    """(label, value, 95% CI) for the clean metrics present."""
    m, ci = report.clean.metrics, report.clean.intervals
    rows = []
    for key, label, percent in CLEAN_ROWS:
        if key not in m:
            continue
        interval = ci.get(key)
        ci_text = f"[{fmt(interval[0], percent)}, {fmt(interval[1], percent)}]" if interval else ""
        rows.append((label, fmt(m[key], percent), ci_text))
    return rows


def temperature_rows(report: Report) -> tuple[str, list[tuple[str, str, str]]] | None:
    ts = report.temperature_scaling
    if not ts:
        return None
    caption = (f"T = {ts['temperature']:.3f}, fitted on {ts.get('n_fit', 0):,} held-out images, "
               f"scored on the other {ts.get('n_eval', 0):,}")
    rows = [(label, fmt(ts["raw"].get(key), pct), fmt(ts["scaled"].get(key), pct))
            for key, label, pct in (("ece", "ECE", True), ("adaptive_ece", "adaptive ECE", True),
                                    ("nll", "NLL", False), ("brier", "Brier", False))
            if key in ts["raw"]]
    return caption, rows


def robustness_rows(report: Report) -> list[tuple[str, str]]:
    rb = report.robustness
    if not rb:
        return []
    rows = []
    if rb.get("robust_accuracy") is not None:
        rows.append((f"robust accuracy ({rb.get('robust_view', 'noise+blur')})", fmt(rb["robust_accuracy"], True)))
    sens = rb.get("sensitivity") or {}
    if sens.get("lipschitz") is not None:
        method = str(sens.get("method", "?")).split(" (")[0]  # the long form is in the JSON
        rows.append((f"sensitivity L^ ({method}, n={sens.get('n', '?')})", fmt(sens["lipschitz"], False)))
    if rb.get("robustness_ratio") is not None:
        rows.append(("robustness ratio (mean margin / L^)", fmt(rb["robustness_ratio"], False)))
    if rb.get("median_flip_radius") is not None:
        rows.append(("median flip radius (pixel L2)", fmt(rb["median_flip_radius"], False)))
    return rows


def view_rows(report: Report, kind: str = "perturbation") -> list[list[str]]:
    """[name, accuracy, ECE, NLL, Brier] per view of `kind`, after the clean view for reference."""
    views = [v for v in report.views if v.kind == kind]
    return [[v.name, *(fmt(v.metrics.get(k), p) for k, _, p in VIEW_COLUMNS)]
            for v in ([report.clean] + views if views else [])]


def corruption_grid(report: Report) -> tuple[list[str], list[int], dict[tuple[str, int], ViewResult]]:
    """(corruption names in report order, severities, (name, severity) -> view)."""
    cells = {(v.corruption, v.severity): v for v in report.views
             if v.kind == "corruption" and v.corruption and v.severity is not None}
    names = list(dict.fromkeys(name for name, _ in cells))
    severities = sorted({s for _, s in cells})
    return names, severities, cells


def corruption_rows(report: Report) -> tuple[list[str], list[list[str]]] | None:
    """Header and rows of the corruption x severity accuracy table with per-corruption means."""
    names, severities, cells = corruption_grid(report)
    per = (report.corruption_summary or {}).get("corruptions", {})
    names = names or list(per)
    if not names:
        return None
    header = ["corruption", "family", *(f"sev {s}" for s in severities), "mean acc", "mean ECE"]
    rows = []
    for name in names:
        entry = per.get(name, {})
        family = entry.get("family") or next((v.family for (n, _), v in cells.items() if n == name and v.family), "")
        label = name + (" *" if entry.get("extra") else "")
        accs = [fmt(cells[(name, s)].metrics.get("accuracy"), True) if (name, s) in cells else "-" for s in severities]
        rows.append([label, family or "-", *accs, fmt(entry.get("accuracy"), True), fmt(entry.get("ece"), True)])
    return header, rows


def corruption_summary_rows(report: Report) -> list[tuple[str, str]]:
    cs = report.corruption_summary
    if not cs:
        return []
    rows = []
    for key, label, percent in (
        ("mean_accuracy_15", "mean accuracy, 15 benchmark corruptions x 5", True),
        ("mean_accuracy_19", "mean accuracy, all 19 corruptions x 5", True),
        ("mean_ece_15", "mean ECE, 15 x 5", True),
        ("mean_ece_19", "mean ECE, 19 x 5", True),
        ("mce_unnormalized", "unnormalised mCE (1 - mean accuracy 15 x 5)", True),
        ("mce", "mCE relative to the corruption baseline", True),
        ("relative_mce", "relative mCE", False),
    ):
        if cs.get(key) is not None:
            rows.append((label, fmt(cs[key], percent)))
    for family, values in (cs.get("families") or {}).items():
        rows.append((f"family {family}: accuracy / ECE",
                     f"{fmt(values.get('accuracy'), True)} / {fmt(values.get('ece'), True)}"))
    return rows


def gate_rows(gate: GateResult) -> list[list[str]]:
    """[PASS/FAIL, check, metric, observed, op threshold, detail] per check."""
    return [["PASS" if c.passed else "FAIL", c.name, c.metric, format_value(c.observed, c.percent),
             f"{c.op} {format_value(c.threshold, c.percent)}", c.detail] for c in gate.checks]


def gate_verdict(gate: GateResult) -> str:
    n, failed = len(gate.checks), len(gate.failures)
    if not failed:
        return f"gate passed: {n} of {n} checks"
    return f"gate FAILED: {failed} of {n} checks failed ({', '.join(c.name for c in gate.failures)})"


def convention_rows(report: Report) -> list[tuple[str, str]]:
    return [(str(k), str(v)) for k, v in report.conventions.items()]


def format_delta(delta: float | None, percent: bool) -> str:
    """A signed change; percent metrics in percentage points (pp)."""
    if delta is None:
        return "-"
    return f"{100 * delta:+.2f} pp" if percent else f"{delta:+.4f}"


def comparison_rows(comparison) -> list[list[str]]:
    """[section, metric, A, B, delta, status] per compared value."""
    return [[r.section, r.label, fmt(r.a, r.percent), fmt(r.b, r.percent), format_delta(r.delta, r.percent), r.status]
            for r in comparison.rows]
