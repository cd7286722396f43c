"""The CI gate: thresholds from TOML -> one pass/fail Check per threshold.

Thresholds live in `[tool.macs-audit.gate]` of a pyproject.toml or in `[gate]` of a
macs-audit.toml (docs/gate.md lists every key). Three kinds of check:

- absolute: `max_ece = 0.05`, `min_accuracy = 0.9`, ... (`max_` for lower-is-better metrics,
  `min_` for higher-is-better ones; only the meaningful direction exists);
- per corruption: `[...gate.corruptions]` holds `min_accuracy`/`max_ece`/`max_nll`/`max_brier`
  for every corruption in the report, and `[...gate.corruptions.<name>]` overrides them for one;
- against a baseline report: `[...gate.baseline]` holds `max_<metric>_increase` (lower is better)
  or `max_<metric>_drop` (higher is better), absolute or with a `_relative` suffix (a fraction of
  the baseline's value).

`use_interval = true` gates on the pessimistic end of the 95% bootstrap interval where the report
has one. Unknown keys and wrong types raise UsageError (exit 2); a threshold on a metric the report
does not contain raises InputError (exit 3): a gate never passes by skipping a check. The core
returns a GateResult and never prints or exits.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import reprlib
from pathlib import Path
from typing import Any

from macs_audit.errors import InputError, UsageError
from macs_audit.metrics.registry import GATE_METRICS, METRICS, VIEW_METRICS, Metric, Place
from macs_audit.report import MAX_DEPTH, Report, ViewResult, within_depth
from macs_audit.text import printable
from macs_audit.views.corruptions.table import CORRUPTIONS

# Values equal to a bound pass; this absorbs floating-point rounding in `baseline + allowance`.
TOLERANCE = 1e-12


def _bound_key(m: Metric) -> str:
    return ("min_" if m.higher_is_better else "max_") + m.name


ABSOLUTE_KEYS = {_bound_key(m): m.name for m in GATE_METRICS.values()}
# Per-corruption thresholds, on the means over severities in report.corruption_summary.corruptions.
CORRUPTION_KEYS = {_bound_key(METRICS[name]): name for name in VIEW_METRICS}
BASELINE_KEYS: dict[str, tuple[str, bool]] = {}  # key -> (metric, relative?)
for _m in GATE_METRICS.values():
    for _relative in (False, True):
        _key = f"max_{_m.name}_{'drop' if _m.higher_is_better else 'increase'}" + ("_relative" if _relative else "")
        BASELINE_KEYS[_key] = (_m.name, _relative)
GATE_OPTIONS = ("use_interval",)
GATE_TABLES = ("corruptions", "baseline")
BASELINE_OPTIONS = ("report",)


@dataclasses.dataclass
class GateConfig:
    """Validated gate configuration (thresholds in config-file order)."""

    thresholds: dict[str, float] = dataclasses.field(default_factory=dict)  # "max_ece" -> 0.05
    corruption_defaults: dict[str, float] = dataclasses.field(default_factory=dict)  # "min_accuracy" -> 0.5
    corruption_overrides: dict[str, dict[str, float]] = dataclasses.field(default_factory=dict)  # "fog" -> {...}
    baseline: dict[str, float] = dataclasses.field(default_factory=dict)  # "max_ece_increase" -> 0.01
    baseline_report: Path | None = None
    use_interval: bool = False
    source: str = "<config>"


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


@dataclasses.dataclass
class GateResult:
    checks: list[Check]
    use_interval: bool = False
    config: str | None = None
    baseline: str | None = None

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
        }


def format_value(value: float, percent: bool) -> str:
    return f"{100 * value:.2f}%" if percent else f"{value:.4g}"


# --------------------------------------------------------------------------------------------
# Loading and validating the configuration
# --------------------------------------------------------------------------------------------


def _short(value: Any) -> str:
    """A config value as a message quotes it: repr, shortened (a nested array shows its first levels)."""
    return reprlib.repr(value)


def _toml_load(path: Path) -> dict:
    """Parse a TOML file (a regular file: a FIFO or a device is never read). Raises UsageError naming `path`."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib
    too_deep = UsageError(f"{path} cannot be used: arrays or tables nested more than {MAX_DEPTH} levels deep")
    if not path.is_file():
        raise UsageError(f"cannot read {path}: not a regular file")
    try:
        with open(path, "rb") as fh:
            doc = tomllib.load(fh)
    except RecursionError:  # tomllib parses nested arrays recursively
        raise too_deep from None
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{path} is not valid TOML: {exc}") from None
    except UnicodeDecodeError as exc:
        raise UsageError(f"{path} is not valid TOML: not UTF-8 text (byte {exc.start}); save it as UTF-8") from None
    except OSError as exc:
        raise UsageError(f"cannot read gate config {path}: {exc.strerror}") from None
    if not within_depth(doc, MAX_DEPTH):
        raise too_deep
    return doc


