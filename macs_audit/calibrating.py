"""`calibrate` from files to files: fit one calibrator or several on the fit data less a held-out part, keep
the best on that part if it beats the uncalibrated model there (calibrators.selection), fit it again on all
the fit data, write the model with it folded in (in the input's format family: ONNX stays ONNX), and audit
both models before and after on the evaluation data. A map that does not beat the uncalibrated model is
not written (UsageError) unless forced.

OUT receives the calibrated model (MODEL_calibrated, in MODEL's format family) with its sidecar,
calibration.json and the before/after audit (before_after). Every file is written atomically; nothing
here prints. OUT is checked before anything is loaded: none of its files may be an input (the model, its
sidecar, the data), and existing ones are replaced only with `force`. The "before" audit reads the
original model before the calibrated one is written. A run that fails after it has written leaves none of
its files, and an existing one it was to replace (--force) as it was.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import numpy as np

from macs_audit.atomic import all_or_nothing, write_text
from macs_audit.auditing import AuditOptions, Loop, RunContext, evaluate_view, sized
from macs_audit.auditing.classes import in_model_order, matching_note, matching_record
from macs_audit.before_after import (
    AFTER,
    BEFORE,
    BEFORE_AFTER_FILES,
    BeforeAfter,
    ModelLoading,
    audit_model,
    write_before_after,
)
from macs_audit.calibrators.base import LABELS, Calibrator, classes_below, fit_calibrator, shown_classes
from macs_audit.calibrators.common import log_softmax, mean_nll
from macs_audit.calibrators.held_out import Scores, contamination
from macs_audit.calibrators.selection import DEFAULT_HOLDOUT, DEFAULT_SELECT, Selection, choose_on_holdout
from macs_audit.compare import Comparison
from macs_audit.data.loading import DataSpec, load_model_data
from macs_audit.errors import UsageError
from macs_audit.inputs import run_inputs, writes_folder
from macs_audit.models.calibrated import calibration_record, write_calibrated
from macs_audit.models.export import model_files
from macs_audit.models.predictor import ONNX_SUFFIXES
from macs_audit.outputs import check_folder
from macs_audit.progress import ProgressFn
from macs_audit.report import Report
from macs_audit.settings.resolve import Resolved

CALIBRATION_FILE = "calibration.json"


CALIBRATED_SUFFIX = "_calibrated"  # OUT/MODEL_calibrated.onnx: named by what it is, not as the input


def calibrated_name(model: Path) -> str:
    """The calibrated model's stem in OUT: MODEL's, marked calibrated (the method is in its sidecar)."""
    return model.stem + CALIBRATED_SUFFIX


def output_names(model: Path) -> list[str]:
    """The files a calibration of `model` may write into OUT: the calibrated model (calibrated_name, in its
    format family: a torch input becomes .pt or .safetensors), its sidecar, calibration.json, the audits."""
    onnx = model.suffix.lower() in ONNX_SUFFIXES
    files = model_files(calibrated_name(model), torch_weights=not onnx, onnx_file=onnx)
    return [*files, CALIBRATION_FILE, *BEFORE_AFTER_FILES]


@dataclasses.dataclass
class CalibrateRun:
    calibrator: Calibrator
    model: Path  # the calibrated model in OUT
    before: Report
    after: Report
    comparison: Comparison
    title: str
    warnings: list[str] = dataclasses.field(default_factory=list)  # see held_out_warnings
    fit_warnings: list[str] = dataclasses.field(default_factory=list)  # about the fit data, shown first
    selection: Selection | None = None  # the table the calibrator was chosen by (against the uncalibrated model)
    notes: list[str] = dataclasses.field(default_factory=list)  # how the fit data's classes met the outputs


def fitted_name(calibrator: Calibrator) -> str:
    """'temperature scaling (T = 1.4190)', 'Dirichlet calibration (110 parameters)'."""
    if calibrator.method == "temperature":
        return f"{LABELS['temperature']} (T = {calibrator.describe()['parameters']['temperature']:.4f})"
    return f"{LABELS[calibrator.method]} ({calibrator.n_parameters:,} parameters)"


# Changes smaller than these are rounding, not a worse calibration.
NLL_TOLERANCE, ECE_TOLERANCE = 1e-4, 0.002


def held_out_warnings(before: Report, after: Report, fitted: str, fit_accuracy: float) -> list[str]:
    """A warning when the fitted calibrator (named `fitted`) made the evaluation data's NLL or ECE worse, with
    the likely reason: fit data the model is far more accurate on than on the evaluation data (its training set,
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
        why = "the fit data and the evaluation data differ (or the fit data is too small to fit it on)"
    return [
        f"the fitted {fitted} made the held-out metrics worse ({', '.join(worse)}): "
        f"{why}; fit on held-out data the model was not trained on, like the evaluation data"
    ]


def missing_class_warnings(labels: np.ndarray, n_classes: int) -> list[str]:
    """A one-line warning when the fit data lacks images of some classes (a class-sorted file cut short)."""
    missing = classes_below(labels, n_classes, 1)
    if not missing:
        return []
    return [
        f"the fit data has no images of class {shown_classes(missing)}: maps with parameters per class "
        "(vector, matrix, Dirichlet, isotonic, histogram) are not fitted on it; give fit data of every class"
    ]


def contamination_warnings(
    calibrator: Calibrator, before: Report, fit_accuracy: float, logits: np.ndarray, labels: np.ndarray, force: bool
) -> list[str]:
    """[] when the model's scores on the fit data show nothing (calibrators.held_out); else UsageError, or with
    `force` the warning that the map is written anyway."""
    temperature = calibrator.describe()["parameters"]["temperature"] if calibrator.method == "temperature" else None
    fit = Scores(fit_accuracy, len(labels), nll=mean_nll(log_softmax(logits), labels))
    reason = contamination(fit, Scores.clean_of(before), temperature=temperature)
    if reason is None:
        return []
    if not force:
        raise UsageError(
            f"the fit data looks trained on: {reason}; fit on held-out images the model was not trained on "
            "(--data), or write the map anyway with --force-calibration"
        )
    return [f"the fit data looks trained on: {reason}; the calibrated model is written as asked (--force-calibration)"]


def choose_calibrator(
    logits: np.ndarray,
    labels: np.ndarray,
    methods: list[str],
    select: str,
    holdout: float,
    seed: int,
    force: bool = False,
) -> tuple[Calibrator, Selection, list[str]]:
    """The map to write, the table it was chosen by, and a warning when it was forced: `methods` scored on a
    `holdout` part against the uncalibrated model and the chosen one fitted again on all of (logits, labels)
    (calibrators.selection.choose_on_holdout). When no map beats the uncalibrated model there, UsageError, or
    with `force` the best map alone (`Selection.best_map`), fitted on all of them, and the warning."""
    selection, calibrator = choose_on_holdout(logits, labels, methods, select, holdout, seed)
    if calibrator is not None:
        return calibrator, selection, []
    what = f"no calibration map beats the uncalibrated model on the held-out {selection.n_eval:,} images of --data"
    what += f" ({selection.reason})"
    more = "fit on more held-out data"
    if selection.too_few:  # the real reason: no selection split this small shows a map better or worse
        n = selection.n_fit + selection.n_eval
        what = f"{selection.too_few} ({n:,} images in --data at --holdout {holdout:g}; {selection.reason})"
        more = "give more --data (or a larger --holdout)"
    if not force:
        raise UsageError(f"{what}; nothing written: {more}, or write the best map anyway with --force-calibration")
    forced = fit_calibrator(selection.best_map, logits, labels)
    written = f"{LABELS[forced.method]} written as asked (--force-calibration)"
    return forced, selection, [f"{what}; {written}"]


@dataclasses.dataclass(frozen=True)
class CalibrateSettings:
    """How `run_calibrate` chooses and writes its map: `methods` chosen by `select` on a `holdout` part of the fit
    data against the uncalibrated model (choose_calibrator); a map that does not beat it there, or fit data that
    looks trained on, written only with `force_calibration`; existing outputs replaced only with `force`; the
    models loaded by `loading`."""

    methods: tuple[str, ...] = ("temperature",)
    select: str = DEFAULT_SELECT
    holdout: float = DEFAULT_HOLDOUT
    force_calibration: bool = False
    force: bool = False
    loading: ModelLoading = ModelLoading()


def run_calibrate(
    model: Path,
    flags: dict,
    fit: DataSpec,
    eval_data: DataSpec,
    out: Path,
    audit: AuditOptions,
    settings: CalibrateSettings = CalibrateSettings(),
    *,
    progress: ProgressFn | None = None,
) -> CalibrateRun:
    """Fit `settings.methods` on `fit` (batches of audit.batch_size; chosen on a held-out part against the
    uncalibrated model, see choose_calibrator), write the calibrated model to `out`, and audit both on
    `eval_data` with `audit`. Raises UsageError when a file of `out` would replace an input, or already exists
    and settings.force is not set, when the fit data is too small for the method, and, before anything is
    written, when no map beats the uncalibrated model on the held-out part or the fit data looks trained on
    (calibrators.held_out.contamination: the decision `finetune` makes), unless settings.force_calibration,
    which writes the map with a warning."""
    arch = flags.get("arch")
    inputs = run_inputs(models=[(model, arch)], data=[fit.path, eval_data.path])  # never replaced, --force or not
    folders = [calibrated_name(model)] if writes_folder(model, arch) else []  # a Hugging Face model's folder
    check_folder(out, output_names(model), inputs=inputs, force=settings.force, folders=folders)
    # At the audits' precision: the map is fitted on the logits it is then audited on (a UsageError, before
    # anything is fitted, for a precision the device or the model format cannot run).
    predictor = settings.loading.load(model, flags, audit.precision)
    audit = sized(audit, predictor.config)  # the fit's batches; the audits, of models of the same input, size theirs
    fit_source, fit_info = load_model_data(fit, predictor.config)
    eval_source, eval_info = load_model_data(eval_data, predictor.config)
    # Labels as output indices: classes in another order (by name) converted, a subset refused (auditing/classes.py).
    fit_source, space = in_model_order(predictor, fit_source)
    notes = [] if space.is_identity else [matching_note(space, fit_source)]
    class_matching = matching_record(space, predictor, fit_source)
    num_classes = predictor.num_classes or fit_source.num_classes
    loop = Loop(audit.batch_size, progress=progress)
    _, logits = evaluate_view(predictor, fit_source, num_classes, loop, description="fit", keep_logits=True)
    assert logits is not None
    labels = np.asarray(fit_source.labels, dtype=np.int64)
    fit_warnings = missing_class_warnings(labels, logits.shape[1])
    calibrator, selection, forced = choose_calibrator(
        logits,
        labels,
        list(settings.methods),
        settings.select,
        settings.holdout,
        fit.seed,
        settings.force_calibration,
    )
    fit_warnings += forced
    # The before and after audits, alike but for the model; the comparison's paired intervals from their outputs.
    audits = BeforeAfter(eval_source, eval_info, audit, settings.loading, RunContext(progress))
    before = audit_model(model, flags, BEFORE, audits)
    fit_warnings += contamination_warnings(
        calibrator, before, float((logits.argmax(1) == labels).mean()), logits, labels, settings.force_calibration
    )
    # What it writes lands together: a run that fails from here on (the after-audit) leaves none of it, and an
    # output it replaces (--force) comes back as it was.
    with all_or_nothing([out / file for file in [*output_names(model), *folders]]):
        out.mkdir(parents=True, exist_ok=True)
        fit_data: dict[str, Any] = {"source": fit_source.name, "n": len(fit_source), **fit_info}
        fit_data["class_matching"] = class_matching
        fit_data["n_fitted_on"] = len(labels)  # chosen on a part, then fitted on all of it
        fit_data["n_selected_on"] = selection.n_fit
        calibrated = write_calibrated(model, predictor, calibrator, out, fit_data, name=calibrated_name(model))
        after = audit_model(calibrated, {}, AFTER, audits)
        name = fitted_name(calibrator)
        warnings = held_out_warnings(before, after, name, float((logits.argmax(1) == labels).mean()))
        record = {
            **calibration_record(calibrator, fit_data),
            "fit_nll_before": mean_nll(log_softmax(logits), labels),
            "fit_nll_after": mean_nll(calibrator.transform(logits), labels),
            "model": str(model),
            "calibrated_model": calibrated.name,
            "selection": {**selection.to_dict(), "best_map": selection.best_map},  # best_map: what force writes
            "warnings": fit_warnings + warnings,
        }
        write_text(out / CALIBRATION_FILE, json.dumps(record, indent=2) + "\n")
        title = f"{name} of {model.name}: before / after on {eval_source.name}"
        comparison = write_before_after(out, before, after, title, outputs=audits.outputs)
        return CalibrateRun(
            calibrator,
            calibrated,
            before,
            after,
            comparison,
            title,
            warnings,
            selection=selection,
            fit_warnings=fit_warnings,
            notes=notes,
        )


def calibrate_resolved(r: Resolved, *, progress: ProgressFn | None = None, debug: bool = False) -> CalibrateRun:
    """`run_calibrate` of resolved calibrate options (settings/resolve.py): the calibrate command and
    `macs_audit.calibrate()` both run through here, so an option means the same in either. Every value is checked
    before the model loads; a bad one the spec set is said to come from the spec's key."""
    from macs_audit.settings.resolve import naming_the_spec

    try:
        methods, flags, audit = _parsed(r)
    except UsageError as error:
        raise naming_the_spec(error, r) from None
    settings = CalibrateSettings(
        methods=tuple(methods),
        select=r["select"],
        holdout=r["holdout"],
        force_calibration=r["force_calibration"],
        force=r["force"],
        loading=ModelLoading(r["device"], r["trust_pickled"], debug),
    )
    return run_calibrate(
        r["model"],
        flags,
        DataSpec(r["data"], r["data_format"], r["split"], r["limit"], r["seed"]),
        DataSpec(r["eval_data"], "auto", "test", r["eval_limit"], r["seed"]),
        r["out"],
        audit,
        settings,
        progress=progress,
    )


def _parsed(r: Resolved) -> tuple[list[str], dict[str, Any], AuditOptions]:
    """The methods, the model's flags and the audits' options of resolved calibrate options, each checked."""
    from macs_audit.calibrators.selection import check_holdout, check_select, parse_methods
    from macs_audit.settings.parse import model_flags, parse_audit_options

    methods = parse_methods(r["method"])
    check_select(r["select"])
    check_holdout(r["holdout"])
    flags = model_flags(
        r["arch"], r["num_classes"], r["input_size"], r["mean"], r["std"], r["output_kind"], r["crop_pct"],
        r["interpolation"],
    )  # fmt: skip
    audit = parse_audit_options(
        r["batch_size"], r["calibration_split"], r["bootstrap"], r["seed"], r["perturbations"],
        r["sensitivity_samples"], r["corruptions"], r["severities"], precision=r["precision"],
    )  # fmt: skip
    return list(methods), flags, audit
