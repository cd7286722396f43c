"""`macs-audit init`'s starting gate table: a report's values loosened by the noise of their estimates, as TOML.

The few metrics a team means are set (clean accuracy, ECE and NLL, robust accuracy, the corruption mean,
conformal coverage, where the report has them), each at its value less a margin from its own 95%
interval, so the model the report was made from passes and a model worse beyond the noise fails; the
other gated metrics are written commented out, loosened alike. No threshold sits at the report's own value
(that would lock in its noise: a model as good fails half the time): each lets the report pass by the
margin its comment states, never less than a least margin (_floored). The baseline allowances are set
with the same margins: the gate runs them when a baseline report is given and skips them, saying so, when
none is. A report with a slices section gets [gate.slices] commented out, each key at the worst slice's value
loosened alike on the slice's own images. The table is added to a TOML file atomically, never over a gate
table the file already has, and only once the gate accepts what would be written.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

from macs_audit.errors import InputError, UsageError
from macs_audit.gating.checks import finite_number, locate, shown_slice
from macs_audit.gating.config import (
    BASELINE_KEYS,
    MACS_AUDIT_TOML,
    PYPROJECT_TOML,
    TOOL_TABLE,
    bound_key,
    gate_table,
    parse_config,
    read_toml,
    table_name,
)
from macs_audit.metrics.metric_row import Metric, Place
from macs_audit.metrics.registry import GATE_METRICS, METRICS
from macs_audit.numbers import format_change, format_value
from macs_audit.report import Report, multicalibration_where
from macs_audit.text import printable

MARGIN = 0.02  # without an interval: fractions (accuracy, ECE, ...) by 2 percentage points
RELATIVE_MARGIN = 0.10  # and the other metrics (NLL, Brier, ratios) by 10% of the value
# The metrics set by default, in this order; every other gated metric is written commented out.
DEFAULT_METRICS = ("accuracy", "ece", "nll", "robust_accuracy", "corruption_accuracy", "conformal_coverage")
# Those with a baseline allowance: conformal coverage is judged against its target, not another model.
BASELINE_METRICS = ("accuracy", "ece", "nll", "robust_accuracy", "corruption_accuracy")
Z95 = 1.959963984540054  # the normal 97.5% quantile: a binomial 95% half-width is Z95 * sqrt(p (1 - p) / n)
# Two independent estimates with 95% half-width h differ by up to sqrt(2) h (95%): the margin of a model
# measured again, on another sample as large, or as a retrained model of the same quality.
DIFFERENCE = math.sqrt(2)
STEP = 1e-4  # thresholds are written to 4 decimals
# The least margin: a fraction of n images by 3/n (the rule of three: the 95% bound on a rate seen 0 times in
# n, where a binomial half-width is 0: accuracy 100%, ECE 0), any other value by one written step.
RULE_OF_THREE = 3.0


@dataclasses.dataclass
class StartingThreshold:
    key: str  # "min_accuracy", or "min_accuracy" under corruptions
    bound: float
    observed: float
    what: str  # what was observed, in words (for the comment)
    percent: bool
    enabled: bool = True  # False: written commented out
    margin: float = 0.0  # what the report passes by, at least: |bound - observed| before rounding outwards
    how: str = ""  # where the margin comes from, in words

    @property
    def stated(self) -> str:
        """The margin as the comment states it: '1.23 pp: sqrt(2) x ...'."""
        return f"{format_change(self.margin, self.percent, signed=False)}: {self.how}"


def _rounded(value: float, metric: Metric) -> float:
    """`value` rounded outwards (in the allowed direction) to 4 decimals; a fraction kept in [0, 1]."""
    if metric.higher_is_better:
        bound = math.floor(value * 1e4) / 1e4
        bound = round(bound - 1e-4, 4) if bound > value else bound  # value * 1e4 rounded up in binary: one step more
    else:
        bound = math.ceil(value * 1e4) / 1e4
        bound = round(bound + 1e-4, 4) if bound < value else bound
    return min(1.0, max(0.0, bound)) if metric.unit.bounded else bound


def _binomial_half_width(p: float, n: int) -> float:
    return Z95 * math.sqrt(max(p * (1 - p), 0.0) / n) if n > 0 else 0.0


def _images(report: Report, metric: Metric) -> int:
    """The images `metric` was scored on: the conformal sets' held-out part, else the data's (0: unknown)."""
    if metric.place is Place.CONFORMAL and report.conformal is not None:
        n = getattr(report.conformal, "n_eval", None)
        return n if isinstance(n, int) else 0
    return report.data.n or 0


def _floored(margin: float, how: str, bounded: bool, n: int) -> tuple[float, str]:
    """`margin`, or the least margin where it is smaller (RULE_OF_THREE / n for a fraction of n images, else
    STEP), said so: no threshold sits at the report's own value."""
    floor = RULE_OF_THREE / n if bounded and n > 0 else STEP
    if margin >= floor:
        return margin, how
    least = f"3/n on {n} images, the rule of three" if bounded and n > 0 else "one step of the 4 decimals written"
    return floor, f"{how}, raised to the least margin ({least})"


