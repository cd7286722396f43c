"""The gate's checks: a Report (and a baseline Report) against a GateConfig, one pass/fail Check per threshold.

Three kinds of check:

- absolute: `max_ece = 0.05`, `min_accuracy = 0.9`, ... (`max_` for lower-is-better metrics,
  `min_` for higher-is-better ones; only the meaningful direction exists);
- per corruption: `[...gate.corruptions]` holds `min_accuracy`/`max_ece`/`max_nll`/`max_brier`
  for every corruption in the report, and `[...gate.corruptions.<name>]` overrides them for one;
- per slice: `[...gate.slices]` bounds every scored slice's accuracy and ECE, the largest significant accuracy
  shortfall of a slice against the rest and the multicalibration error (each check names the worst slice);
- against a baseline report: `[...gate.baseline]` holds `max_<metric>_increase` (lower is better)
  or `max_<metric>_drop` (higher is better), absolute or with a `_relative` suffix (a fraction of
  the baseline's value).

`use_interval = true` gates on the pessimistic end of the 95% bootstrap interval where the report
has one. A threshold on a metric the report does not contain raises InputError (exit 3): a gate
never passes by skipping a check. The core returns a GateResult and never prints or exits.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any, TypeGuard

from macs_audit.errors import InputError, UsageError
from macs_audit.gating.config import (
    ABSOLUTE_KEYS,
    BASELINE_KEYS,
    CORRUPTION_KEYS,
    PARITY_KEYS,
    SHIFT_KEYS,
    SLICE_KEYS,
    GateConfig,
    config_path,
    load_config,
)
from macs_audit.metrics.metric_row import Metric, Place
from macs_audit.metrics.registry import METRICS
from macs_audit.numbers import format_change, format_value
from macs_audit.report import (
    Report,
    Section,
    SliceResult,
    Slices,
    ViewResult,
    load_report,
    multicalibration_where,
    slice_label,
)
from macs_audit.text import printable

# Values equal to a bound pass; this absorbs floating-point rounding in `baseline + allowance`.
TOLERANCE = 1e-12


@dataclasses.dataclass
class Check:
    name: str  # the config key, e.g. "max_ece", "corruptions.fog.min_accuracy", "baseline.max_ece_increase"
    metric: str  # what was measured, in words
    op: str  # "<=" or ">=": observed op threshold must hold
    threshold: float  # the bound actually compared (for baseline checks: baseline +- allowance)
    observed: float  # the value compared (the pessimistic interval end when gating on intervals)
    passed: bool
    detail: str  # how the values were obtained (point estimate / interval end, baseline value)
    percent: bool = False  # show observed/threshold as percent
    baseline: float | None = None  # baseline checks: the baseline report's value (shown beside the candidate's)


@dataclasses.dataclass
class GateResult:
    checks: list[Check]
    use_interval: bool = False
    config: str | None = None
    baseline: str | None = None
    # Not in to_dict: the deprecated names the config and the baseline report were read with, for the commands.
    notes: list[str] = dataclasses.field(default_factory=list)
    # Checks the config sets but this run could not make, and why (baseline allowances without a baseline).
    skipped: list[str] = dataclasses.field(default_factory=list)

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.checks)

    @property
    def failures(self) -> list[Check]:
        return [c for c in self.checks if not c.passed]

    def to_dict(self) -> dict[str, Any]:
        return {
            "passed": self.passed,
            "use_interval": self.use_interval,
            "config": self.config,
            "baseline": self.baseline,
            "n_checks": len(self.checks),
            "n_failed": len(self.failures),
            "checks": [dataclasses.asdict(c) for c in self.checks],
            "skipped": list(self.skipped),
        }


# --------------------------------------------------------------------------------------------
# Reading metrics from a report
# --------------------------------------------------------------------------------------------

_SECTIONS = {
    Place.TEMPERATURE: "temperature_scaling",
    Place.ROBUSTNESS: "robustness",
    Place.CORRUPTION: "corruption_summary",
    Place.CONFORMAL: "conformal",
    Place.OOD: "ood",
    Place.UNLABELED: "unlabeled",
    Place.SHIFT: "shift",
    Place.REAL_LABELS: "real_labels",
    Place.REPRESENTATION: "representation_shift",
}
_VIEW_PLACES = (Place.CLEAN, Place.SELECTIVE)  # values in report.clean.metrics


def _attribute(section: object, path: str) -> object:
    """section.a.b for path "a.b" of JSON keys (of sections, or of mappings); None where any step is absent."""
    for key in path.split("."):
        if isinstance(section, dict):
            section = section.get(key)
        elif isinstance(section, Section):
            section = section.at(key)
        else:
            return None
    return section


def locate(report: Report, metric: Metric) -> tuple[object, list[float] | None]:
    """(value, 95% interval) of a registry metric as the report holds them; None where absent."""
    if metric.place in _VIEW_PLACES:
        return report.clean.metrics.get(metric.report_key), report.clean.intervals.get(metric.report_key)
    robust: ViewResult | None = report.robust_view()
    if metric.name == "robust_ece":
        return (robust.metrics.get("ece"), robust.intervals.get("ece")) if robust is not None else (None, None)
    section = getattr(report, _SECTIONS[metric.place])
    interval = robust.intervals.get("accuracy") if metric.name == "robust_accuracy" and robust is not None else None
    if metric.interval:
        interval = _attribute(section, metric.interval)  # type: ignore[assignment]
    return _attribute(section, metric.report_key), interval


def _missing(report: Report, metric: Metric) -> str:
    """What the report lacks for `metric`, and how to produce it."""
    if metric.place in _VIEW_PLACES:
        return f"clean metric {metric.name!r}"
    if metric.name == "robustness_ratio" and report.robustness is not None and report.robustness.sensitivity:
        return "robustness ratio: it is undefined because the measured sensitivity L^ is 0"
    where = (
        f"{report.robust_view_name()} view"
        if metric.name == "robust_ece"
        else f"{_SECTIONS[metric.place]}.{metric.report_key}"
    )
    return f"{where} (run evaluate with {metric.made_by})"


def observe(report: Report, name: str, who: str = "the report") -> tuple[float, list[float] | None]:
    """(point estimate, 95% interval or None) of registry metric `name`; InputError if absent."""
    metric = METRICS.get(name)
    if metric is None:
        raise UsageError(f"unknown gate metric {name!r}")
    value, interval = locate(report, metric)
    if value is None:
        raise InputError(
            f"the gate checks {metric.title} but {who} has no {_missing(report, metric)}; "
            f"remove that threshold or produce a report that has it"
        )
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InputError(f"{who} has an invalid value for {metric.title}: {value!r}")
    if interval is not None and (len(interval) != 2 or any(v is None for v in interval)):
        interval = None
    return float(value), interval


def _gated_value(
    value: float, interval: list[float] | None, higher_is_better: bool | None, use_interval: bool, percent: bool
) -> tuple[float, str]:
    """The value to compare and a phrase saying what it is."""
    if not use_interval:
        return value, "point estimate"
    if interval is None:
        return value, "point estimate (the report has no bootstrap interval for it)"
    end = interval[0] if higher_is_better else interval[1]
    side = "lower" if higher_is_better else "upper"
    return end, f"95% CI {side} end (point estimate {format_value(value, percent)})"


def _check(name: str, metric: Metric, label: str, observed: float, bound: float, detail: str) -> Check:
    if metric.higher_is_better:
        op, passed = ">=", observed >= bound - TOLERANCE
    else:
        op, passed = "<=", observed <= bound + TOLERANCE
    return Check(
        name=name,
        metric=label,
        op=op,
        threshold=bound,
        observed=observed,
        passed=passed,
        detail=detail,
        percent=metric.percent,
    )


# --------------------------------------------------------------------------------------------
# Running the gate
# --------------------------------------------------------------------------------------------


def run_gate(
    report: Report,
    config: GateConfig,
    baseline: Report | None = None,
    use_interval: bool | None = None,
    baseline_name: str | None = None,
) -> GateResult:
    """Evaluate every configured check on `report`; `use_interval` (if not None) overrides the config. The
    result's notes: the deprecated names the config and the baseline were read with (not `report`'s own)."""
    interval = config.use_interval if use_interval is None else use_interval
    if interval and not report.clean.intervals:
        raise InputError(
            "use_interval needs bootstrap intervals but the report has none (it was made with "
            "--bootstrap 0); rerun evaluate with --bootstrap N or gate on point estimates"
        )
    skipped = []
    if config.baseline and baseline is None:
        # One config serves a branch's own gate (no baseline) and a pull request's (--baseline): the
        # allowances are skipped, and said so, unless they are all the config checks.
        if not config.checks_report_alone:
            raise UsageError(
                f"{config.source} sets only baseline allowances but no baseline report was given; "
                'pass --baseline BASE.json or set [gate.baseline] report = "..."'
            )
        skipped.append(
            f"{len(config.baseline)} baseline allowance{'s' if len(config.baseline) != 1 else ''} "
            f"({', '.join(config.baseline)}): no baseline report given (--baseline BASE.json runs them)"
        )
    if baseline is not None and not config.baseline:
        raise UsageError(
            f"a baseline report was given but {config.source} has no [gate.baseline] allowances "
            "(e.g. max_ece_increase = 0.01)"
        )

    checks: list[Check] = []
    for key, bound in config.thresholds.items():
        metric = METRICS[ABSOLUTE_KEYS[key]]
        value, ci = observe(report, metric.name)
        observed, how = _gated_value(value, ci, metric.higher_is_better, interval, metric.percent)
        checks.append(_check(key, metric, metric.title, observed, bound, how))

    checks.extend(_corruption_checks(report, config, interval))
    checks.extend(_shift_checks(report, config, interval))
    checks.extend(_parity_checks(report, config, interval))
    checks.extend(_slice_checks(report, config, interval))
    if baseline is not None:
        checks.extend(_baseline_checks(report, baseline, config, interval))
    return GateResult(
        checks=checks,
        use_interval=interval,
        config=config.source,
        baseline=baseline_name if baseline is not None else None,
        notes=[*config.notes, *(baseline.deprecations if baseline is not None else [])],
        skipped=skipped,
    )


def _baseline_checks(report: Report, baseline: Report, config: GateConfig, use_interval: bool) -> list[Check]:
    checks = []
    for key, allowance in config.baseline.items():
        name, relative = BASELINE_KEYS[key]
        metric = METRICS[name]
        base_value, _ = observe(baseline, name, who="the baseline report")
        value, ci = observe(report, name)
        observed, how = _gated_value(value, ci, metric.higher_is_better, use_interval, metric.percent)
        allowed = allowance * abs(base_value) if relative else allowance
        bound = base_value + (-allowed if metric.higher_is_better else allowed)
        change = "drop" if metric.higher_is_better else "increase"
        amount = format_change(allowed, metric.percent, signed=False)
        rule = f"{100 * allowance:g}% of baseline = {amount}" if relative else amount
        detail = f"baseline {format_value(base_value, metric.percent)}, allowed {change} {rule}; {how}"
        check = _check(f"baseline.{key}", metric, f"{metric.title} vs baseline", observed, bound, detail)
        check.baseline = base_value
        checks.append(check)
    return checks


def _corruption_checks(report: Report, config: GateConfig, use_interval: bool) -> list[Check]:
    if not (config.corruption_defaults or config.corruption_overrides):
        return []
    per_corruption = report.corruption_summary.corruptions if report.corruption_summary is not None else {}
    if not per_corruption:
        raise InputError(
            "the gate has per-corruption thresholds but the report has no corruption_summary "
            "(run evaluate with --corruptions, or remove [gate.corruptions])"
        )
    _all_in_report(config.corruption_overrides, per_corruption, "thresholds for corruption", "the report", "corruption")
    checks = []
    # Defaults apply to every corruption in the report; a named table only to its corruption.
    for name, entry in per_corruption.items():
        bounds = {**config.corruption_defaults, **config.corruption_overrides.get(name, {})}
        for key, bound in bounds.items():
            metric = METRICS[CORRUPTION_KEYS[key]]
            value = getattr(entry, metric.name)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
                raise InputError(
                    f"the gate checks {name} {metric.with_unit} but the report's corruption_summary "
                    f"has no valid value for it ({value!r})"
                )
            source = "override" if key in config.corruption_overrides.get(name, {}) else "default"
            detail = f"mean over severities ({source} threshold)"
            if use_interval:
                detail += "; point estimate: no bootstrap interval exists for this mean"
            checks.append(
                _check(f"corruptions.{name}.{key}", metric, f"{name} {metric.with_unit}", float(value), bound, detail)
            )
    return checks


def _all_in_report(named: Iterable[str], present: Iterable[str], tables: str, where: str, kind: str) -> None:
    """InputError for the first name a config's tables give (`[gate.corruptions.<name>]`) that `where` lacks."""
    present = list(present)
    for name in named:
        if name not in present:
            raise InputError(
                f"the gate has {tables} {name!r} but {where} has no such {kind} (it has: {', '.join(present)})"
            )