def _gate_table(doc: dict, path: Path) -> tuple[dict | None, str]:
    """The gate table of a parsed file: [tool.macs-audit.gate] (any file) or [gate] (macs-audit.toml)."""
    tool = doc.get("tool", {}).get("macs-audit") if isinstance(doc.get("tool"), dict) else None
    if isinstance(tool, dict) and "gate" in tool:
        return tool["gate"], f"{path} [tool.macs-audit.gate]"
    if "gate" in doc:
        return doc["gate"], f"{path} [gate]"
    return None, str(path)


def find_config(start: Path | None = None) -> Path | None:
    """Search `start` and its parents for macs-audit.toml or a pyproject.toml with a gate table.

    The search stops at the first pyproject.toml (the project root) or a .git directory.
    """
    directory = (start or Path.cwd()).resolve()
    for folder in (directory, *directory.parents):
        if (folder / "macs-audit.toml").is_file():
            return folder / "macs-audit.toml"
        pyproject = folder / "pyproject.toml"
        if pyproject.is_file():
            table, _ = _gate_table(_toml_load(pyproject), pyproject)
            return pyproject if table is not None else None
        if (folder / ".git").exists():
            return None
    return None


def _unknown_key(key: str, known, where: str) -> UsageError:
    close = difflib.get_close_matches(key, list(known), n=1)
    hint = f"; did you mean {close[0]!r}?" if close else "; see docs/gate.md for the keys"
    return UsageError(f"unknown key {key!r} in {where}{hint}")


def _number(value: Any, where: str, non_negative: bool = False) -> float:
    # bool is an int in Python; `max_ece = true` is a mistake, not 1.0.
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise UsageError(f"{where} must be a finite number, got {type(value).__name__} {_short(value)}")
    if non_negative and value < 0:
        raise UsageError(f"{where} must be >= 0, got {value!r}")
    return float(value)


def _fraction(value: float, metric: Metric, where: str) -> float:
    """Percent-style metrics are fractions in [0, 1]: `max_ece = 5` almost surely meant 5%."""
    if metric.unit.bounded and not 0 <= value <= 1:
        raise UsageError(
            f"{where} = {value:g} is outside [0, 1]: thresholds are fractions ({value / 100:g} for {value:g}%)"
        )
    return value


def _table(value: Any, where: str) -> dict:
    if not isinstance(value, dict):
        raise UsageError(f"{where} must be a table, got {type(value).__name__} {_short(value)}")
    return value


def parse_config(table: dict, source: str = "<config>", base_dir: Path | None = None) -> GateConfig:
    """Validate a gate table (the contents of [tool.macs-audit.gate]) into a GateConfig."""
    cfg = GateConfig(source=source)
    _table(table, source)
    for key, value in table.items():
        where = f"{source}: {key}"
        if key == "use_interval":
            if not isinstance(value, bool):
                raise UsageError(f"{where} must be true or false, got {type(value).__name__} {_short(value)}")
            cfg.use_interval = value
        elif key in ABSOLUTE_KEYS:
            cfg.thresholds[key] = _fraction(_number(value, where), METRICS[ABSOLUTE_KEYS[key]], where)
        elif key == "corruptions":
            _parse_corruptions(_table(value, where), cfg, f"{source}: corruptions")
        elif key == "baseline":
            _parse_baseline(_table(value, where), cfg, f"{source}: baseline", base_dir)
        else:
            raise _unknown_key(key, [*ABSOLUTE_KEYS, *GATE_OPTIONS, *GATE_TABLES], source)
    if not (cfg.thresholds or cfg.corruption_defaults or cfg.corruption_overrides or cfg.baseline):
        raise UsageError(f"{source} sets no thresholds; a gate with no checks would always pass (see docs/gate.md)")
    return cfg


def _parse_corruptions(table: dict, cfg: GateConfig, where: str) -> None:
    known_names = CORRUPTIONS
    for key, value in table.items():
        if isinstance(value, dict):  # [gate.corruptions.<name>]: overrides for one corruption
            if key not in known_names:
                raise _unknown_key(key, [*known_names, *CORRUPTION_KEYS], where)
            overrides = {}
            for sub, bound in value.items():
                if sub not in CORRUPTION_KEYS:
                    raise _unknown_key(sub, CORRUPTION_KEYS, f"{where}.{key}")
                sub_where = f"{where}.{key}: {sub}"
                overrides[sub] = _fraction(_number(bound, sub_where), METRICS[CORRUPTION_KEYS[sub]], sub_where)
            if not overrides:
                raise UsageError(f"{where}.{key} is empty; give at least one of {', '.join(CORRUPTION_KEYS)}")
            cfg.corruption_overrides[key] = overrides
        elif key in CORRUPTION_KEYS:
            cfg.corruption_defaults[key] = _fraction(
                _number(value, f"{where}: {key}"), METRICS[CORRUPTION_KEYS[key]], f"{where}: {key}"
            )
        elif key in known_names:
            raise UsageError(f"{where}: {key} must be a table, e.g. [...gate.corruptions.{key}] min_accuracy = 0.5")
        else:
            raise _unknown_key(key, [*CORRUPTION_KEYS, *known_names], where)