def _noise_margin(
    report: Report,
    metric: Metric,
    value: float,
    interval: list[float] | None,
    n: int | None = None,
    kind: str = "bootstrap",
) -> tuple[float, str]:
    """(margin, where it comes from) for `metric`'s value: sqrt(2) x the distance from the value to the
    pessimistic end of its 95% interval (of `kind`), or of a binomial one where the report has none (a fraction
    of the n images it was scored on: `n`, else the report's), else the flat margins; never below _floored's
    least margin."""
    side = "lower" if metric.higher_is_better else "upper"
    n = _images(report, metric) if n is None else n
    if interval is not None and len(interval) == 2 and all(isinstance(v, (int, float)) for v in interval):
        end = interval[0] if metric.higher_is_better else interval[1]
        half = abs(value - float(end))
        shown = ", ".join(format_value(float(v), metric.percent) for v in interval)
        how = f"sqrt(2) x the {side} half-width of its 95% {kind} interval [{shown}]"
        return _floored(DIFFERENCE * half, how, metric.unit.bounded, n)
    if metric.unit.bounded and n > 0:
        half = _binomial_half_width(value, n)
        how = f"sqrt(2) x the binomial 95% half-width on {n} images (no interval in the report)"
        return _floored(DIFFERENCE * half, how, True, n)
    if metric.unit.bounded:
        return MARGIN, f"a flat {format_change(MARGIN, True, signed=False)} (no interval in the report)"
    how = f"a flat {100 * RELATIVE_MARGIN:g}% of the value (no interval in the report)"
    return _floored(RELATIVE_MARGIN * abs(value), how, False, n)


def _coverage_bound(report: Report, metric: Metric, value: float) -> tuple[float, str] | None:
    """Conformal coverage is judged against its target: the target less the binomial 95% half-width on the
    held-out images it was scored on (None where the report lacks the target), or, where that is higher, the
    report's value less its noise (starting_thresholds): never at its value."""
    conformal = report.conformal
    target = getattr(conformal, "target_coverage", None) if conformal is not None else None
    n = getattr(conformal, "n_eval", None) if conformal is not None else None
    if not isinstance(target, (int, float)) or not isinstance(n, int) or n <= 0:
        return None
    half = _binomial_half_width(float(target), n)
    how = f"its target {format_value(float(target), True)} less the binomial 95% half-width on {n} held-out images"
    return float(target) - half, how


