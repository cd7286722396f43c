"""The before/after audit of `finetune` and `calibrate`: the same `run_audit` on the same data for the
model read and the model written, saved as audit_before.json, audit_after.json (Reports) and
audit_comparison.md (their `compare`, as the compare command's Markdown). `finetune` adds the fixes
side by side (start model, temperature scaling only, fine-tuned): a row each of the headline metrics,
so the user sees which fix to use (the temperature-only Report is TEMPERATURE_ONLY_FILE).

Both audits score the same images, so the comparison's clean accuracy, ECE, smooth ECE, NLL and Brier are
judged on paired bootstrap intervals of after - before (metrics.parity, the same resamples for both
models), from the two models' clean outputs (BeforeAfter.outputs, filled by audit_model)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING

from macs_audit.auditing import DEFAULT_CONTEXT, AuditOptions, RunContext
from macs_audit.compare import Comparison
from macs_audit.data.sources import Source
from macs_audit.progress import Stage, as_stage
from macs_audit.report import Report

if TYPE_CHECKING:
    from macs_audit.models.predictor import Predictor

BEFORE, AFTER, TEMPERATURE_ONLY = "before", "after", "temperature only"
BEFORE_AFTER_FILES = ("audit_before.json", "audit_after.json", "audit_comparison.md")
TEMPERATURE_ONLY_FILE = "audit_temperature_only.json"  # finetune: the Report of the temperature-only fix
# The headline metrics of the fixes table (registry names); a row appears when any report has it.
FIX_METRICS = ("accuracy", "ece", "nll", "robust_accuracy", "robust_ece", "corruption_accuracy")


@dataclasses.dataclass
class Fix:
    """One way to fix the model, and the audit of what it gives, on the same evaluation data as the others."""

    name: str
    report: Report


def fixes_table(fixes: list[Fix]) -> tuple[list[str], list[list[str]]]:
    """(header, rows of formatted cells) of the fixes side by side, laid out as the before/after table: a
    column per fix (headed by its name), a row per headline metric that any of the reports holds."""
    from macs_audit.metrics.registry import METRICS
    from macs_audit.numbers import format_value as fmt

    cells = []
    for name in FIX_METRICS:
        values = [_value(fix.report, name) for fix in fixes]  # None: not audited, "-" (or no row)
        if any(v is not None for v in values):
            metric = METRICS[name]
            cells.append([metric.title, *(fmt(v, metric.percent) for v in values)])
    return ["metric", *(fix.name for fix in fixes)], cells


# Which fix won, one rule on the fixes table's own numbers: the scores below, each in its registry direction
# (clean accuracy; clean NLL, a proper score that rewards accuracy and calibration together; robust accuracy
# where every fix was audited under perturbation), compared as the table prints them, so that a difference
# the table does not show is a tie; a tie goes to the simpler fix, the earlier column. The fix best on every
# score wins; where the scores disagree, none does and each score's best fixes are named.
WINNER_METRICS = ("accuracy", "nll", "robust_accuracy")


@dataclasses.dataclass(frozen=True)
class WhichFix:
    """The outcome of the rule above: `winner` (None where the scores disagree) and, per score, its shown best
    value and the fixes that reach it, in column order."""

    winner: Fix | None
    best: dict[str, tuple[str, list[Fix]]]  # metric -> (its best value as the table shows it, the fixes at it)

    def describe(self) -> str:
        """`temperature scaling only, T = 1.341 wins (clean accuracy 89.37%, ...): ITS MODEL`, or each score's best."""
        from macs_audit.metrics.registry import METRICS

        scores = [(METRICS[name].title, shown, fixes) for name, (shown, fixes) in self.best.items()]
        if self.winner is not None:
            model = f": {self.winner.report.model.path}" if self.winner.report.model.path else ""
            return f"{self.winner.name} wins ({', '.join(f'{title} {shown}' for title, shown, _ in scores)}){model}"
        each = "; ".join(f"{title}: {' = '.join(f.name for f in fixes)} ({shown})" for title, shown, fixes in scores)
        return f"no fix wins on every score ({each})"


def which_fix(fixes: list[Fix]) -> WhichFix | None:
    """Which of `fixes` won (WINNER_METRICS' rule); None where no score is in every fix's report."""
    from macs_audit.metrics.registry import METRICS
    from macs_audit.numbers import format_value, shown_value

    best: dict[str, tuple[str, list[Fix]]] = {}
    for name in WINNER_METRICS:
        metric = METRICS[name]
        values = [_value(fix.report, name) for fix in fixes]
        if not fixes or any(v is None for v in values):
            continue
        shown = [format_value(v, metric.percent) for v in values]
        key = [shown_value(v, metric.percent) for v in values if v is not None]  # the digits shown, as numbers
        top = max(key) if metric.higher_is_better else min(key)
        best[name] = (shown[key.index(top)], [fix for fix, k in zip(fixes, key, strict=True) if k == top])
    if not best:
        return None
    winners = [fix for fix in fixes if all(any(fix is f for f in at) for _, at in best.values())]
    return WhichFix(winners[0] if winners else None, best)