def _shift_checks(report: Report, config: GateConfig, use_interval: bool) -> list[Check]:
    """[gate.shift.<set>]: each named --shift-data set's restricted view against its thresholds."""
    if not config.shift_overrides:
        return []
    sets = report.shift.sets if report.shift is not None else {}
    checks = []
    for name, bounds in config.shift_overrides.items():
        if name not in sets:
            having = f"it has: {', '.join(sets)}" if sets else "run evaluate with --shift-data NAME=DIR"
            raise InputError(
                f"the gate has thresholds for shift set {name!r} but the report has no such set ({having})"
            )
        view = sets[name].restricted
        for key, bound in bounds.items():
            metric = METRICS[SHIFT_KEYS[key]]
            value, ci = view.metrics.get(metric.name), view.intervals.get(metric.name)
            if value is None:
                raise InputError(f"the gate checks {name} {metric.with_unit} but the report's shift set has none")
            observed, how = _gated_value(value, ci, metric.higher_is_better, use_interval, metric.percent)
            label = f"{name} {metric.with_unit} (restricted)"
            checks.append(_check(f"shift.{name}.{key}", metric, label, observed, bound, how))
    return checks


# --------------------------------------------------------------------------------------------
# The gate as a command runs it: thresholds and a baseline from files
# --------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ConfiguredGate:
    """The thresholds of a config file and the baseline report to compare with, as `gate`, `report --gate`
    and `evaluate --gate` take them: loaded first (a bad config is a usage error, exit 2, before any report
    is read), then run on the report."""

    config: GateConfig
    config_path: Path  # --config, else the file found from the current directory
    baseline_path: Path | None  # --baseline, else the config's [gate.baseline] report

    @classmethod
    def load(cls, config: Path | None = None, baseline: Path | None = None) -> ConfiguredGate:
        """The config at `config` (None: searched from the current directory) with the baseline `baseline`
        (None: the config's own, if it names one). UsageError where no valid config is found."""
        path = config_path(config)
        loaded = load_config(path)
        return cls(loaded, path, baseline if baseline is not None else loaded.baseline_report)

    @property
    def inputs(self) -> tuple[Path, Path | None]:
        """The files the gate reads, which no output may replace."""
        return self.config_path, self.baseline_path

    def run(self, report: Report, use_interval: bool | None = None) -> GateResult:
        """Read the baseline report (if any) and check `report`; `use_interval` (if not None) overrides the config."""
        if self.baseline_path is None:
            return run_gate(report, self.config, use_interval=use_interval)
        baseline = load_report(self.baseline_path)
        return run_gate(report, self.config, baseline, use_interval=use_interval, baseline_name=str(self.baseline_path))