def starting_thresholds(
    report: Report, margin: float | None = None, relative_margin: float | None = None
) -> tuple[list[StartingThreshold], list[StartingThreshold]]:
    """(thresholds, per-corruption defaults) that the report passes, for every gated metric it holds, each at
    its value loosened by the noise of its estimate (_noise_margin): the default metrics enabled, the others
    disabled (written commented out). `margin` / `relative_margin` (fractions; the other metrics, a fraction
    of the value) replace the noise margins with flat ones. The per-corruption defaults (disabled) bound the
    worst corruption's mean accuracy and ECE, loosened alike (binomial on the report's images)."""
    flat = _flat_margins(margin, relative_margin)

    def loosen(metric: Metric, value: float, interval: list[float] | None) -> tuple[float, float, str]:
        return _loosened(report, metric, value, interval, flat)

    absolute = []
    for metric in GATE_METRICS.values():
        value, interval = locate(report, metric)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            continue
        enabled = metric.name in DEFAULT_METRICS
        bound, allowance, how = loosen(metric, float(value), interval)  # type: ignore[arg-type]
        absolute.append(
            StartingThreshold(
                bound_key(metric), bound, float(value), metric.title, metric.percent, enabled, allowance, how
            )
        )
    absolute.sort(key=lambda t: not t.enabled)  # the enabled first, each group in the registry's order
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
        what = f"{'lowest' if metric.higher_is_better else 'highest'} per-corruption mean {metric.label} ({worst})"
        bound, allowance, how = loosen(metric, values[worst], None)
        per_corruption.append(
            StartingThreshold(bound_key(metric), bound, values[worst], what, metric.percent, False, allowance, how)
        )
    if not absolute and not per_corruption:
        raise InputError("the report holds no gated metric (no clean metrics): is it a report written by evaluate?")
    return absolute, per_corruption


def _flat_margins(margin: float | None, relative_margin: float | None) -> tuple[float, float] | None:
    """init's --margin and --relative-margin, the defaults for the one not given; None where neither is given
    (the noise margins)."""
    if margin is None and relative_margin is None:
        return None
    margin = MARGIN if margin is None else margin
    relative_margin = RELATIVE_MARGIN if relative_margin is None else relative_margin
    if not (0 <= margin < 1 and 0 <= relative_margin < 1):
        raise UsageError(f"margins must lie in [0, 1), got {margin:g} and {relative_margin:g}")
    return margin, relative_margin


def _loosened(
    report: Report,
    metric: Metric,
    value: float,
    interval: list[float] | None,
    flat: tuple[float, float] | None,
    n: int | None = None,
    kind: str = "bootstrap",
) -> tuple[float, float, str]:
    """(bound, the margin the report passes it by, where the margin comes from): `value` of `metric` loosened by
    the `flat` margins (fraction, fraction of the value) where given, else by its noise (_noise_margin; `n`: the
    images it was scored on, default the report's); conformal coverage against its target."""
    if flat is not None:
        allowance = flat[0] if metric.unit.bounded else flat[1] * abs(value)
        how = f"a flat {format_change(allowance, metric.percent, signed=False)} (--margin, --relative-margin)"
    elif metric.name.startswith("conformal_coverage") and (target := _coverage_bound(report, metric, value)):
        bound, how = target
        own, own_how = _noise_margin(report, metric, value, interval)
        if value - own < bound:  # near or below its target: the report passes by its own noise, not by 0
            bound, how = value - own, f"{own_how}, lower than {how}"
        return _rounded(bound, metric), value - bound, how
    else:
        allowance, how = _noise_margin(report, metric, value, interval, n, kind)
    bound = value - allowance if metric.higher_is_better else value + allowance
    rounded = _rounded(bound, metric)
    # A fraction's bound clipped to [0, 1] lets the report pass by what is left of the margin.
    return rounded, min(allowance, abs(rounded - value)), how


# The slice quantities without a registry row, loosened as ECE is: fractions, lower is better.
SLICE_SHORTFALL = dataclasses.replace(METRICS["ece"], name="slice_accuracy_gap", label="accuracy shortfall")
MULTICALIBRATION = dataclasses.replace(METRICS["ece"], name="multicalibration_error", label="multicalibration error")