def _value(report: Report, name: str) -> float | None:
    """Registry metric `name` of `report`, None where it was not audited (e.g. no corruption grid)."""
    from macs_audit.errors import MacsAuditError
    from macs_audit.gating import observe

    try:
        return observe(report, name)[0]
    except MacsAuditError:
        return None


@dataclasses.dataclass(frozen=True)
class ModelLoading:
    """How a run loads its models, as `evaluate` does: on `device`, a pickled checkpoint only with `trust_pickled`,
    the libraries' warnings let through with `debug`."""

    device: str = "auto"
    trust_pickled: bool = False
    debug: bool = False

    def load(self, path: Path, flags: dict, precision: str = "fp32") -> Predictor:
        """The predictor of the model at `path` (its `flags`: --arch, --num-classes, ...) at `precision`."""
        from macs_audit.models.predictor import load_predictor

        return load_predictor(
            path,
            flags,
            device=self.device,
            allow_unsafe_pickle=self.trust_pickled,
            debug=self.debug,
            precision=precision,
        )


@dataclasses.dataclass(frozen=True)
class BeforeAfter:
    """What the before/after audits share: every model loaded by `loading` (at `options.precision`) and audited
    with `options` on the same `source` (`data_info`: its report's data section's additions), in `context`.
    `outputs` gets each audit's LABEL -> (clean logits, labels), for write_before_after's paired intervals."""

    source: Source
    data_info: dict
    options: AuditOptions
    loading: ModelLoading = ModelLoading()
    context: RunContext = DEFAULT_CONTEXT
    outputs: dict = dataclasses.field(default_factory=dict)


def audit_model(path: Path, flags: dict, label: str, audits: BeforeAfter) -> Report:
    """Load the model at `path` (its `flags`) and audit it as `audits` says; progress descriptions start
    'audit LABEL: ', and audits.outputs gets its clean outputs under LABEL."""
    from macs_audit.auditing import run_audit

    predictor = audits.loading.load(path, flags, audits.options.precision)
    progress = audits.context.progress

    def labelled(stage: Stage | str, done: int, total: int, terms: dict[str, float] | None = None, /) -> None:
        if progress is not None:
            progress(as_stage(stage).prefixed(f"audit {label}: "), done, total, terms)

    context = dataclasses.replace(audits.context, progress=labelled)
    result = run_audit(predictor, audits.source, audits.options, data_info=audits.data_info, context=context)
    audits.outputs[label] = (result.logits, result.labels)
    return result.report


def paired_intervals(before: Report, after: Report, outputs: dict | None) -> dict[str, list[float]]:
    """Row key -> the paired 95% bootstrap interval of after - before for the clean metrics both audits
    resampled, from the two models' clean outputs on the same images; {} without them."""
    import numpy as np

    from macs_audit.metrics.accumulators import CalibrationAccumulator
    from macs_audit.metrics.parity import metric_differences

    if not outputs or BEFORE not in outputs or AFTER not in outputs:
        return {}
    (logits_a, labels_a), (logits_b, labels_b) = outputs[BEFORE], outputs[AFTER]
    if logits_a.shape != logits_b.shape or not np.array_equal(labels_a, labels_b):
        return {}  # not the same images
    accumulators = []
    for logits in (logits_a, logits_b):
        acc = CalibrationAccumulator(logits.shape[1])
        acc.update(logits, labels_a)
        accumulators.append(acc)
    resamples = before.conventions.bootstrap_resamples or 0
    seed = int(before.seeds.get("bootstrap", 0)) if isinstance(before.seeds, dict) else 0
    differences, _ = metric_differences(accumulators[0], accumulators[1], resamples, seed)
    return {name: d["interval"] for name, d in differences.items() if d["interval"] is not None}


def write_before_after(
    out: Path,
    before: Report,
    after: Report,
    title: str,
    fixes: list[Fix] | None = None,
    outputs: dict | None = None,
) -> Comparison:
    """Write the two Reports and their comparison (headed by `title`) into `out`; return the comparison.
    With `fixes` (finetune), the comparison starts with the fixes table; with `outputs` (audit_model's), its
    clean metrics are judged on paired intervals."""
    from macs_audit.atomic import write_text
    from macs_audit.compare import compare
    from macs_audit.formats import markdown

    comparison = compare(before, after, BEFORE, AFTER, paired=paired_intervals(before, after, outputs))
    before_file, after_file, comparison_file = BEFORE_AFTER_FILES
    write_text(out / before_file, before.to_json())
    write_text(out / after_file, after.to_json())
    text = f"# {title}\n\n"
    if fixes:
        header, rows = fixes_table(fixes)
        text += "## Which fix\n\n" + "\n".join(markdown.table(header, rows)) + "\n\n"
        won = which_fix(fixes)
        text += f"{markdown.esc(won.describe())}.\n\n" if won is not None else ""
        text += "## Before / after\n\n"
    write_text(out / comparison_file, text + markdown.render_comparison(comparison))
    return comparison
