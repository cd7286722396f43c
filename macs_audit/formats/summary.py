"""The audit's bottom line, in no format: what a reader needs first (accuracy, ECE with its interval, the
worst view or corruption, the robust accuracy), what would fix what is wrong (the command), and one verdict
line for the end. The terminal opens with it and ends with its verdict; Markdown and HTML may show it too.
README, "The summary and the verdict", lists every problem and its bar.

A value is flagged (`bad`) against stated bars (ProblemBars: each bar once, with its default; `evaluate
--problem-bars` changes them and the report records them in conventions.problem_bars), not a gate: the gate's
own thresholds decide the exit code, and when a gate runs its verdict replaces this one. Two problems need no
bar: an accuracy whose 95% interval does not lie above chance, and, with a parity section, a change for the
worse whose paired interval excludes 0 (the parity verdict, which the verdict line always carries).
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import shlex
from typing import Any

from macs_audit.errors import InputError, UsageError
from macs_audit.metrics.registry import METRICS
from macs_audit.numbers import format_change, format_value
from macs_audit.report import Report


@dataclasses.dataclass(frozen=True)
class ProblemBars:
    """The bars beyond which the summary calls a value a problem: every one declared here, once, with its
    default (docs: README, "The summary and the verdict"). Fractions in [0, 1]."""

    ece: float = 0.03  # clean ECE above 3%: miscalibration worth fixing (docs/gate.md's example max_ece)
    view_ece: float = 0.10  # the worst perturbation view's or corruption's ECE: confidence off by over 10 points
    robust_drop: float = 0.30  # a robust accuracy more than 30 points below the clean accuracy
    top_class_share: float = 1.0  # one class predicted for at least this share of the images (1: every image)
    # Every confidence within this of the others: 0.01 points, the precision the tables print confidences at.
    confidence_range: float = 0.0001

    def to_dict(self) -> dict[str, float]:
        return dataclasses.asdict(self)


BARS = ProblemBars()  # the built-in bars
BAR_NAMES = tuple(f.name for f in dataclasses.fields(ProblemBars))
SCALING_GAIN = 0.005  # temperature scaling is worth suggesting when it lowers held-out ECE by 0.5 points
Z95 = 1.959963984540054  # the standard normal's 97.5% quantile: the Wilson interval's 95%


def _bar(name: str, value: Any, where: str, error: type[UsageError] | type[InputError]) -> float:
    if name not in BAR_NAMES:
        close = difflib.get_close_matches(name, BAR_NAMES, n=1)
        hint = f"did you mean {close[0]!r}?" if close else f"the bars are {', '.join(BAR_NAMES)}"
        raise error(f"{where}: unknown bar {name!r}; {hint}")
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not number or not 0 <= value <= 1:  # NaN fails the range too
        shown = f"{value:g}" if number else repr(value)
        raise error(f"{where}: {name} must be a fraction in [0, 1] (0.05 for 5%), got {shown}")
    return float(value)


def parse_bars(text: str, option: str = "--problem-bars") -> ProblemBars:
    """`NAME=VALUE,...` (e.g. `ece=0.05,view_ece=0.2`) over the built-in bars; UsageError naming `option`."""
    values: dict[str, float] = {}
    for part in text.split(","):
        name, sep, value = (piece.strip() for piece in part.partition("="))
        if not sep or not name:
            raise UsageError(f"{option} {text!r}: give NAME=VALUE pairs separated by commas, e.g. ece=0.05")
        if name in values:
            raise UsageError(f"{option} sets {name} twice; give each bar once")
        try:
            number: Any = float(value)
        except ValueError:
            number = value  # not a number: _bar says so
        values[name] = _bar(name, number, option, UsageError)
    return dataclasses.replace(BARS, **values)


def bars_of(report: Report) -> ProblemBars:
    """The bars `report` records (conventions.problem_bars, bars a newer version added left out), else the built-in
    ones; InputError where a recorded bar is not a fraction."""
    recorded = report.conventions.problem_bars or {}
    where = "the report's conventions.problem_bars"
    return dataclasses.replace(
        BARS, **{name: _bar(name, value, where, InputError) for name, value in recorded.items() if name in BAR_NAMES}
    )


def record_bars(report: Report, bars: ProblemBars) -> None:
    """Record in `report` the bars its summary is to be judged by (`evaluate --problem-bars`)."""
    report.conventions.problem_bars = bars.to_dict()


@dataclasses.dataclass(frozen=True)
class Finding:
    label: str  # "ECE (15 bins)"
    value: str  # "3.74% [3.22%, 4.23%]"
    bad: bool = False  # beyond its bar: shown in colour where colour is on


@dataclasses.dataclass(frozen=True)
class Fix:
    what: str  # "temperature scaling lowers ECE to 1.02% on held-out data"
    command: str  # "macs-audit calibrate model.onnx --data HELD_OUT --out calibrated"


@dataclasses.dataclass(frozen=True)
class Summary:
    findings: tuple[Finding, ...]
    fixes: tuple[Fix, ...]
    problems: tuple[str, ...]  # the bad findings in words, for the verdict
    notes: tuple[str, ...] = ()  # estimates made on fewer images than they need (conventions.small_sample)
    bars: ProblemBars = BARS
    parity: str | None = None  # the parity verdict (`parity_verdict`), where the report has a parity section

    @property
    def verdict(self) -> str:
        """One line for the end of the output (a gate's verdict replaces it where one runs), the parity verdict
        in it where the report has one (among the problems where it is one)."""
        parity = f"; {self.parity}" if self.parity and not any(p.startswith("parity") for p in self.problems) else ""
        if not self.problems:
            ece = format_value(self.bars.ece, True)
            return f"audit: no problem found (accuracy above chance, ECE at most {ece}, no view below the bar){parity}"
        fix = f"; {len(self.fixes)} fix{'es' * (len(self.fixes) != 1)} in the summary" if self.fixes else ""
        count = len(self.problems)
        return f"audit: {count} problem{'s' * (count != 1)} ({', '.join(self.problems)}){fix}{parity}"


def _interval(ci: list[float] | None, percent: bool) -> str:
    if not ci or len(ci) != 2 or not all(isinstance(v, (int, float)) for v in ci):
        return ""
    return f" [{format_value(ci[0], percent)}, {format_value(ci[1], percent)}]"


def _worst(report: Report, clean: float) -> tuple[str, float, float | None] | None:
    """(name, accuracy, ECE) of the least accurate perturbation view or corruption (mean over severities)."""
    candidates: list[tuple[str, float, float | None]] = []
    for view in report.views_of("perturbation"):
        if isinstance(view.metrics.get("accuracy"), (int, float)):
            candidates.append((f"view {view.name}", view.metrics["accuracy"], view.metrics.get("ece")))
    summary = report.corruption_summary
    for name, entry in (summary.corruptions if summary is not None else {}).items():
        if isinstance(entry.accuracy, (int, float)) and math.isfinite(entry.accuracy):
            candidates.append((f"corruption {name} (mean over severities)", entry.accuracy, entry.ece))
    return min(candidates, key=lambda c: c[1]) if candidates else None


def wilson_interval(accuracy: float, n: int) -> tuple[float, float]:
    """The 95% Wilson score interval of a binomial proportion `accuracy` of `n` trials."""
    centre = (accuracy + Z95**2 / (2 * n)) / (1 + Z95**2 / n)
    half = Z95 / (1 + Z95**2 / n) * math.sqrt(accuracy * (1 - accuracy) / n + Z95**2 / (4 * n**2))
    return centre - half, centre + half


def chance(report: Report) -> tuple[float, str] | None:
    """(the accuracy of a model that ignores the image, what it is): the larger of 1/K (K the classes it chooses
    among: the model's, or the data's where the metrics are restricted to a subset of the outputs) and the most
    frequent class's share of the images (clean.per_class); None where the report has neither."""
    candidates = []
    k = report.model.num_classes
    if (report.data.class_matching or {}).get("restricted"):  # argmax over the data's classes only
        k = report.data.num_classes
    if isinstance(k, int) and k > 0:
        candidates.append((1 / k, f"1/{k}"))
    rows = [row for row in report.clean.per_class or [] if isinstance(row.get("n"), int)]
    total = sum(row["n"] for row in rows)
    if total:
        top = max(rows, key=lambda row: row["n"])
        candidates.append((top["n"] / total, f"the share of the most frequent class, {top.get('name', top['class'])}"))
    return max(candidates, key=lambda c: c[0]) if candidates else None


def _chance_problem(report: Report, accuracy: float, n: Any) -> str | None:
    """The chance the clean accuracy is not above, and why, or None: its 95% interval (the bootstrap's, else
    Wilson's) does not lie wholly above `chance`. A data set of one class (chance 1) cannot tell: not judged."""
    found = chance(report)
    if found is None or found[0] >= 1:
        return None
    rate, what = found
    ci = report.clean.intervals.get("accuracy")
    if ci and len(ci) == 2 and all(isinstance(v, (int, float)) for v in ci):
        low, basis = ci[0], "its bootstrap 95% interval reaches it"
    elif isinstance(n, int) and n > 0:
        low, basis = wilson_interval(accuracy, n)[0], "its Wilson 95% interval reaches it"
    else:
        return None
    if low > rate:
        return None
    return f"chance {format_value(rate, True)} ({what}; {basis})"


def _prediction_problems(report: Report, bars: ProblemBars) -> list[str]:
    """A constant prediction (one class for at least bars.top_class_share of the images, where the data hold two or
    more classes) and equal confidences (all within bars.confidence_range), from clean.predictions."""
    spread = report.clean.predictions
    if not spread:
        return []
    problems = []
    share, top = spread.get("top_class_share"), spread.get("top_class_name") or spread.get("top_class")
    data_classes = len(report.clean.per_class or []) or None
    if isinstance(share, (int, float)) and share >= bars.top_class_share and data_classes != 1:
        amount = "every image" if share >= 1 else f"{format_value(share, True)} of the images"
        problems.append(f"constant prediction: {amount} predicted as class {top}")
    low, high = spread.get("confidence_min"), spread.get("confidence_max")
    if isinstance(low, (int, float)) and isinstance(high, (int, float)) and high - low <= bars.confidence_range:
        shown = format_value(low, True), format_value(high, True)
        within = shown[0] if shown[0] == shown[1] else f"in [{shown[0]}, {shown[1]}]"
        problems.append(f"equal confidences: every image's confidence {within}")
    return problems


def parity_changes(report: Report) -> list[str]:
    """The parity section's changes for the worse beyond the noise: a clean, perturbation or shift view's metric
    (formats/parity_tables.py PARITY_METRICS) whose paired 95% interval lies wholly on the worse side of 0."""
    from macs_audit.formats.parity_tables import PARITY_METRICS

    found = []
    for view in report.parity.views if report.parity is not None else []:
        if view.kind == "corruption":  # the grid's cells have no interval of their own
            continue
        worse = []
        for name in PARITY_METRICS:
            entry, metric = view.metrics.get(name) or {}, METRICS[name]
            ci = entry.get("interval")
            if not ci or len(ci) != 2 or not all(isinstance(v, (int, float)) for v in ci):
                continue
            if (ci[1] < 0) if metric.higher_is_better else (ci[0] > 0):
                worse.append(f"{metric.label} {format_change(entry['difference'], metric.percent)}")
        if worse:
            found.append(f"{view.name} {', '.join(worse)}")
    return found


def parity_verdict(report: Report) -> str | None:
    """The parity section in one line: the changes for the worse beyond the noise (parity_changes), or that there
    are none, with the clean view's agreement; None without a parity section."""
    if report.parity is None:
        return None
    reference = report.parity.reference.path or "the reference"
    changes = parity_changes(report)
    if changes:
        return f"parity: worse than {reference} beyond the noise ({'; '.join(changes)})"
    clean = report.parity.view("clean")
    agreement = f", {format_value(clean.agreement, True)} agreement on clean" if clean is not None else ""
    return f"parity: no change for the worse beyond the noise against {reference}{agreement}"


# A finding, and the problem it raises in the verdict's words where it is one.
Found = tuple[Finding, str | None]


def summarize(report: Report) -> Summary:
    """The bottom line of `report` (see the module's docstring)."""
    bars = bars_of(report)
    accuracy = report.clean.metrics.get("accuracy")
    clean = float(accuracy) if isinstance(accuracy, (int, float)) else None
    found = [
        *_accuracy_found(report),
        *[
            (Finding(problem.split(":")[0], problem.split(": ", 1)[1], True), problem)
            for problem in _prediction_problems(report, bars)
        ],
        *_ece_found(report, bars),
        *(_worst_found(report, clean, bars) if clean is not None else []),
        *(_robust_found(report, clean, bars) if clean is not None else []),
    ]
    found += _slices_found(report)
    parity = parity_verdict(report)
    if parity is not None:
        worse = parity.startswith("parity: worse")
        found.append((Finding("parity", parity.removeprefix("parity: "), worse), parity if worse else None))
    findings = tuple(finding for finding, _ in found)
    problems = tuple(problem for _, problem in found if problem is not None)
    notes = tuple(report.conventions.small_sample or ())
    return Summary(findings, _fixes(report, bars, findings, notes), problems, notes, bars, parity)


def _accuracy_found(report: Report) -> list[Found]:
    """The clean accuracy with its interval and image count; a problem where it is not above chance."""
    accuracy, n = report.clean.metrics.get("accuracy"), report.clean.metrics.get("n") or report.data.n
    if not isinstance(accuracy, (int, float)):
        return []
    images = f" on {n:,} images" if isinstance(n, int) else ""
    value = format_value(accuracy, True) + _interval(report.clean.intervals.get("accuracy"), True) + images
    at_chance = _chance_problem(report, float(accuracy), n)
    finding = Finding(
        METRICS["accuracy"].label, value + (f", not above {at_chance}" if at_chance else ""), bool(at_chance)
    )
    problem = f"accuracy {format_value(accuracy, True)} not above {at_chance}" if at_chance is not None else None
    return [(finding, problem)]


def _ece_found(report: Report, bars: ProblemBars) -> list[Found]:
    """The clean ECE with its interval; a problem above its bar."""
    ece = report.clean.metrics.get("ece")
    if not isinstance(ece, (int, float)):
        return []
    bad = ece > bars.ece
    value = format_value(ece, True) + _interval(report.clean.intervals.get("ece"), True)
    problem = f"ECE {format_value(ece, True)} > {format_value(bars.ece, True)}" if bad else None
    return [(Finding(METRICS["ece"].table_label, value, bad), problem)]


def _worst_found(report: Report, clean: float, bars: ProblemBars) -> list[Found]:
    """The worst view or corruption's accuracy, its drop from `clean` and its ECE; a problem where that ECE is
    above its bar."""
    worst = _worst(report, clean)
    if worst is None:
        return []
    name, worst_accuracy, worst_ece = worst
    drop = clean - worst_accuracy
    bad = isinstance(worst_ece, (int, float)) and worst_ece > bars.view_ece
    ece_text = f", ECE {format_value(worst_ece, True)}" if isinstance(worst_ece, (int, float)) else ""
    value = f"{name}: accuracy {format_value(worst_accuracy, True)} ({format_change(-drop, True)} from clean){ece_text}"
    problem = None
    if bad:
        short = name.split(" (")[0].split(" ", 1)[1]  # "noise+blur", "glass_blur"
        problem = f"{short} ECE {format_value(worst_ece, True)} > {format_value(bars.view_ece, True)}"
    return [(Finding("worst case", value, bad), problem)]


def _robust_found(report: Report, clean: float, bars: ProblemBars) -> list[Found]:
    """The robust accuracy with its interval; a problem where it is more than its bar below `clean`."""
    robust = report.robustness.robust_accuracy if report.robustness is not None else None
    if not isinstance(robust, (int, float)):
        return []
    robust_view = report.robust_view()
    ci = robust_view.intervals.get("accuracy") if robust_view is not None else None
    bad = clean - robust > bars.robust_drop
    label = f"{METRICS['robust_accuracy'].label} ({report.robust_view_name()})"
    problem = f"robust accuracy {format_value(robust, True)} ({format_change(robust - clean, True)})" if bad else None
    return [(Finding(label, format_value(robust, True) + _interval(ci, True), bad), problem)]


def _slices_found(report: Report) -> list[Found]:
    """The slice section in one line: the slice significantly worse than the rest with the largest accuracy
    shortfall (or, where that gap is not significant, its overconfidence) with the gap's interval, or that none is.
    A finding, not a problem: no bar judges it (the gate's checks may)."""
    from macs_audit.formats.tables import correction_name
    from macs_audit.report import slice_label

    section = report.slices
    if section is None:
        return []
    correction, tests = correction_name(section.correction), f"{section.tests:,} test{'s' * (section.tests != 1)}"
    significant, worse = section.significant(), section.worse()
    if not worse:
        better = f"; {len(significant):,} significantly better than the rest" if significant else ""
        return [
            (Finding("slices", f"no slice significantly worse than the rest ({tests}, {correction}){better}"), None)
        ]
    worst = worse[0]
    accuracy = worst.gaps["accuracy"]
    name = "accuracy" if accuracy["significant"] and accuracy["gap"] < 0 else "overconfidence"
    gap, (low, high) = worst.gaps[name]["gap"], worst.gaps[name]["interval"]
    # the gap's size in points, and its interval as the size's: a negative gap's bounds negated and swapped
    size, bounds = (gap, (low, high)) if gap >= 0 else (-gap, (-high, -low))
    direction = ("more " if gap >= 0 else "less ") + ("accurate" if name == "accuracy" else "overconfident")
    more = len(worse) - 1
    text = (
        f"{slice_label(worst.column, worst.value)} is {100 * size:.2f} points {direction} "
        f"[{100 * bounds[0]:.2f}, {100 * bounds[1]:.2f}], significant after {correction} over {tests}"
    )
    if more:
        text += f"; and {more} more slice{'s' * (more != 1)} significantly worse"
    return [(Finding("slices", text), None)]


def _fixes(report: Report, bars: ProblemBars, findings: tuple[Finding, ...], notes: tuple[str, ...]) -> tuple[Fix, ...]:
    """What would fix the problems: temperature scaling where it lowers a clean ECE above its bar on held-out data
    (unless its temperature is unreliable, `notes`), fine-tuning where a robustness finding is bad."""
    fixes = []
    ece, ts = report.clean.metrics.get("ece"), report.temperature_scaling
    scaled = ts.scaled.get("ece") if ts is not None else None
    raw = ts.raw.get("ece") if ts is not None else None
    unreliable_temperature = any(note.startswith("temperature") for note in notes)
    miscalibrated = isinstance(ece, (int, float)) and ece > bars.ece and not unreliable_temperature
    if (
        miscalibrated
        and isinstance(scaled, (int, float))
        and isinstance(raw, (int, float))
        and raw - scaled > SCALING_GAIN
    ):
        assert ts is not None
        model = shlex.quote(str(report.model.path or "MODEL"))
        command = f"macs-audit calibrate {model} --data HELD_OUT.npz --out calibrated"
        if report.model.format == "predictions":  # no model to fold it into: a map of the logits
            command = "macs-audit calibrate --predictions HELD_OUT.npz --out calibrated"
        held_out = f" on {ts.n_eval:,} held-out images" if isinstance(ts.n_eval, int) else " on held-out data"
        fixes.append(
            Fix(
                f"temperature scaling (T = {ts.temperature:.3f}) lowers ECE from {format_value(raw, True)} to "
                f"{format_value(scaled, True)}{held_out}",
                command,
            )
        )
    robustness = ("worst case", METRICS["robust_accuracy"].label)  # the findings fine-tuning for robustness fixes
    if any(f.bad for f in findings if f.label.startswith(robustness)):
        fixes.append(
            Fix(
                "fine-tuning with the MaCS objective trains the margins that robustness needs (PyTorch weights)",
                "macs-audit finetune MODEL.safetensors --arch ARCH --data TRAIN.npz --out finetuned",
            )
        )
    return tuple(fixes)