def slice_thresholds(
    report: Report, margin: float | None = None, relative_margin: float | None = None
) -> list[StartingThreshold]:
    """[gate.slices]' keys (all disabled: written commented out) from the report's slices section, each at the worst
    scored slice's value loosened as starting_thresholds loosens a value (its noise on the slice's own images:
    the slice's interval, else binomial on its n; or the flat margins); none without a slices section."""
    section = report.slices
    if section is None:
        return []
    flat = _flat_margins(margin, relative_margin)
    rows = []

    def add(
        key: str, metric: Metric, value: float, interval: list[float] | None, n: int, what: str, kind: str = "bootstrap"
    ) -> None:
        bound, allowance, how = _loosened(report, metric, value, interval, flat, n, kind)
        rows.append(StartingThreshold(key, bound, value, what, True, False, allowance, how))

    scored = [s for s in section.slices if all(finite_number(s.metrics.get(k)) for k in ("accuracy", "ece"))]
    of = f"{len(scored)} slices of at least {section.min_size} images"
    if scored:
        low = min(scored, key=lambda s: s.metrics["accuracy"])
        what = f"every slice's accuracy at least this; the lowest of {of}, {shown_slice(low.column, low.value)}"
        add(
            "min_slice_accuracy",
            METRICS["accuracy"],
            low.metrics["accuracy"],
            low.intervals.get("accuracy"),
            low.n,
            what,
        )
        high = max(scored, key=lambda s: s.metrics["ece"])
        what = f"every slice's ECE at most this; the highest, {shown_slice(high.column, high.value)}"
        add("max_slice_ece", METRICS["ece"], high.metrics["ece"], high.intervals.get("ece"), high.n, what)
    short = [(s, s.gaps["accuracy"]) for s in scored if finite_number((s.gaps.get("accuracy") or {}).get("gap"))]
    short = [(s, gap) for s, gap in short if gap["gap"] < 0]
    significant = [(s, gap) for s, gap in short if gap.get("significant")]
    if short:
        worst, gap = max(significant or short, key=lambda pair: -pair[1]["gap"])
        interval = gap.get("interval")
        negated = sorted(-float(v) for v in interval) if interval and len(interval) == 2 else None
        which = "the largest" if significant else "none in the report; the largest of any slice"
        what = (
            f"the largest accuracy shortfall (rest - slice) among the gaps significant after the {section.correction} "
            f"correction ({which}: {shown_slice(worst.column, worst.value)})"
        )
        add("max_slice_accuracy_gap", SLICE_SHORTFALL, -float(gap["gap"]), negated, worst.n, what, "Newcombe")
    found = section.multicalibration
    if found and finite_number(found.get("error")):
        n = found.get("n")
        where = printable(multicalibration_where(found))
        what = f"the worst calibration of a slice's confidence bin, weighted by its share of the slice; at {where}"
        add(
            "max_multicalibration_error",
            MULTICALIBRATION,
            float(found["error"]),
            None,
            n if isinstance(n, int) else 0,
            what,
        )
    return rows


def slice_lines(
    report: Report, table: str, margin: float | None = None, relative_margin: float | None = None
) -> list[str]:
    """The commented-out [gate.slices] table (slice_thresholds), where the report has a slices section."""
    rows = slice_thresholds(report, margin, relative_margin)
    if not rows or report.slices is None:
        return []
    min_size = report.slices.min_size
    return [
        "",
        "# Slices (evaluate --metadata FILE, or the images' own properties): each key on every scored slice of at",
        "# least min_size images; uncomment the table and the keys to hold.",
        f"# [{table}.slices]",
        *(_row(t) for t in rows),
        f"# min_size = {min_size}  # the smallest slice the keys apply to (the report's; smaller ones were not scored)",
    ]


