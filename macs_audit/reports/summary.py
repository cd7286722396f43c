"""The audit's bottom line, in no format: what a reader needs first (accuracy, ECE with its interval, the
worst view or corruption, the robust accuracy), what would fix what is wrong (the command), and one verdict
line for the end. The terminal opens with it and ends with its verdict; Markdown and HTML may show it too.

A value is flagged (`bad`) against fixed, stated bars (ECE_BAR, SHIFT_ECE_BAR, ROBUST_DROP_BAR), not a gate: the
gate's own thresholds decide the exit code, and when a gate runs its verdict replaces this one.
"""

from __future__ import annotations

import dataclasses
import math
import shlex

from macs_audit.metrics.registry import METRICS
from macs_audit.numbers import format_change, format_value
from macs_audit.report import Report

ECE_BAR = 0.03  # an ECE above 3% is miscalibration worth fixing (docs/gate.md's example max_ece)
SHIFT_ECE_BAR = 0.10  # under a perturbation or corruption: confidence off by more than 10 points
ROBUST_DROP_BAR = 0.30  # a robust accuracy more than 30 points below the clean accuracy
SCALING_GAIN = 0.005  # temperature scaling is worth suggesting when it lowers held-out ECE by 0.5 points


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

    @property
    def verdict(self) -> str:
        """One line for the end of the output (a gate's verdict replaces it where one runs)."""
        if not self.problems:
            return f"audit: no problem found (ECE at most {format_value(ECE_BAR, True)}, no view below the bar)"
        fix = f"; {len(self.fixes)} fix{'es' * (len(self.fixes) != 1)} in the summary" if self.fixes else ""
        count = len(self.problems)
        return f"audit: {count} problem{'s' * (count != 1)} ({', '.join(self.problems)}){fix}"


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


def summarize(report: Report) -> Summary:
    """The bottom line of `report` (see the module's docstring)."""
    accuracy_m, ece_m = METRICS["accuracy"], METRICS["ece"]
    metrics, intervals = report.clean.metrics, report.clean.intervals
    findings: list[Finding] = []
    problems: list[str] = []
    fixes: list[Fix] = []
    accuracy, ece = metrics.get("accuracy"), metrics.get("ece")
    n = metrics.get("n") or report.data.n
    if isinstance(accuracy, (int, float)):
        images = f" on {n:,} images" if isinstance(n, int) else ""
        value = format_value(accuracy, True) + _interval(intervals.get("accuracy"), True) + images
        findings.append(Finding(accuracy_m.label, value))
    if isinstance(ece, (int, float)):
        bad = ece > ECE_BAR
        findings.append(
            Finding(ece_m.table_label, format_value(ece, True) + _interval(intervals.get("ece"), True), bad)
        )
        if bad:
            problems.append(f"ECE {format_value(ece, True)} > {format_value(ECE_BAR, True)}")
    clean = float(accuracy) if isinstance(accuracy, (int, float)) else None
    worst = _worst(report, clean) if clean is not None else None
    if worst is not None and clean is not None:
        name, worst_accuracy, worst_ece = worst
        drop = clean - worst_accuracy
        bad = isinstance(worst_ece, (int, float)) and worst_ece > SHIFT_ECE_BAR
        ece_text = f", ECE {format_value(worst_ece, True)}" if isinstance(worst_ece, (int, float)) else ""
        value = (
            f"{name}: accuracy {format_value(worst_accuracy, True)} ({format_change(-drop, True)} from clean){ece_text}"
        )
        findings.append(Finding("worst case", value, bad))
        if bad:
            short = name.split(" (")[0].split(" ", 1)[1]  # "noise+blur", "glass_blur"
            problems.append(f"{short} ECE {format_value(worst_ece, True)} > {format_value(SHIFT_ECE_BAR, True)}")
    robust = report.robustness.robust_accuracy if report.robustness is not None else None
    if isinstance(robust, (int, float)) and clean is not None:
        robust_view = report.robust_view()
        ci = robust_view.intervals.get("accuracy") if robust_view is not None else None
        bad = clean - robust > ROBUST_DROP_BAR
        label = f"{METRICS['robust_accuracy'].label} ({report.robust_view_name()})"
        findings.append(Finding(label, format_value(robust, True) + _interval(ci, True), bad))
        if bad:
            problems.append(f"robust accuracy {format_value(robust, True)} ({format_change(robust - clean, True)})")
    model = shlex.quote(str(report.model.path or "MODEL"))
    ts = report.temperature_scaling
    scaled = ts.scaled.get("ece") if ts is not None else None
    raw = ts.raw.get("ece") if ts is not None else None
    notes = tuple(report.conventions.small_sample or ())
    unreliable_temperature = any(note.startswith("temperature") for note in notes)
    miscalibrated = isinstance(ece, (int, float)) and ece > ECE_BAR and not unreliable_temperature
    if (
        miscalibrated
        and isinstance(scaled, (int, float))
        and isinstance(raw, (int, float))
        and raw - scaled > SCALING_GAIN
    ):
        assert ts is not None
        held_out = f" on {ts.n_eval:,} held-out images" if isinstance(ts.n_eval, int) else " on held-out data"
        fixes.append(
            Fix(
                f"temperature scaling (T = {ts.temperature:.3f}) lowers ECE from {format_value(raw, True)} to "
                f"{format_value(scaled, True)}{held_out}",
                f"macs-audit calibrate {model} --data HELD_OUT.npz --out calibrated",
            )
        )
    if any(f.bad for f in findings if f.label != ece_m.table_label):
        fixes.append(
            Fix(
                "fine-tuning with the MaCS objective trains the margins that robustness needs (PyTorch weights)",
                "macs-audit finetune MODEL.safetensors --arch ARCH --data TRAIN.npz --out finetuned",
            )
        )
    return Summary(tuple(findings), tuple(fixes), tuple(problems), notes)
