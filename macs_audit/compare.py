"""Compare two Reports: side-by-side values, deltas, and which changes are regressions.

`compare(a, b)` returns a Comparison (B relative to A: delta = B - A) with a row per metric of the
registry that both or either report holds; every format renders it (`render_comparison`).
Comparing is informational; thresholds on regressions belong to `gate --baseline`. Two reports' slices are
matched by (column, value) (`SliceMatch`): each slice in both gets its accuracy and ECE rows, one in a single
report its rows with the other side missing, and the notes say how they met.

A change is better or worse only when it is not noise: when the 95% interval of B - A excludes zero.
That interval is, by what the reports hold: paired (given by the caller that has both models' outputs on
the same images, as `calibrate` and `finetune` do), else the two reports' own bootstrap intervals
combined as independent (conservative for reports of the same images), else a binomial approximation for
a fraction on the reports' images; a value with none of these (ratios, temperatures, numbers of the
scaled model) is "same" unless it moved by more than RESOLUTION of itself. Conformal coverage is judged
against its target: worse when B falls short of it beyond the noise of its held-out images and A did not.

A metric a temperature alone moves (the registry's `scale_dependent`: margins, logit norms, the sensitivity
L^, the fitted T, set sizes at a fixed coverage) is shown, "changed" where it moved, never better or worse:
rescaling the logits is no regression. A regression is what the gate fails: given the gate's result on B
(with A as its baseline), the headline counts its failed checks, each marking its metric's row worse, and
names the other worse rows as worse beyond the noise; without a gate it counts those and calls none a
regression (`Comparison.headline`, which every format prints).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

from macs_audit.errors import MacsAuditError
from macs_audit.gating import GateResult, observe
from macs_audit.gating.checks import shown_slice
from macs_audit.gating.config import ABSOLUTE_KEYS, BASELINE_KEYS, CORRUPTION_KEYS
from macs_audit.metrics.metric_row import Metric, Place
from macs_audit.metrics.registry import METRICS, in_place
from macs_audit.numbers import format_value
from macs_audit.report import CorruptionMeans, Report, SliceResult, Slices, ViewResult
from macs_audit.text import shortened

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
    Place.REAL_LABELS.value,
    Place.REPRESENTATION.value,
    "slices",
    "parity",
)
PER_VIEW = ("accuracy", "ece")  # compared for each perturbation view and each corruption
AFTER_SCALING = ("ece", "nll")  # compared after temperature scaling
Z95 = 1.959963984540054  # the normal 97.5% quantile
RESOLUTION = 1e-3  # without an interval: a change within this fraction of the value is "same"
PAIRED, UNPAIRED, BINOMIAL, TARGET = "paired bootstrap", "bootstrap, unpaired", "binomial", "against the target"
# How the formats say what better and worse mean (below the table).
RULE = (
    "better / worse: the 95% interval of B - A excludes zero (paired where both audits scored the same "
    "images with both models, else the reports' own intervals combined, else binomial); same: within the "
    "noise; conformal coverage: against its target; changed: a value with no better direction, or one a "
    "temperature alone moves (margins, logit norms, L^, T, set sizes), never counted. A regression is a check "
    "the gate failed on B (A its baseline), with the gate configured as for `macs-audit gate`; without a gate, "
    "worse rows are counted as such and none as a regression"
)
NO_GATE = "no gate ran"  # the headline's words where no gate judged B


@dataclasses.dataclass
class Delta:
    section: str
    key: str
    label: str
    a: float | None
    b: float | None
    higher_is_better: bool | None  # None: no better direction (e.g. mean confidence)
    percent: bool
    interval: list[float] | None = None  # the 95% interval of B - A (None: no interval for this value)
    basis: str = ""  # how it was obtained (PAIRED, UNPAIRED, BINOMIAL, TARGET), "" without one
    target: float | None = None  # conformal coverage: the target it is judged against
    target_noise: tuple[float, float] | None = None  # the binomial 95% half-widths of A's and B's coverage
    scale_dependent: bool = False  # a temperature alone moves it: shown, never better or worse
    gate_failed: str | None = None  # the gate checks on B that failed for this metric (", "-joined): worse

    @property
    def delta(self) -> float | None:
        return None if self.a is None or self.b is None else self.b - self.a

    @property
    def relative(self) -> float | None:
        delta = self.delta
        return None if delta is None or not self.a else delta / abs(self.a)

    @property
    def moved(self) -> int:
        """+1 / -1 where B - A is beyond the noise upwards / downwards, 0 where it is not."""
        d = self.delta
        if d is None or abs(d) <= 1e-12:
            return 0
        if self.interval is not None:
            low, high = self.interval
            return 1 if low > 0 else -1 if high < 0 else 0
        assert self.a is not None and self.b is not None
        if abs(d) <= RESOLUTION * max(abs(self.a), abs(self.b)):
            return 0
        return 1 if d > 0 else -1

    @property
    def status(self) -> str:
        """'better', 'worse', 'same' (within the noise), 'changed' (no better direction, or moved by a
        temperature alone), or 'missing'; 'worse' wherever the gate failed the metric."""
        if self.gate_failed is not None:
            return "worse"
        if self.a is None or self.b is None:
            return "missing"
        if self.target is not None and self.target_noise is not None:
            meets = [v >= self.target - noise for v, noise in zip((self.a, self.b), self.target_noise, strict=True)]
            if meets[0] != meets[1]:
                return "better" if meets[1] else "worse"
            if meets[1]:
                return "same"  # both cover their target: which covers more is not better
        moved = self.moved
        if moved == 0:
            return "same"
        if self.higher_is_better is None or self.scale_dependent:
            return "changed"
        return "better" if (moved > 0) == self.higher_is_better else "worse"

    def to_dict(self) -> dict[str, Any]:
        row = dataclasses.asdict(self)
        row.pop("target_noise")
        return {**row, "delta": self.delta, "relative": self.relative, "status": self.status}


@dataclasses.dataclass
class Comparison:
    a: Report
    b: Report
    a_name: str
    b_name: str
    rows: list[Delta]
    notes: list[str]  # why the two may not be comparable (different data, conventions), how their slices met
    gate: GateResult | None = None  # the gate's result on B, None where no gate ran
    slices: SliceMatch | None = None  # how the two reports' slices met; None where neither has a slices section

    @property
    def worse(self) -> list[Delta]:
        """The rows worse beyond the noise, or failed by the gate."""
        return [r for r in self.rows if r.status == "worse"]

    @property
    def regressions(self) -> list[Delta]:
        """The rows of the metrics the gate failed; none where no gate ran (a worse row alone is no regression)."""
        return [r for r in self.rows if r.gate_failed is not None]

    @property
    def n_regressions(self) -> int | None:
        """The checks the gate failed, as the gate counts them; None where no gate ran."""
        return None if self.gate is None else len(self.gate.failures)

    @property
    def headline(self) -> str:
        """`2 regressions: the gate failed max_ece, min_accuracy; 1 more metric worse beyond the noise`,
        `0 regressions: the gate passed`, or without a gate `3 metrics worse beyond the noise (no gate ran)`."""
        beyond = len(self.worse) - len(self.regressions)  # worse rows the gate did not fail
        if self.gate is None:
            return f"{_count(beyond, 'metric')} worse beyond the noise ({NO_GATE})"
        failed = self.gate.failures
        text = f"{_count(len(failed), 'regression')}: " + (
            f"the gate failed {', '.join(c.name for c in failed)}" if failed else "the gate passed"
        )
        if beyond:
            more = "more " if failed else ""
            text += f"; {beyond} {more}metric{'s' * (beyond != 1)} worse beyond the noise"
        return text

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
            "headline": self.headline,
            "n_regressions": self.n_regressions,
            "n_worse": len(self.worse),
            "gate": None
            if self.gate is None
            else {
                "config": self.gate.config,
                "passed": self.gate.passed,
                "failed": [c.name for c in self.gate.failures],
            },
            "notes": self.notes,
            "slices": None if self.slices is None else self.slices.to_dict(),
            "rows": [r.to_dict() for r in self.rows],
        }


SLICE_METRICS = ("accuracy", "ece")  # compared for each slice in both reports
MATCHED_BY = "(column, value)"


@dataclasses.dataclass
class SliceMatch:
    """How two reports' slices met: by (column, value), so a numeric column's quantile bin matches only where its
    bounds are the same; the slices in both, and those of one report only (listed, never dropped)."""

    both: list[tuple[str, str]]
    only_a: list[SliceResult]
    only_b: list[SliceResult]
    min_size: tuple[int | None, int | None]  # each report's (None: it has no slices section)

    @property
    def note(self) -> str:
        """The sentence the notes say it in: 'slices matched by (column, value): 9 in both; only in B: ...'."""
        if None in self.min_size:
            which = "A" if self.min_size[0] is not None else "B"
            return f"only {which} has a slices section: its slices are shown, the other side missing"
        text = f"slices matched by {MATCHED_BY}, a numeric column's quantile bin where its bounds are the same: "
        text += f"{len(self.both)} in both"
        for side, alone in (("A", self.only_a), ("B", self.only_b)):
            if alone:
                names = (f"{shown_slice(s.column, s.value)} (n={s.n})" for s in alone)
                text += f"; only in {side}: {shortened(names, unit='slices')}"
        if self.min_size[0] != self.min_size[1]:
            text += f"; scored from {self.min_size[0]} images in A, {self.min_size[1]} in B"
        return text

    def to_dict(self) -> dict[str, Any]:
        def listed(slices: list[SliceResult]) -> list[dict[str, Any]]:
            return [{"column": s.column, "value": s.value, "n": s.n} for s in slices]

        return {
            "matched_by": MATCHED_BY,
            "both": [{"column": column, "value": value} for column, value in self.both],
            "only_a": listed(self.only_a),
            "only_b": listed(self.only_b),
            "min_size": {"a": self.min_size[0], "b": self.min_size[1]},
        }


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'s' * (n != 1)}"


def _value(report: Report, name: str) -> float | None:
    return _observed(report, name)[0]


def _observed(report: Report, name: str) -> tuple[float | None, list[float] | None]:
    try:
        return observe(report, name)
    except MacsAuditError:  # absent from this report: shown as "-"
        return None, None


def _half_widths(value: float, interval: list[float] | None) -> tuple[float, float] | None:
    """(below, above) the value: its 95% interval's half-widths (None without a usable interval)."""
    if interval is None or len(interval) != 2 or not all(isinstance(v, (int, float)) for v in interval):
        return None
    return max(value - float(interval[0]), 0.0), max(float(interval[1]) - value, 0.0)


