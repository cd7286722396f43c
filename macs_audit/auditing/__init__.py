"""The audit: views x predictor x accumulators -> Report.

- `options`: AuditOptions, the settings (frozen), AuditInputs, what the caller loaded for the audit, and
  RunContext, where it runs and reports;
- `classes`: how the data's classes meet the model's outputs, and the restricted convention's accumulators;
- `inference`: the inference loop (`evaluate_view`, run as a `Loop` says) and a view's section (`view_result`);
- `calibration`: the calibration split, drawn once, and the temperature, calibrators and conformal sets on it;
- `robustness`: perturbation views, sensitivity, the corruption grid and the checks of its inputs;
- `trust`: the conformal section, OOD detection and the label-free estimates;
- `shift`: the natural-shift sets and the ReaL labels;
- `parity`: a reference model scored on the same images, an observer of the inference loop;
- `pipeline`: `run_audit`, the driver that builds the Report once;
- `saved`: `audit_logits`, the audit of saved logits (the sections that need only predictions, the model audit's
  bit for bit, and shift sets and a reference as saved logits too).

`run_audit` is the function the evaluate command, `finetune` and `calibrate` (through `before_after`) call. It
never prints; progress goes to its RunContext's callback `progress(stage, done, total, terms)` (macs_audit.progress):
every piece of work that can take seconds is a stage of its own, reported when it begins (done 0) and when it
ends, so that each stage's time is its own: a view's passes over the data, each view's bootstrap intervals,
the temperature and calibrator fits, the conformal sets, the OOD and label-free analyses. The rest of the
package imports these names from `macs_audit.auditing`.
"""

from macs_audit.auditing.calibration import Split, calibration_split, check_calibration_split, conformal_fit
from macs_audit.auditing.classes import check_classes
from macs_audit.auditing.inference import Loop, evaluate_view, view_result
from macs_audit.auditing.options import (
    DEFAULT_CONTEXT,
    AuditInputs,
    AuditOptions,
    RunContext,
    default_batch_size,
    sized,
)
from macs_audit.auditing.pipeline import AuditResult, run_audit
from macs_audit.auditing.robustness import check_corruption_data, check_corruption_files, corruption_parameters
from macs_audit.auditing.saved import Companions, SavedLogits, SavedSet, audit_logits

__all__ = [
    "DEFAULT_CONTEXT",
    "AuditInputs",
    "AuditOptions",
    "AuditResult",
    "Companions",
    "Loop",
    "RunContext",
    "SavedLogits",
    "SavedSet",
    "Split",
    "audit_logits",
    "calibration_split",
    "check_calibration_split",
    "check_classes",
    "check_corruption_data",
    "check_corruption_files",
    "conformal_fit",
    "corruption_parameters",
    "default_batch_size",
    "evaluate_view",
    "run_audit",
    "sized",
    "view_result",
]
