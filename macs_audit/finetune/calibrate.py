"""Temperature scaling from files to files: fit T on held-out data, write the model with T folded in (in the
input's format family: ONNX stays ONNX), and audit both models before and after on the evaluation data.

OUT receives the calibrated model (MODEL's file name) with its sidecar, temperature.json and the
before/after audit (finetune.audits). Every file is written atomically; nothing here prints. OUT is
checked before anything is loaded: none of its files may be an input (the model, its sidecar, the
data), and existing ones are replaced only with `force`. The "before" audit reads the original
model before the calibrated one is written.
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
from macs_audit.finetune.audits import AFTER, BEFORE, BEFORE_AFTER_FILES, ProgressFn, audit_model, write_before_after
from macs_audit.models.config import sidecar_path
from macs_audit.models.predictor import ONNX_SUFFIXES, load_predictor
from macs_audit.models.temperature import write_calibrated
from macs_audit.outputs import check_folder
from macs_audit.report import Report

TEMPERATURE_FILE = "temperature.json"


def output_names(model: Path) -> list[str]:
    """The files a calibration of `model` may write into OUT: the calibrated model (MODEL's stem, in its
    format family: a torch input becomes .pt or .safetensors), its sidecar, temperature.json, the audits."""
    suffixes = [".onnx"] if model.suffix.lower() in ONNX_SUFFIXES else [".pt", ".safetensors"]
    return [*(model.stem + suffix for suffix in suffixes), f"{model.stem}.json", TEMPERATURE_FILE, *BEFORE_AFTER_FILES]


@dataclasses.dataclass
class CalibrateRun:
    temperature: float
    model: Path  # the calibrated model in OUT
    before: Report
    after: Report
    comparison: Comparison
    title: str
    warnings: list[str] = dataclasses.field(default_factory=list)  # see held_out_warnings


# Changes smaller than these are rounding, not a worse calibration.
NLL_TOLERANCE, ECE_TOLERANCE = 1e-4, 0.002


def held_out_warnings(before: Report, after: Report, temperature: float, fit_accuracy: float) -> list[str]:
    """A warning when the fitted temperature made the evaluation data's NLL or ECE worse, with the likely
    reason: fit data the model is far more accurate on than on the evaluation data (its training set,
    where it is sure and right) teaches it to be surer still; else the two data sets differ."""
    worse = []
    for name, label, tolerance, percent in (("nll", "NLL", NLL_TOLERANCE, False), ("ece", "ECE", ECE_TOLERANCE, True)):
        a, b = before.clean.metrics.get(name), after.clean.metrics.get(name)
        if a is not None and b is not None and b > a + tolerance:
            worse.append(f"{label} {100 * a:.2f}% -> {100 * b:.2f}%" if percent else f"{label} {a:.4f} -> {b:.4f}")
    if not worse:
        return []
    eval_accuracy = before.clean.metrics.get("accuracy")
    if eval_accuracy is not None and fit_accuracy > eval_accuracy + 0.02:
        why = (
            f"the model is {100 * fit_accuracy:.1f}% accurate on the fit data but {100 * eval_accuracy:.1f}% on the "
            "evaluation data, as on data it was trained on, so the fit makes it surer than it should be elsewhere"
        )
    else:
        why = "the fit data and the evaluation data differ (or the fit data is too small to fit T on)"
    return [
        f"the fitted temperature (T = {temperature:.4f}) made the held-out metrics worse ({', '.join(worse)}): "
        f"{why}; fit on held-out data the model was not trained on, like the evaluation data"
    ]


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
    force: bool = False,
    debug: bool = False,
) -> CalibrateRun:
    """Fit the temperature of `model` on `fit` (batches of audit.batch_size), write the calibrated model to
    `out`, and audit both on `eval_data` with `audit`. Raises UsageError when a file of `out` would replace
    an input, or already exists and `force` is not set. `debug` lets the libraries' warnings through while
    models load."""
    inputs = (model, sidecar_path(model), fit.path, eval_data.path)
    check_folder(out, output_names(model), inputs=inputs, force=force)
    predictor = load_predictor(model, flags, device=device, allow_unsafe_pickle=trust_pickled, debug=debug)
    image_size = predictor.config.input_size
    fit_source, fit_info = load_data(fit, image_size)
    eval_source, eval_info = load_data(eval_data, image_size)
    k = check_classes(predictor, fit_source)
    _, logits = evaluate_view(
        predictor, fit_source, k, audit.batch_size, progress=progress, description="fit", keep_logits=True
    )
    t = fit_temperature(logits, fit_source.labels)
    before = audit_model(
        model, flags, device, eval_source, eval_info, audit, progress, trust_pickled, BEFORE, debug=debug
    )
    out.mkdir(parents=True, exist_ok=True)
    calibrated = write_calibrated(model, predictor, t, out)
    after = audit_model(
        calibrated, {}, device, eval_source, eval_info, audit, progress, trust_pickled, AFTER, debug=debug
    )
    warnings = held_out_warnings(before, after, t, float((logits.argmax(1) == fit_source.labels).mean()))
    write_text(
        out / TEMPERATURE_FILE,
        json.dumps(
            {
                "temperature": t,
                "fit_data": {"source": fit_source.name, "n": len(fit_source), **fit_info},
                "fit_nll_before": temperature_nll(logits, fit_source.labels, 1.0),
                "fit_nll_after": temperature_nll(logits, fit_source.labels, t),
                "model": str(model),
                "calibrated_model": calibrated.name,
                "warnings": warnings,
            },
            indent=2,
        )
        + "\n",
    )
    title = f"temperature scaling of {model.name} (T = {t:.4f}): before / after on {eval_source.name}"
    comparison = write_before_after(out, before, after, title)
    return CalibrateRun(t, calibrated, before, after, comparison, title, warnings)