def difference_interval(
    a: float, a_interval: list[float] | None, b: float, b_interval: list[float] | None
) -> list[float] | None:
    """The 95% interval of b - a from each value's own, as independent estimates: each side's half-widths
    added in quadrature (b's lower with a's upper below, and the reverse above)."""
    ha, hb = _half_widths(a, a_interval), _half_widths(b, b_interval)
    if ha is None or hb is None:
        return None
    d = b - a
    return [d - math.hypot(hb[0], ha[1]), d + math.hypot(hb[1], ha[0])]


def binomial_interval(a: float, n_a: int | None, b: float, n_b: int | None) -> list[float] | None:
    """The normal 95% interval of b - a for two fractions of n_a and n_b images (None without counts)."""
    if not n_a or not n_b or not (0 <= a <= 1 and 0 <= b <= 1):
        return None
    half = Z95 * math.sqrt(a * (1 - a) / n_a + b * (1 - b) / n_b)
    return [b - a - half, b - a + half]


def _view_value(view: ViewResult | None, key: str) -> float | None:
    return view.metrics.get(key) if view is not None else None


def _summary_value(entry: CorruptionMeans | None, key: str) -> float | None:
    return getattr(entry, key) if entry is not None else None


def _images(report: Report, metric: Metric) -> int | None:
    """The images a fraction of `report` was measured on: the conformal sets' scored part, else the data's."""
    if metric.place is Place.CONFORMAL and report.conformal is not None:
        return getattr(report.conformal, "n_eval", None)
    return report.data.n


