"""The audit: views x predictor x accumulators -> Report.

- `options`: AuditOptions, frozen;
- `runner`: the inference loop (`evaluate_view`) and a view's section (`view_result`);
- `calibration`: the calibration split, drawn once, and the temperature, calibrators and conformal sets on it;
- `robustness`: perturbation views, sensitivity, the corruption grid and the checks of its inputs;
- `trust`: the conformal section, OOD detection and the label-free estimates;
- `run`: `run_audit`, the driver that builds the Report once.

`run_audit` is the function the evaluate command, `finetune` and `calibrate` (through `before_after`) call. It
never prints; progress goes to an optional callback `progress(stage, done, total, terms)` (macs_audit.progress):
every piece of work that can take seconds is a stage of its own, reported when it begins (done 0) and when it
ends, so that each stage's time is its own: a view's passes over the data, each view's bootstrap intervals,
the temperature and calibrator fits, the conformal sets, the OOD and label-free analyses. The rest of the
package imports these names from `macs_audit.audit`.
"""

from macs_audit.audit.calibration import Split, calibration_split, check_calibration_split, conformal_fit
from macs_audit.audit.classes import check_classes
from macs_audit.audit.inference import evaluate_view, view_result
from macs_audit.audit.options import AuditOptions, default_batch_size, sized
from macs_audit.audit.pipeline import AuditResult, run_audit
from macs_audit.audit.robustness import check_corruption_data, check_corruption_files, corruption_parameters

__all__ = [
    "AuditOptions",
    "AuditResult",
    "Split",
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