def _row(t: StartingThreshold) -> str:
    """One threshold's TOML line: `key = bound  # what was observed; margin ...`, commented out where disabled."""
    observed = f"{t.what}: {format_value(t.observed, t.percent)} in the report"
    line = f"{t.key} = {t.bound!r}  " + _comment(f"# {observed}; margin {t.stated}")
    return line if t.enabled else f"# {line}"


def _comment(text: str) -> str:
    """One TOML comment line's text: a report's line breaks and control characters shown as escapes."""
    return printable(text)


def _allowance_key(metric_name: str) -> str:
    key = next(k for k, (name, relative) in BASELINE_KEYS.items() if name == metric_name and not relative)
    return key


def starting_config(
    report: Report,
    table: str = TOOL_TABLE,
    margin: float | None = None,
    relative_margin: float | None = None,
    report_name: str = "the report",
) -> str:
    """The TOML text of a starting gate table `table` from `report` (see starting_thresholds)."""
    absolute, per_corruption = starting_thresholds(report, margin, relative_margin)
    model, data = report.model, report.data
    lines = [
        _comment(f"# Starting gate thresholds, written by `macs-audit init` from {report_name}"),
        _comment(f"# ({model.path or '?'} on {data.source or '?'}, n={data.n or '?'})."),
        "# Each threshold is the report's value loosened by the noise of its estimate (the comment says",
        "# by how much and from which interval), so this model passes and one worse beyond the noise",
        "# fails; the metrics not set are commented out, loosened alike: uncomment the ones to hold. Checks",
        "# compare point estimates (use_interval = true: the pessimistic end of the 95% interval).",
        "# docs/gate.md lists every key.",
        f"[{table}]",
    ]
    lines += [_row(t) for t in absolute]
    if per_corruption:
        lines += ["", "# Every corruption's mean over severities; [...corruptions.<name>] overrides one."]
        lines += [f"# [{table}.corruptions]", *(_row(t) for t in per_corruption)]
    lines += slice_lines(report, table, margin, relative_margin)
    lines += parity_lines(report, table)
    allowances = [
        (METRICS[t.key.split("_", 1)[1]], t)
        for t in absolute
        if t.enabled and t.key.split("_", 1)[1] in BASELINE_METRICS
    ]
    lines += [
        "",
        "# Regression checks against a baseline report (the target branch's): they run when one is given",
        '# (gate --baseline BASE.json, or report = "..." below) and are skipped, with a note, when none is.',
        "# Each allowance is the threshold's margin above.",
        f"[{table}.baseline]",
        '# report = "baseline.json"',
    ]
    for metric, t in allowances:
        allowance = math.ceil(t.margin * 1e4) / 1e4
        amount = format_change(allowance, metric.percent, signed=False)
        lines.append(f"{_allowance_key(metric.name)} = {allowance!r}  " + _comment(f"# {metric.title}: {amount}"))
    return "\n".join(lines) + "\n"


def write_starting_config(
    path: Path,
    report: Report,
    margin: float | None = None,
    relative_margin: float | None = None,
    report_name: str = "the report",
    before: str = "",
) -> str:
    """Add a starting gate table to the TOML file `path` (created, or appended to when it has no gate table
    yet), atomically, after the TOML text `before` (init's evaluate table); return the table's name. A file that
    already has one is refused: init never replaces thresholds. A stream (`-`, a FIFO, a character device) is
    written to like every output (macs_audit.atomic.destination), never read: it gets the tables alone."""
    from macs_audit.atomic import destination, write_text

    table = table_name(path)
    if path.is_dir():
        raise UsageError(f"{path} is a directory; give a TOML file ({PYPROJECT_TOML} or {MACS_AUDIT_TOML})")
    existing = ""
    dest = destination(path)  # a block device or a socket: UsageError
    if dest.file is not None and dest.file.exists():
        found, source = gate_table(read_toml(path), path)
        if found is not None:
            raise UsageError(
                f"{source} already exists: init does not replace thresholds; edit them there, "
                "or remove that table and run init again"
            )
        try:
            existing = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise UsageError(f"cannot read {path}: {exc.strerror}") from None
    block = (f"{before}\n" if before else "") + starting_config(report, table, margin, relative_margin, report_name)
    text = existing + ("\n" if existing and not existing.endswith("\n") else "") + ("\n" if existing else "") + block
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:  # e.g. an inline `tool.macs-audit = {...}` the table cannot extend
        raise UsageError(f"cannot add [{table}] to {path}: the result would not be valid TOML ({exc})") from None
    found, source = gate_table(doc, path)
    parse_config(found or {}, source, base_dir=path.parent)  # what was written is a config the gate accepts
    write_text(path, text)
    return table