def _coverage_target(a: Report, b: Report, metric: Metric) -> tuple[float, tuple[float, float]] | None:
    """(target, (A's, B's) binomial 95% half-widths) of a conformal coverage row, None for any other row."""
    if metric.place is not Place.CONFORMAL or not metric.report_key.endswith(".coverage"):
        return None
    targets = [getattr(r.conformal, "target_coverage", None) if r.conformal is not None else None for r in (a, b)]
    counts = [_images(r, metric) for r in (a, b)]
    if targets[0] is None or targets[0] != targets[1] or not all(counts):
        return None
    t = float(targets[0])
    noise = tuple(Z95 * math.sqrt(t * (1 - t) / n) for n in counts)  # type: ignore[operator]
    return t, (noise[0], noise[1])


def compare(
    a: Report,
    b: Report,
    a_name: str = "A",
    b_name: str = "B",
    paired: dict[str, list[float]] | None = None,
    gate: GateResult | None = None,
) -> Comparison:
    """B against A, a row per metric. `paired`: row key -> the paired 95% interval of B - A, for the rows the
    caller measured on the same images with both models (calibrate, finetune); the others are judged by the
    reports' own intervals (see the module's docstring). `gate`: the gate's result on B (A its baseline): each
    failed check marks its metric's row worse, or adds a row in section "gate" where no row shows it."""
    built = _Rows(a, b, paired or {})
    built.add_metrics(Place.CLEAN)
    built.add_metrics(Place.SELECTIVE)
    built.add_metrics(Place.TEMPERATURE)
    built.add_after_scaling()
    built.add_metrics(Place.ROBUSTNESS)
    for view_name in dict.fromkeys(v.name for v in [*a.views_of("perturbation"), *b.views_of("perturbation")]):
        built.add_per_view("perturbation", view_name, a.view(view_name), b.view(view_name), _view_value)
    built.add_metrics(Place.CORRUPTION)
    ca = a.corruption_summary.corruptions if a.corruption_summary is not None else {}
    cb = b.corruption_summary.corruptions if b.corruption_summary is not None else {}
    for name in dict.fromkeys([*ca, *cb]):
        built.add_per_view(Place.CORRUPTION.value, name, ca.get(name), cb.get(name), _summary_value)
    for place in (Place.CONFORMAL, Place.OOD, Place.UNLABELED, Place.SHIFT, Place.REAL_LABELS, Place.REPRESENTATION):
        built.add_metrics(place)
    matched = built.add_slices()
    rows = built.rows + _parity_rows(a, b)
    if gate is not None:
        _mark_gate_failures(rows, gate)
    notes = _notes(a, b) + ([matched.note] if matched is not None else [])
    return Comparison(a=a, b=b, a_name=a_name, b_name=b_name, rows=rows, notes=notes, gate=gate, slices=matched)


