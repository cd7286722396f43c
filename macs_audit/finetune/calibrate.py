"""Temperature scaling from files to files: fit T on held-out data, write the model with T folded in (in the
input's format family: ONNX stays ONNX), and audit both models before and after on the evaluation data.

OUT receives the calibrated model (MODEL's file name) with its sidecar, temperature.json and the
before/after audit (finetune.audits). Every file is written atomically; nothing here prints.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from macs_audit.atomic import write_text
from macs_audit.audit import AuditOptions, check_classes, evaluate_view
from macs_audit.calibrators.temperature import fit_temperature, temperature_nll
from macs_audit.compare import Comparison
from macs_audit.data.loading import DataSpec, load_data
from macs_audit.finetune.audits import AFTER, BEFORE, ProgressFn, audit_model, write_before_after
from macs_audit.models.predictor import load_predictor
from macs_audit.models.temperature import write_calibrated
from macs_audit.report import Report


@dataclasses.dataclass
class CalibrateRun:
    temperature: float
    model: Path  # the calibrated model in OUT
    before: Report
    after: Report
    comparison: Comparison
    title: str


def run_calibrate(
    model: Path,
    flags: dict,
    fit: DataSpec,
    eval_data: DataSpec,
    out: Path,
    audit: AuditOptions,
    *,
    device: str = "auto",
    trust_pickled: bool = False,
    progress: ProgressFn | None = None,
) -> CalibrateRun:
    """Fit the temperature of `model` on `fit` (batches of audit.batch_size), write the calibrated model to
    `out`, and audit both on `eval_data` with `audit`."""
    predictor = load_predictor(model, flags, device=device, allow_unsafe_pickle=trust_pickled)
    image_size = predictor.config.input_size
    fit_source, fit_info = load_data(fit, image_size)
    eval_source, eval_info = load_data(eval_data, image_size)
    k = check_classes(predictor, fit_source)
    _, logits = evaluate_view(
        predictor, fit_source, k, audit.batch_size, progress=progress, description="fit", keep_logits=True
    )
    t = fit_temperature(logits, fit_source.labels)
    out.mkdir(parents=True, exist_ok=True)
    calibrated = write_calibrated(model, predictor, t, out)
    before = audit_model(model, flags, device, eval_source, eval_info, audit, progress, trust_pickled, BEFORE)
    after = audit_model(calibrated, {}, device, eval_source, eval_info, audit, progress, trust_pickled, AFTER)
    write_text(
        out / "temperature.json",
        json.dumps(
            {
                "temperature": t,
                "fit_data": {"source": fit_source.name, "n": len(fit_source), **fit_info},
                "fit_nll_before": temperature_nll(logits, fit_source.labels, 1.0),
                "fit_nll_after": temperature_nll(logits, fit_source.labels, t),
                "model": str(model),
                "calibrated_model": calibrated.name,
            },
            indent=2,
        )
        + "\n",
    )
    title = f"temperature scaling of {model.name} (T = {t:.4f}): before / after on {eval_source.name}"
    comparison = write_before_after(out, before, after, title)
    return CalibrateRun(t, calibrated, before, after, comparison, title)