def parity_lines(report: Report, table: str) -> list[str]:
    """[gate.parity] from a report with a parity section: each key at the worst view's pessimistic end of its
    paired 95% interval, rounded outwards, so the candidate passes its own gate by the interval's half-width;
    where a view has no interval, its point estimate loosened as a threshold without an interval is (the
    binomial 95% half-width on its images for a fraction, 10% of the reference's NLL), never by less than
    _floored's least margin."""
    if report.parity is None or not report.parity.views:
        return []
    scored = getattr(report.conformal, "n_eval", None) if report.conformal is not None else None

    def loosened(value: float, interval: list[float] | None, sign: int, lower: bool, noise: float, n: int) -> float:
        """The pessimistic end of the paired interval of sign x the change, else sign x value less `noise`."""
        if interval:
            ends = sorted(0.0 + sign * v for v in interval)  # 0.0 +: no -0.0
            end = ends[0] if lower else ends[1]
            point = 0.0 + sign * value
            least = RULE_OF_THREE / n if n > 0 else STEP  # a degenerate interval still leaves a margin
            return min(end, point - least) if lower else max(end, point + least)
        margin, _ = _floored(noise, "", n > 0, n)
        return 0.0 + sign * value + (-margin if lower else margin)

    def fraction_noise(p: float, n: int) -> float:
        return _binomial_half_width(min(max(p, 0.0), 1.0), n)

    views = report.parity.views
    worst = {
        "min_agreement": min(
            loosened(v.agreement, v.agreement_interval, 1, True, fraction_noise(v.agreement, v.n), v.n) for v in views
        ),
        "max_ece_increase": max(
            loosened(
                v.metrics["ece"]["difference"],
                v.metrics["ece"]["interval"],
                1,
                False,
                fraction_noise(v.metrics["ece"]["reference"], v.n),
                v.n,
            )
            for v in views
        ),
        "max_nll_increase": max(
            loosened(
                v.metrics["nll"]["difference"],
                v.metrics["nll"]["interval"],
                1,
                False,
                RELATIVE_MARGIN * abs(v.metrics["nll"]["reference"]),
                0,
            )
            for v in views
        ),
    }
    drops = []
    for v in views:
        for sets in (v.conformal or {}).values():
            d = sets["differences"]["coverage_at_reference_threshold"]
            n = scored if isinstance(scored, int) and scored > 0 else v.n
            noise = fraction_noise(sets["reference"]["coverage"], n)
            drops.append(loosened(d["difference"], d["interval"], -1, False, noise, n))
    if drops:
        worst["max_coverage_drop"] = max(drops)
    lines = [
        "",
        "# Deployment parity (evaluate CANDIDATE --reference REFERENCE): every view, at the worst view's pessimistic",
        "# end of its paired 95% interval (none: its noise), never at its value; [...parity.<view>] overrides one.",
        f"[{table}.parity]",
    ]
    for key, value in worst.items():
        if key == "min_agreement":
            bound = max(0.0, math.floor(value * 1e4) / 1e4)
        else:
            bound = max(0.0, math.ceil(value * 1e4) / 1e4)
            bound = min(bound, 1.0) if key != "max_nll_increase" else bound
        lines.append(f"{key} = {bound!r}  # worst view, loosened: {value:+.4f}")
    return lines