@dataclasses.dataclass
class _Rows:
    """The rows of B against A as `compare` adds them, each judged by its interval (`paired`: the caller's)."""

    a: Report
    b: Report
    paired: dict[str, list[float]]
    rows: list[Delta] = dataclasses.field(default_factory=list)

    def add(
        self,
        section: str,
        key: str,
        label: str,
        values: tuple[float | None, float | None],
        metric: Metric,
        intervals: tuple[list[float] | None, list[float] | None] = (None, None),
        images: tuple[int | None, int | None] | None = None,
    ) -> None:
        """A row of A's and B's `values` of `metric`, unless both are missing; `intervals`: their own 95% ones;
        `images`: the images each was measured on, where not the report's (a slice's)."""
        va, vb = values
        if va is None and vb is None:
            return
        row = Delta(section, key, label, va, vb, metric.higher_is_better, metric.percent)
        row.scale_dependent = metric.scale_dependent
        if va is not None and vb is not None:
            self._judge(row, metric, intervals, images)
        self.rows.append(row)

    def _judge(
        self,
        row: Delta,
        metric: Metric,
        intervals: tuple[list[float] | None, list[float] | None],
        images: tuple[int | None, int | None] | None = None,
    ) -> None:
        """The row's interval of B - A and its basis: the caller's paired one, else the two values' own combined,
        else the binomial one of a bounded fraction (of `images`, else the reports'); a conformal coverage row is
        judged against its target."""
        va, vb = row.a, row.b
        assert va is not None and vb is not None
        n_a, n_b = images if images is not None else (_images(self.a, metric), _images(self.b, metric))
        if row.key in self.paired:
            row.interval, row.basis = list(self.paired[row.key]), PAIRED
        elif (combined := difference_interval(va, intervals[0], vb, intervals[1])) is not None:
            row.interval, row.basis = combined, UNPAIRED
        elif metric.unit.bounded and (binomial := binomial_interval(va, n_a, vb, n_b)):
            row.interval, row.basis = binomial, BINOMIAL
        if (target := _coverage_target(self.a, self.b, metric)) is not None:
            row.target, row.target_noise = target
            row.basis = TARGET

    def add_metrics(self, place: Place) -> None:
        """The compared metrics of `place`, each as the two reports hold it."""
        for metric in in_place(place):
            if metric.compare:
                title = metric.title_for(self.a.model.output, self.b.model.output)
                (va, ia), (vb, ib) = _observed(self.a, metric.name), _observed(self.b, metric.name)
                self.add(place.value, metric.name, title, (va, vb), metric, (ia, ib))

    def add_after_scaling(self) -> None:
        """The temperature-scaled metrics (AFTER_SCALING) of the two reports' temperature scaling."""
        ta, tb = self.a.temperature_scaling, self.b.temperature_scaling
        for name in AFTER_SCALING:
            metric = METRICS[name]
            values = (ta.scaled.get(name) if ta is not None else None, tb.scaled.get(name) if tb is not None else None)
            self.add(Place.TEMPERATURE.value, f"scaled_{name}", f"{metric.label} after scaling", values, metric)

    def add_per_view(
        self, section: str, name: str, va: Any, vb: Any, value: Callable[[Any, str], float | None]
    ) -> None:
        """The PER_VIEW metrics of one perturbation view or corruption (`value` reads one of A's or B's)."""
        for key in PER_VIEW:
            metric = METRICS[key]
            ia, ib = (v.intervals.get(key) if isinstance(v, ViewResult) else None for v in (va, vb))
            values = (value(va, key), value(vb, key))
            self.add(section, f"{name}.{key}", f"{name} {metric.label}", values, metric, (ia, ib))

    def add_slices(self) -> SliceMatch | None:
        """Section "slices": each slice's SLICE_METRICS, matched by (column, value), A's order first (worst gap
        first) then B's own; and the two multicalibration errors. None where neither report has slices."""
        first, second = self.a.slices, self.b.slices
        if first is None and second is None:
            return None
        by_a = {(s.column, s.value): s for s in first.slices} if first is not None else {}
        by_b = {(s.column, s.value): s for s in second.slices} if second is not None else {}
        for column, value in dict.fromkeys([*by_a, *by_b]):
            sa, sb = by_a.get((column, value)), by_b.get((column, value))
            name = shown_slice(column, value)
            images = (sa.n if sa is not None else None, sb.n if sb is not None else None)
            for key in SLICE_METRICS:
                values = (sa.metrics.get(key) if sa else None, sb.metrics.get(key) if sb else None)
                intervals = (sa.intervals.get(key) if sa else None, sb.intervals.get(key) if sb else None)
                metric = METRICS[key]
                self.add("slices", f"{name}.{key}", f"{name} {metric.label}", values, metric, intervals, images)
        found = (_multicalibration(first), _multicalibration(second))
        errors = (found[0].get("error") if found[0] else None, found[1].get("error") if found[1] else None)
        counts = (found[0].get("n") if found[0] else None, found[1].get("n") if found[1] else None)
        # A calibration error as ECE is one (a fraction, lower is better), judged on the images of its slice.
        self.add("slices", MULTICALIBRATION_ROW, "multicalibration error", errors, METRICS["ece"], images=counts)
        return SliceMatch(
            both=[key for key in by_a if key in by_b],
            only_a=[s for key, s in by_a.items() if key not in by_b],
            only_b=[s for key, s in by_b.items() if key not in by_a],
            min_size=(first.min_size if first else None, second.min_size if second else None),
        )