def _bound_check(
    name: str, label: str, observed: float, bound: float, detail: str, lower: bool, percent: bool
) -> Check:
    """A check of `observed` against `bound`, from below where `lower`, of a value with no registry row."""
    passed = observed >= bound - TOLERANCE if lower else observed <= bound + TOLERANCE
    return Check(name, label, ">=" if lower else "<=", bound, observed, passed, detail, percent=percent)


def _parity_check(name: str, label: str, observed: float, bound: float, detail: str, lower: bool) -> Check:
    percent = not name.endswith("max_nll_increase")  # NLL is in nats, the others fractions
    return _bound_check(name, label, observed, bound, detail, lower, percent)


def _parity_checks(report: Report, config: GateConfig, use_interval: bool) -> list[Check]:
    """[gate.parity]: every view of the parity section against PARITY_KEYS (a view's own table overriding), on
    the candidate - reference changes; with use_interval, on the pessimistic end of their paired intervals."""
    if not (config.parity_defaults or config.parity_overrides):
        return []
    if report.parity is None:
        raise InputError(
            "the gate has [gate.parity] thresholds but the report has no parity section "
            "(run evaluate CANDIDATE --reference REFERENCE, or remove [gate.parity])"
        )
    names = [v.name for v in report.parity.views]
    _all_in_report(config.parity_overrides, names, "parity thresholds for view", "the report's parity section", "view")
    checks = []
    for view in report.parity.views:
        bounds = {**config.parity_defaults, **config.parity_overrides.get(view.name, {})}
        for key, bound in bounds.items():
            where = f"parity.{view.name}.{key}"
            lower = PARITY_KEYS[key]
            if key == "min_agreement":
                entries = [("", "top-1 agreement", view.agreement, view.agreement_interval, 1)]
            elif key == "max_coverage_drop":
                if not view.conformal:
                    raise InputError(
                        f"the gate checks {where} but the report's parity section has no conformal sets for "
                        f"{view.name} (evaluate with --calibration-split above 0)"
                    )
                entries = [
                    (
                        f".{method}",
                        f"{method.upper()} coverage drop at the reference's threshold",
                        sets["differences"]["coverage_at_reference_threshold"]["difference"],
                        sets["differences"]["coverage_at_reference_threshold"]["interval"],
                        -1,
                    )
                    for method, sets in view.conformal.items()
                ]
            else:
                metric = "ece" if key == "max_ece_increase" else "nll"
                change = view.metrics[metric]
                label = "ECE increase" if metric == "ece" else "NLL increase"
                entries = [("", label, change["difference"], change["interval"], 1)]
            for suffix, label, value, interval, sign in entries:
                # sign -1: a drop is the negated change, and its pessimistic end the negated lower end.
                observed, how = 0.0 + sign * value, "point estimate"  # 0.0 +: no -0.0
                if use_interval and interval:
                    ends = sorted(0.0 + sign * end for end in interval)
                    observed = ends[0] if lower else ends[1]
                    how = f"95% paired CI {'lower' if lower else 'upper'} end (point estimate {sign * value:+.4f})"
                elif use_interval:
                    how = "point estimate (the report has no paired interval for it)"
                checks.append(_parity_check(where + suffix, f"{view.name}: {label}", observed, bound, how, lower))
    return checks


