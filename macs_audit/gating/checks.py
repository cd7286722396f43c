"""The gate's checks: a Report (and a baseline Report) against a GateConfig, one pass/fail Check per threshold.

Three kinds of check:

- absolute: `max_ece = 0.05`, `min_accuracy = 0.9`, ... (`max_` for lower-is-better metrics,
  `min_` for higher-is-better ones; only the meaningful direction exists);
- per corruption: `[...gate.corruptions]` holds `min_accuracy`/`max_ece`/`max_nll`/`max_brier`
  for every corruption in the report, and `[...gate.corruptions.<name>]` overrides them for one;
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
from typing import Any

from macs_audit.errors import InputError, UsageError
from macs_audit.gating.config import (
    ABSOLUTE_KEYS,
    BASELINE_KEYS,
    CORRUPTION_KEYS,
    PARITY_KEYS,
    SHIFT_KEYS,
    GateConfig,
    config_path,
    load_config,
)
from macs_audit.metrics.metric_row import Metric, Place
from macs_audit.metrics.registry import METRICS
from macs_audit.numbers import format_change, format_value
from macs_audit.report import Report, Section, ViewResult, load_report

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
        if not (config.thresholds or config.corruption_defaults or config.corruption_overrides):
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


def _parity_check(name: str, label: str, observed: float, bound: float, detail: str, lower: bool) -> Check:
    passed = observed >= bound - TOLERANCE if lower else observed <= bound + TOLERANCE
    percent = not name.endswith("max_nll_increase")  # NLL is in nats, the others fractions
    return Check(name, label, ">=" if lower else "<=", bound, observed, passed, detail, percent=percent)


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