def _multicalibration(section: Slices | None) -> dict[str, Any] | None:
    return section.multicalibration if section is not None else None


MULTICALIBRATION_ROW = "multicalibration_error"  # the slices section's row key, and the gate key's row


def _gate_row_key(check: str) -> str | None:
    """The compare row key of a gate check's metric ('min_accuracy' -> 'accuracy', 'corruptions.fog.max_ece' ->
    'fog.ece', 'parity.noise.max_nll_increase' -> 'noise.nll_change'), None where compare has no such row."""
    parts = check.split(".")
    if len(parts) == 1 and parts[0] in ABSOLUTE_KEYS:
        return ABSOLUTE_KEYS[parts[0]]
    if len(parts) == 2 and parts[0] == "baseline" and parts[1] in BASELINE_KEYS:
        return BASELINE_KEYS[parts[1]][0]
    if len(parts) == 3 and parts[0] == "corruptions" and CORRUPTION_KEYS.get(parts[2]) in PER_VIEW:
        return f"{parts[1]}.{CORRUPTION_KEYS[parts[2]]}"
    if check == "slices.max_multicalibration_error":
        return MULTICALIBRATION_ROW
    parity = {"min_agreement": "agreement", "max_ece_increase": "ece_change", "max_nll_increase": "nll_change"}
    if len(parts) == 3 and parts[0] == "parity" and parts[2] in parity:
        return f"{parts[1]}.{parity[parts[2]]}"
    return None


def _mark_gate_failures(rows: list[Delta], gate: GateResult) -> None:
    """Each failed check of `gate` marks its metric's row worse (section 'gate' rows for the checks no row shows:
    observed against the threshold), so the comparison counts every failure the gate found."""
    by_key: dict[str, list[Delta]] = {}
    for row in rows:
        by_key.setdefault(row.key, []).append(row)
    for check in gate.failures:
        key = _gate_row_key(check.name)
        matched = by_key.get(key, []) if key is not None else []
        for row in matched:  # two checks on one metric (a bound and an allowance): both named
            row.gate_failed = check.name if row.gate_failed is None else f"{row.gate_failed}, {check.name}"
        if not matched:
            bound = format_value(check.threshold, check.percent)
            label = f"{check.metric}: gate {check.name} ({check.op} {bound}) failed"
            row = Delta("gate", check.name, label, None, check.observed, check.op == ">=", check.percent)
            row.gate_failed = check.name
            rows.append(row)


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
