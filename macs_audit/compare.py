"""Compare two Reports: side-by-side values, deltas, and which changes are regressions.

`compare(a, b)` returns a Comparison (B relative to A: delta = B - A) with a row per metric of the
registry that both or either report holds; every format renders it (`render_comparison`).
Comparing is informational: a regression here is any change in the bad direction; thresholds on
regressions belong to `gate --baseline`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from macs_audit.errors import MacsAuditError
from macs_audit.gate import observe
from macs_audit.metrics.registry import METRICS, Metric, Place, in_place
from macs_audit.report import CorruptionMeans, Report, ViewResult

SECTIONS = (
    Place.CLEAN.value,
    Place.SELECTIVE.value,
    Place.TEMPERATURE.value,
    Place.ROBUSTNESS.value,
    "perturbation",
    Place.CORRUPTION.value,
    Place.CONFORMAL.value,
    Place.OOD.value,
    Place.UNLABELED.value,
    Place.SHIFT.value,
    "parity",
)
PER_VIEW = ("accuracy", "ece")  # compared for each perturbation view and each corruption
AFTER_SCALING = ("ece", "nll")  # compared after temperature scaling


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
        delta = self.delta
        return None if delta is None or not self.a else delta / abs(self.a)

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
            return {
                "name": name,
                "model": report.model.path,
                "sha256": report.model.sha256,
                "data": report.data.source,
                "n": report.data.n,
                "created": report.created,
            }

        return {
            "kind": "comparison",
            "schema_version": self.a.schema_version,
            "a": who(self.a, self.a_name),
            "b": who(self.b, self.b_name),
            "n_regressions": len(self.regressions),
            "notes": self.notes,
            "rows": [r.to_dict() for r in self.rows],
        }


def _value(report: Report, name: str) -> float | None:
    try:
        return observe(report, name)[0]
    except MacsAuditError:  # absent from this report: shown as "-"
        return None


def _view_value(view: ViewResult | None, key: str) -> float | None:
    return view.metrics.get(key) if view is not None else None


def _summary_value(entry: CorruptionMeans | None, key: str) -> float | None:
    return getattr(entry, key) if entry is not None else None


def compare(a: Report, b: Report, a_name: str = "A", b_name: str = "B") -> Comparison:
    rows: list[Delta] = []

    def add(section: str, key: str, label: str, va: float | None, vb: float | None, metric: Metric) -> None:
        if va is not None or vb is not None:
            rows.append(Delta(section, key, label, va, vb, metric.higher_is_better, metric.percent))

    def add_metrics(place: Place) -> None:
        for metric in in_place(place):
            if metric.compare:
                title = metric.title_for(a.model.output, b.model.output)
                add(place.value, metric.name, title, _value(a, metric.name), _value(b, metric.name), metric)

    def add_per_view(section: str, name: str, va: Any, vb: Any, value: Callable[[Any, str], float | None]) -> None:
        """The PER_VIEW metrics of one perturbation view or corruption (`value` reads one of A's or B's)."""
        for key in PER_VIEW:
            metric = METRICS[key]
            add(section, f"{name}.{key}", f"{name} {metric.label}", value(va, key), value(vb, key), metric)

    add_metrics(Place.CLEAN)
    add_metrics(Place.SELECTIVE)
    add_metrics(Place.TEMPERATURE)
    ta, tb = a.temperature_scaling, b.temperature_scaling
    for name in AFTER_SCALING:
        metric = METRICS[name]
        add(
            Place.TEMPERATURE.value,
            f"scaled_{name}",
            f"{metric.label} after scaling",
            ta.scaled.get(name) if ta is not None else None,
            tb.scaled.get(name) if tb is not None else None,
            metric,
        )
    add_metrics(Place.ROBUSTNESS)

    for view_name in dict.fromkeys(v.name for v in [*a.views_of("perturbation"), *b.views_of("perturbation")]):
        add_per_view("perturbation", view_name, a.view(view_name), b.view(view_name), _view_value)

    add_metrics(Place.CORRUPTION)
    ca = a.corruption_summary.corruptions if a.corruption_summary is not None else {}
    cb = b.corruption_summary.corruptions if b.corruption_summary is not None else {}
    for name in dict.fromkeys([*ca, *cb]):
        add_per_view(Place.CORRUPTION.value, name, ca.get(name), cb.get(name), _summary_value)

    for place in (Place.CONFORMAL, Place.OOD, Place.UNLABELED, Place.SHIFT):
        add_metrics(place)
    rows += _parity_rows(a, b)
    return Comparison(a=a, b=b, a_name=a_name, b_name=b_name, rows=rows, notes=_notes(a, b))


def _parity_rows(a: Report, b: Report) -> list[Delta]:
    """Two parity audits (evaluate --reference): each view's agreement and its ECE and NLL changes."""
    views = [{v.name: v for v in r.parity.views} if r.parity is not None else {} for r in (a, b)]
    rows = []
    for name in dict.fromkeys([*views[0], *views[1]]):
        va, vb = views[0].get(name), views[1].get(name)
        agree = [v.agreement if v is not None else None for v in (va, vb)]
        rows.append(Delta("parity", f"{name}.agreement", f"{name} agreement", agree[0], agree[1], True, True))
        for key, label, percent in (("ece", "ECE change", True), ("nll", "NLL change", False)):
            pair = [v.metrics[key]["difference"] if v is not None else None for v in (va, vb)]
            rows.append(Delta("parity", f"{name}.{key}_change", f"{name} {label}", pair[0], pair[1], False, percent))
    return rows


def _notes(a: Report, b: Report) -> list[str]:
    notes = []
    for key in ("source", "n", "num_classes", "split"):
        va, vb = getattr(a.data, key), getattr(b.data, key)
        if va != vb:
            notes.append(f"different data {key}: {va} vs {vb}")
    # A convention only one report has (e.g. perturbations, when only one ran them) is no conflict.
    ca, cb = a.conventions.to_dict(), b.conventions.to_dict()
    for key in sorted(set(ca) & set(cb)):
        if key != "bootstrap_resamples" and ca[key] != cb[key]:
            notes.append(f"different convention {key!r}: {str(ca[key])[:80]} vs {str(cb[key])[:80]}")
    return notes