def _parse_baseline(table: dict, cfg: GateConfig, where: str, base_dir: Path | None) -> None:
    for key, value in table.items():
        if key == "report":
            if not isinstance(value, str) or not value:
                raise UsageError(f"{where}: report must be a path string, got {type(value).__name__} {_short(value)}")
            cfg.baseline_report = (base_dir or Path.cwd()) / value
        elif key in BASELINE_KEYS:
            name, relative = BASELINE_KEYS[key]
            allowance = _number(value, f"{where}: {key}", non_negative=True)
            cfg.baseline[key] = allowance if relative else _fraction(allowance, METRICS[name], f"{where}: {key}")
        else:
            raise _unknown_key(key, [*BASELINE_KEYS, *BASELINE_OPTIONS], where)


def load_config(path: Path | None = None, start: Path | None = None) -> GateConfig:
    """Read and validate the gate config at `path`, or find one from `start` (default: the cwd)."""
    if path is None:
        path = find_config(start)
        if path is None:
            raise UsageError(
                "no gate thresholds found: add [tool.macs-audit.gate] to pyproject.toml or pass "
                "--config macs-audit.toml, or start from a report's values with `macs-audit init REPORT.json` "
                "(see docs/gate.md)"
            )
    path = Path(path)
    if not path.is_file():
        raise UsageError(f"gate config not found: {path}")
    table, source = _gate_table(_toml_load(path), path)
    if table is None:
        raise UsageError(f"{path} has no [tool.macs-audit.gate] table (or [gate] in a macs-audit.toml)")
    return parse_config(table, source, base_dir=path.parent)


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
}
_VIEW_PLACES = (Place.CLEAN, Place.SELECTIVE)  # values in report.clean.metrics


def _attribute(section: object, path: str) -> object:
    """section.a.b for path "a.b" (attributes of sections, keys of mappings); None where any step is absent."""
    for name in path.split("."):
        section = section.get(name) if isinstance(section, dict) else getattr(section, name, None)
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
    """Evaluate every configured check on `report`; `use_interval` (if not None) overrides the config."""
    interval = config.use_interval if use_interval is None else use_interval
    if interval and not report.clean.intervals:
        raise InputError(
            "use_interval needs bootstrap intervals but the report has none (it was made with "
            "--bootstrap 0); rerun evaluate with --bootstrap N or gate on point estimates"
        )
    if config.baseline and baseline is None:
        raise UsageError(
            f"{config.source} sets baseline allowances but no baseline report was given; "
            'pass --baseline BASE.json or set [gate.baseline] report = "..."'
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
    if baseline is not None:
        checks.extend(_baseline_checks(report, baseline, config, interval))
    return GateResult(
        checks=checks,
        use_interval=interval,
        config=config.source,
        baseline=baseline_name if baseline is not None else None,
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
        amount = f"{100 * allowed:.2f} pp" if metric.percent else f"{allowed:.4g}"  # pp: percentage points
        rule = f"{100 * allowance:g}% of baseline = {amount}" if relative else amount
        detail = f"baseline {format_value(base_value, metric.percent)}, allowed {change} {rule}; {how}"
        checks.append(_check(f"baseline.{key}", metric, f"{metric.title} vs baseline", observed, bound, detail))
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
    for name in config.corruption_overrides:
        if name not in per_corruption:
            raise InputError(
                f"the gate has thresholds for corruption {name!r} but the report has no such "
                f"corruption (it has: {', '.join(per_corruption)})"
            )
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


# --------------------------------------------------------------------------------------------
# A starting configuration from a report (`macs-audit init`)
# --------------------------------------------------------------------------------------------

MARGIN = 0.02  # fractions (accuracy, ECE, ...): 2 percentage points either way
RELATIVE_MARGIN = 0.10  # the other metrics (NLL, Brier, ratios): 10% of the value
CONFIG_FILE = "macs-audit.toml"  # holds [gate]; any other file gets [tool.macs-audit.gate]


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
        absolute.append(StartingThreshold(_bound_key(metric), bound, float(value), metric.title, metric.percent))
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
        per_corruption.append(StartingThreshold(_bound_key(metric), bound, values[worst], what, metric.percent))
    if not absolute and not per_corruption:
        raise InputError("the report holds no gated metric (no clean metrics): is it a report written by evaluate?")
    return absolute, per_corruption


def _comment(text: str) -> str:
    """One TOML comment line's text: a report's line breaks and control characters shown as escapes."""
    return printable(text)


def starting_config(
    report: Report,
    table: str = "tool.macs-audit.gate",
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

    table = "gate" if path.name == CONFIG_FILE else "tool.macs-audit.gate"
    if path.is_dir():
        raise UsageError(f"{path} is a directory; give a TOML file (pyproject.toml or {CONFIG_FILE})")
    existing = ""
    dest = destination(path)  # a block device or a socket: UsageError
    if dest.file is not None and dest.file.exists():
        found, source = _gate_table(_toml_load(path), path)
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
    found, source = _gate_table(doc, path)
    parse_config(found or {}, source, base_dir=path.parent)  # what was written is a config the gate accepts
    write_text(path, text)
    return table
