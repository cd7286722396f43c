"""Compare two Reports: side-by-side values, deltas, and which changes are regressions.

`compare(a, b)` returns a Comparison (B relative to A: delta = B - A). The formats render it:
terminal.comparison_table, markdown.render_comparison, html.render_comparison,
json_report.render_comparison, junit.render_comparison. Comparing is informational: a regression
here is any change in the bad direction; thresholds on regressions belong to `gate --baseline`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from macs_audit.errors import MacsAuditError
from macs_audit.gate import CLEAN_METRICS, METRICS, SUMMARY_KEYS, observe
from macs_audit.report import Report

SECTIONS = ("clean", "temperature", "robustness", "perturbation", "corruption")
# Rows beyond the gate metrics: (section, key, label, higher_is_better or None, percent, getter).
_CLEAN_EXTRA = [
    ("mean_confidence", "mean confidence", None, True),
    ("mean_margin", "mean logit margin", True, False),
    ("frac_margin_below_target", "margin < target", False, True),
    ("mean_logit_norm", "mean ||z||_2", None, False),
    ("mean_max_logit", "mean max logit", None, False),
]


@dataclasses.dataclass
class Delta:
    section: str
    key: str
    label: str
    a: float | None
    b: float | None
    higher_is_better: bool | None  # None: no better direction (e.g. mean confidence)
    percent: bool

    @property
    def delta(self) -> float | None:
        return None if self.a is None or self.b is None else self.b - self.a

    @property
    def relative(self) -> float | None:
        return None if self.delta is None or self.a == 0 else self.delta / abs(self.a)

    @property
    def status(self) -> str:
        """'better', 'worse', 'same', 'changed' (no direction) or 'missing'."""
        d = self.delta
        if d is None:
            return "missing"
        if abs(d) <= 1e-12:
            return "same"
        if self.higher_is_better is None:
            return "changed"
        return "better" if (d > 0) == self.higher_is_better else "worse"

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "delta": self.delta, "relative": self.relative, "status": self.status}


@dataclasses.dataclass
class Comparison:
    a: Report
    b: Report
    a_name: str
    b_name: str
    rows: list[Delta]
    notes: list[str]  # why the two may not be comparable (different data, conventions)

    @property
    def regressions(self) -> list[Delta]:
        return [r for r in self.rows if r.status == "worse"]

    def to_dict(self) -> dict[str, Any]:
        def who(report: Report, name: str) -> dict:
            return {"name": name, "model": report.model.get("path"), "sha256": report.model.get("sha256"),
                    "data": report.data.get("source"), "n": report.data.get("n"), "created": report.created}

        return {"kind": "comparison", "schema_version": self.a.schema_version, "a": who(self.a, self.a_name),
                "b": who(self.b, self.b_name), "n_regressions": len(self.regressions), "notes": self.notes,
                "rows": [r.to_dict() for r in self.rows]}


def _gate_metric(report: Report, name: str) -> float | None:
    try:
        return observe(report, name)[0]
    except MacsAuditError:  # absent from this report: shown as "-"
        return None


def _view(report: Report, name: str):
    return next((v for v in report.views if v.name == name), None)


def compare(a: Report, b: Report, a_name: str = "A", b_name: str = "B") -> Comparison:
    rows: list[Delta] = []

    def add(section, key, label, va, vb, higher, percent):
        if va is not None or vb is not None:
            rows.append(Delta(section, key, label, va, vb, higher, percent))

    for name, metric in METRICS.items():
        section = "clean" if name in CLEAN_METRICS else "corruption" if name in SUMMARY_KEYS else "robustness"
        add(section, name, metric.label, _gate_metric(a, name), _gate_metric(b, name), metric.higher_is_better,
            metric.percent)
    for key, label, higher, percent in _CLEAN_EXTRA:
        add("clean", key, label, a.clean.metrics.get(key), b.clean.metrics.get(key), higher, percent)

    ta, tb = a.temperature_scaling or {}, b.temperature_scaling or {}
    add("temperature", "temperature", "temperature T", ta.get("temperature"), tb.get("temperature"), None, False)
    for key, label, percent in (("ece", "ECE after scaling", True), ("nll", "NLL after scaling", False)):
        add("temperature", f"scaled_{key}", label, ta.get("scaled", {}).get(key), tb.get("scaled", {}).get(key),
            False, percent)

    ra, rb = a.robustness or {}, b.robustness or {}
    add("robustness", "median_flip_radius", "median flip radius", ra.get("median_flip_radius"),
        rb.get("median_flip_radius"), True, False)
    add("robustness", "lipschitz", "sensitivity L^", (ra.get("sensitivity") or {}).get("lipschitz"),
        (rb.get("sensitivity") or {}).get("lipschitz"), False, False)

    names = list(dict.fromkeys(v.name for v in [*a.views, *b.views] if v.kind == "perturbation"))
    for name in names:
        va, vb = _view(a, name), _view(b, name)
        for key, label, higher, percent in (("accuracy", "accuracy", True, True), ("ece", "ECE", False, True)):
            add("perturbation", f"{name}.{key}", f"{name} {label}", va.metrics.get(key) if va else None,
                vb.metrics.get(key) if vb else None, higher, percent)

    ca = (a.corruption_summary or {}).get("corruptions", {})
    cb = (b.corruption_summary or {}).get("corruptions", {})
    for name in dict.fromkeys([*ca, *cb]):
        for key, label, higher, percent in (("accuracy", "accuracy", True, True), ("ece", "ECE", False, True)):
            add("corruption", f"{name}.{key}", f"{name} {label}", ca.get(name, {}).get(key),
                cb.get(name, {}).get(key), higher, percent)

    order = {name: i for i, name in enumerate(SECTIONS)}
    rows.sort(key=lambda r: order[r.section])  # stable: keeps the order within a section
    return Comparison(a=a, b=b, a_name=a_name, b_name=b_name, rows=rows, notes=_notes(a, b))


def _notes(a: Report, b: Report) -> list[str]:
    notes = []
    for section, key in (("data", "source"), ("data", "n"), ("data", "num_classes"), ("data", "split")):
        va, vb = getattr(a, section).get(key), getattr(b, section).get(key)
        if va != vb:
            notes.append(f"different {section} {key}: {va} vs {vb}")
    # A convention only one report has (e.g. perturbations, when only one ran them) is no conflict.
    for key in sorted(set(a.conventions) & set(b.conventions)):
        if key != "bootstrap_resamples" and a.conventions[key] != b.conventions[key]:
            notes.append(f"different convention {key!r}: {str(a.conventions[key])[:80]} vs {str(b.conventions[key])[:80]}")
    return notes
