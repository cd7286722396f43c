"""The before/after audit of `finetune` and `calibrate`: the same `run_audit` on the same data for the
model read and the model written, saved as audit_before.json, audit_after.json (Reports) and
audit_comparison.md (their `compare`, as the compare command's Markdown)."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from macs_audit.audit import AuditOptions
from macs_audit.compare import Comparison
from macs_audit.data.sources import Source
from macs_audit.distributed import SINGLE, Context
from macs_audit.report import Report

ProgressFn = Callable[..., None]
BEFORE, AFTER = "before", "after"
BEFORE_AFTER_FILES = ("audit_before.json", "audit_after.json", "audit_comparison.md")


def audit_model(
    path: Path,
    flags: dict,
    device: str,
    source: Source,
    data_info: dict,
    options: AuditOptions,
    progress: ProgressFn | None,
    trust_pickled: bool,
    label: str,
    ctx: Context = SINGLE,
    debug: bool = False,
) -> Report:
    """Load the model at `path` as `evaluate` does and audit it; progress descriptions start 'audit LABEL: '.
    `debug` lets the libraries' warnings through while the model loads."""
    from macs_audit.audit import run_audit
    from macs_audit.models.predictor import load_predictor

    predictor = load_predictor(path, flags, device=device, allow_unsafe_pickle=trust_pickled, debug=debug)

    def labelled(description: str, done: int, total: int) -> None:
        if progress is not None:
            progress(f"audit {label}: {description}", done, total)

    return run_audit(predictor, source, options, progress=labelled, data_info=data_info, ctx=ctx).report


def write_before_after(out: Path, before: Report, after: Report, title: str) -> Comparison:
    """Write the two Reports and their comparison (headed by `title`) into `out`; return the comparison."""
    from macs_audit.atomic import write_text
    from macs_audit.compare import compare
    from macs_audit.reports import markdown

    comparison = compare(before, after, BEFORE, AFTER)
    before_file, after_file, comparison_file = BEFORE_AFTER_FILES
    write_text(out / before_file, before.to_json())
    write_text(out / after_file, after.to_json())
    write_text(out / comparison_file, f"# {title}\n\n{markdown.render_comparison(comparison)}")
    return comparison