# --------------------------------------------------------------------------------------------
# Slices
# --------------------------------------------------------------------------------------------

NO_SLICES = (
    "evaluate makes it with --metadata FILE, or from the images' own properties unless --no-image-slices "
    "(saved predictions: their metadata columns, or --metadata)"
)


def finite_number(value: object) -> TypeGuard[float]:
    """Whether a value read from a report is a finite number (a bool is not one)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def shown_slice(column: object, value: object) -> str:
    """'lighting = dark': a slice as checks and comparisons name it (report.slice_label), escaped (`printable`)."""
    return printable(slice_label(column, value))


def _slice_value(entry: SliceResult, key: str) -> float:
    value = entry.metrics.get(key)
    if not finite_number(value):
        raise InputError(f"the report's slice {shown_slice(entry.column, entry.value)} has no valid {key} ({value!r})")
    return float(value)


def _slice_scope(section: Slices, config: GateConfig) -> int:
    """The smallest slice [gate.slices] applies to: its min_size, else the report's; UsageError below the report's."""
    if config.slice_min_size is None:
        return section.min_size
    if config.slice_min_size < section.min_size:
        raise UsageError(
            f"{config.source}: slices: min_size = {config.slice_min_size} is below the report's min_size "
            f"{section.min_size}: smaller slices were not scored (evaluate with --min-slice-size "
            f"{config.slice_min_size}, or raise min_size)"
        )
    return config.slice_min_size


def _slice_checks(report: Report, config: GateConfig, use_interval: bool) -> list[Check]:
    """[gate.slices]: each key one check, on the worst of the report's scored slices of at least min_size images
    (the multicalibration error: the section's own)."""
    if not config.slices:
        return []
    section = report.slices
    if section is None:
        raise InputError(
            "the gate has [gate.slices] thresholds but the report has no slices section "
            f"({NO_SLICES}; or remove [gate.slices])"
        )
    min_size = _slice_scope(section, config)
    checks = []
    for key, bound in config.slices.items():
        name = f"slices.{key}"
        if key == "max_multicalibration_error":
            checks.append(_multicalibration_check(section, name, bound, min_size, use_interval))
        else:
            scope = _in_scope(section, min_size, name)
            of = f"{len(scope)} slice{'s' * (len(scope) != 1)} of at least {min_size} images"
            if key == "max_slice_accuracy_gap":
                checks.append(_gap_check(section, scope, of, name, bound, use_interval))
            else:
                checks.append(_worst_slice_check(scope, of, name, bound, SLICE_KEYS[key], use_interval))
    return checks


def _in_scope(section: Slices, min_size: int, name: str) -> list[SliceResult]:
    """The scored slices of at least `min_size` images; InputError where there is none (a gate never passes by
    checking nothing)."""
    scope = [s for s in section.slices if s.n >= min_size]
    if scope:
        return scope
    if not section.slices:
        raise InputError(
            f"the gate checks {name} but the report's slices section scored no slice (each has fewer than "
            f"{section.min_size} images): evaluate with a smaller --min-slice-size, or remove that threshold"
        )
    largest = max(s.n for s in section.slices)
    raise InputError(
        f"the gate checks {name} on slices of at least {min_size} images but the report's largest scored slice has "
        f"{largest}: lower [gate.slices] min_size, or remove that threshold"
    )


def _worst_slice_check(
    scope: list[SliceResult], of: str, name: str, bound: float, lower: bool, use_interval: bool
) -> Check:
    """min_slice_accuracy (`lower`) or max_slice_ece: the slice of `scope` whose compared value (the point estimate,
    or the pessimistic end of its interval with `use_interval`) is the worst; `of`: the scope in words."""
    metric = METRICS["accuracy" if lower else "ece"]
    gated = []
    for entry in scope:
        value = _slice_value(entry, metric.name)
        observed, how = _gated_value(value, entry.intervals.get(metric.name), lower, use_interval, True)
        gated.append((observed, how, entry))
    observed, how, worst = (min if lower else max)(gated, key=lambda g: g[0])
    extreme = "lowest" if lower else "highest"
    check = _bound_check(name, f"{extreme} slice {metric.label}", observed, bound, "", lower, True)
    check.detail = f"{_verdict(worst, metric.label, check)} (n={worst.n}, the {extreme} of {of}; {how})"
    return check


def _verdict(entry: SliceResult, what: str, check: Check) -> str:
    """'lighting = dark: accuracy 40.10% < 60.00%': the slice, the value compared, how it stands to the bound."""
    failed = {">=": "<", "<=": ">"}[check.op]
    op = check.op if check.passed else failed
    value, bound = format_value(check.observed, True), format_value(check.threshold, True)
    return f"{shown_slice(entry.column, entry.value)}: {what} {value} {op} {bound}"


def _gap_check(
    section: Slices, scope: list[SliceResult], of: str, name: str, bound: float, use_interval: bool
) -> Check:
    """The largest accuracy shortfall (rest - slice) among the slices whose accuracy gap is significant after the
    section's correction; 0 where none falls short significantly (a gap within the noise never fails)."""
    label = "largest significant slice accuracy shortfall (rest - slice)"
    correction = f"{section.correction} correction over {section.tests} tests at level {section.level:g}"
    shortfalls = []
    for entry in scope:
        gap = entry.gaps.get("accuracy") or {}
        value = gap.get("gap")
        if not gap.get("significant") or not finite_number(value) or value >= 0:
            continue
        interval = gap.get("interval")
        # The shortfall is -gap: its 95% interval is the gap's, negated; the pessimistic end the larger shortfall.
        negated = sorted(-float(v) for v in interval) if interval and len(interval) == 2 else None
        observed, how = _gated_value(-float(value), negated, False, use_interval, True)
        shortfalls.append((observed, how, entry))
    if not shortfalls:
        detail = f"no slice's accuracy falls short of the rest's significantly ({of}; {correction})"
        return _bound_check(name, label, 0.0, bound, detail, False, True)
    observed, how, worst = max(shortfalls, key=lambda g: g[0])
    check = _bound_check(name, label, observed, bound, "", False, True)
    short = f"{len(shortfalls)} of {of} short significantly"
    check.detail = f"{_verdict(worst, 'accuracy shortfall', check)} (n={worst.n}; {short}; {correction}; {how})"
    return check


def _multicalibration_check(section: Slices, name: str, bound: float, min_size: int, use_interval: bool) -> Check:
    """The section's multicalibration error, computed over the whole data and the slices of at least the report's
    min_size. A larger gate min_size is honoured where the maximum sits on the whole data or on a slice that large
    (the maximum over fewer slices is then the same), or where the error passes (it bounds the maximum over fewer
    slices from above); otherwise the report cannot say, and the config is refused."""
    label = "multicalibration error"
    found = section.multicalibration
    error = found.get("error") if found else None
    if not found or not finite_number(error):
        raise InputError(f"the gate checks {name} but the report's slices section has no multicalibration error")
    computed = found.get("min_size", section.min_size)
    column, n = found.get("column"), found.get("n")
    at = f"at {printable(multicalibration_where(found))} (n={n})"
    scope = f"computed over the whole data and slices of at least {computed} images"
    check = _bound_check(name, label, float(error), bound, "", False, True)
    if min_size != computed:
        largest_there = column is None or (isinstance(n, int) and n >= min_size)
        if largest_there:
            scope += f", the same over slices of at least {min_size} (its maximum is {at})"
        elif check.passed:
            scope += f", a bound from above on the error over slices of at least {min_size}"
        else:
            raise UsageError(
                f"{name} with [gate.slices] min_size = {min_size}: the report's multicalibration error "
                f"{format_value(float(error), True)} is {at}, a slice below {min_size} images, and the error over "
                f"slices of at least {min_size} is not in the report (evaluate with --min-slice-size {min_size}, "
                "or drop min_size)"
            )
    how = "point estimate (the report has no bootstrap interval for it)" if use_interval else "point estimate"
    check.detail = f"{format_value(float(error), True)} {at}; {scope}; {how}"
    return check
