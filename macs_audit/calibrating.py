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

Two more ways in, with no second copy of the above: `calibrate_predictions` fits on a prediction file's scores and
writes the portable map (OUT/calibration_map.json, calibrators/portable.py) with no model and no torch;
`fold_calibration_map` folds such a map into a model instead of fitting one, then writes and audits as above.
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
from macs_audit.calibrators.portable import calibration_map, read_calibration_map
from macs_audit.calibrators.selection import DEFAULT_HOLDOUT, DEFAULT_SELECT, Selection, choose_on_holdout
from macs_audit.compare import Comparison
from macs_audit.data.loading import DataSpec, load_model_data
from macs_audit.errors import UsageError
from macs_audit.inputs import run_inputs, writes_folder
from macs_audit.models.calibrated import calibration_record, write_calibrated
from macs_audit.models.export import model_files
from macs_audit.models.predictor import ONNX_SUFFIXES
from macs_audit.outputs import check_folder
from macs_audit.pixels import to_unit_float
from macs_audit.predictions.files import LABEL_COLUMN, read_predictions
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
    map: Path | None = None  # the calibration map folded in (--map), in place of a fit


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
    fit = Scores(fit_accuracy, len(labels), nll=mean_nll(log_softmax(logits), labels))
    return fit_data_warnings(calibrator, before, fit, force)


def fit_data_warnings(calibrator: Calibrator, before: Report, fit: Scores, force: bool) -> list[str]:
    """contamination_warnings of the model's `fit` scores (a map's record of them, where it was fitted elsewhere)."""
    temperature = calibrator.describe()["parameters"]["temperature"] if calibrator.method == "temperature" else None
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
    fit_option: str = "--data",
) -> tuple[Calibrator, Selection, list[str]]:
    """The map to write, the table it was chosen by, and a warning when it was forced: `methods` scored on a
    `holdout` part against the uncalibrated model and the chosen one fitted again on all of (logits, labels)
    (calibrators.selection.choose_on_holdout). When no map beats the uncalibrated model there, UsageError, or
    with `force` the best map alone (`Selection.best_map`), fitted on all of them, and the warning. `fit_option`:
    the option the messages name for the fit data."""
    selection, calibrator = choose_on_holdout(logits, labels, methods, select, holdout, seed)
    if calibrator is not None:
        return calibrator, selection, []
    what = (
        f"no calibration map beats the uncalibrated model on the held-out {selection.n_eval:,} images of {fit_option}"
    )
    what += f" ({selection.reason})"
    more = "fit on more held-out data"
    if selection.too_few:  # the real reason: no selection split this small shows a map better or worse
        n = selection.n_fit + selection.n_eval
        what = f"{selection.too_few} ({n:,} images in {fit_option} at --holdout {holdout:g}; {selection.reason})"
        more = f"give more {fit_option} (or a larger --holdout)"
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
    folders = _check_out(model, arch, out, inputs, settings.force)
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
    accuracy = float((logits.argmax(1) == labels).mean())
    fit_warnings += contamination_warnings(calibrator, before, accuracy, logits, labels, settings.force_calibration)
    fit_data: dict[str, Any] = {"source": fit_source.name, "n": len(fit_source), **fit_info}
    fit_data["class_matching"] = class_matching
    fit_data["n_fitted_on"] = len(labels)  # chosen on a part, then fitted on all of it
    fit_data["n_selected_on"] = selection.n_fit
    fitted = _Fitted(
        calibrator,
        fit_data,
        accuracy,
        mean_nll(log_softmax(logits), labels),
        mean_nll(calibrator.transform(logits), labels),
        {**selection.to_dict(), "best_map": selection.best_map},  # best_map: what force writes
        fit_warnings,
    )
    run = _write_and_audit(model, predictor, fitted, out, folders, audits, before)
    run.selection, run.notes = selection, notes
    return run


def _check_out(model: Path, arch: str | None, out: Path, inputs: tuple, force: bool) -> list[str]:
    """Check OUT for what a calibration of `model` writes (output_names) before anything loads; the folders it
    writes whole (a Hugging Face model's), which are returned."""
    folders = [calibrated_name(model)] if writes_folder(model, arch) else []
    check_folder(out, output_names(model), inputs=inputs, force=force, folders=folders)
    return folders


@dataclasses.dataclass(frozen=True)
class _Fitted:
    """A calibrator to write into a model and the record of its fit: `fit_data` (the written model's metadata and
    calibration.json keep it), the model's accuracy and mean NLL on the fit data (before and after the map; None
    where not known), the selection it was chosen by, the fit's warnings, and `origin`: calibration.json's
    entries on where the map came from."""

    calibrator: Calibrator
    fit_data: dict[str, Any]
    accuracy: float | None
    nll_before: float | None
    nll_after: float | None
    selection: dict[str, Any] | None
    warnings: list[str]
    origin: dict[str, Any] = dataclasses.field(default_factory=dict)


def _write_and_audit(
    model: Path, predictor: Any, fitted: _Fitted, out: Path, folders: list[str], audits: BeforeAfter, before: Report
) -> CalibrateRun:
    """What run_calibrate and fold_calibration_map share once the calibrator is known and `before` audited: the
    calibrated model written to `out` (write_calibrated, MODEL's format family), audited as `before` was,
    calibration.json and the before/after audit. What it writes lands together: a run that fails from here on (the
    after-audit) leaves none of it, and an output it replaces (--force) comes back as it was."""
    calibrator = fitted.calibrator
    with all_or_nothing([out / file for file in [*output_names(model), *folders]]):
        out.mkdir(parents=True, exist_ok=True)
        calibrated = write_calibrated(model, predictor, calibrator, out, fitted.fit_data, name=calibrated_name(model))
        after = audit_model(calibrated, {}, AFTER, audits)
        name = fitted_name(calibrator)
        # An accuracy not known (a map written elsewhere) compares as NaN: the warning then names no training data.
        accuracy = fitted.accuracy if fitted.accuracy is not None else float("nan")
        warnings = held_out_warnings(before, after, name, accuracy)
        record = {
            **calibration_record(calibrator, fitted.fit_data),
            "fit_nll_before": fitted.nll_before,
            "fit_nll_after": fitted.nll_after,
            "model": str(model),
            **fitted.origin,
            "calibrated_model": calibrated.name,
            "selection": fitted.selection,
            "warnings": fitted.warnings + warnings,
        }
        write_text(out / CALIBRATION_FILE, json.dumps(record, indent=2) + "\n")
        title = f"{name} of {model.name}: before / after on {audits.source.name}"
        comparison = write_before_after(out, before, after, title, outputs=audits.outputs)
        return CalibrateRun(
            calibrator, calibrated, before, after, comparison, title, warnings, fit_warnings=fitted.warnings
        )


def fold_calibration_map(
    model: Path,
    flags: dict,
    map_path: Path,
    eval_data: DataSpec,
    out: Path,
    audit: AuditOptions,
    settings: CalibrateSettings = CalibrateSettings(),
    *,
    progress: ProgressFn | None = None,
) -> CalibrateRun:
    """`run_calibrate` with the calibrator read from a calibration map (`calibrate --predictions`'s,
    calibrators/portable.py) in place of a fit: the map folded into `model` and written to `out`, both models audited
    on `eval_data`; calibration.json records the map (`map`) and its fit. InputError for a file that is not a map, or a
    map that does not fit the model (CalibrationMap.check_model: its classes, the kind of scores it reads), before
    anything is written; the fit data looks trained on (by the map's record of the model's scores there, against
    the evaluation data): UsageError unless settings.force_calibration, as run_calibrate."""
    arch = flags.get("arch")
    inputs = run_inputs(models=[(model, arch)], data=[eval_data.path], files=[map_path])
    folders = _check_out(model, arch, out, inputs, settings.force)
    fitted_map = read_calibration_map(map_path)
    predictor = settings.loading.load(model, flags, audit.precision)
    audit = sized(audit, predictor.config)
    eval_source, eval_info = load_model_data(eval_data, predictor.config)
    # One batch through the model: its output count, and whether it outputs logits or probabilities (detected on
    # the first batch where not declared), which the written model's map reads as run_calibrate's fit pass would.
    first = eval_source.images(np.arange(min(audit.batch_size, len(eval_source))))
    outputs = predictor.predict(to_unit_float(first))
    fitted_map.check_model(str(model), outputs.shape[1], predictor.config.class_names, predictor.output.kind)
    calibrator, fit = fitted_map.calibrator, dict(fitted_map.record.get("fit") or {})
    accuracy, nll_before, nll_after = (_known(fit.get(key)) for key in ("accuracy", "nll_before", "nll_after"))
    fit_warnings = list(fitted_map.record.get("warnings", []))  # the map's fit's (forced, classes missing)
    audits = BeforeAfter(eval_source, eval_info, audit, settings.loading, RunContext(progress))
    before = audit_model(model, flags, BEFORE, audits)
    fit_scores = Scores(accuracy, calibrator.fit_size, nll=nll_before)
    fit_warnings += fit_data_warnings(calibrator, before, fit_scores, settings.force_calibration)
    fitted = _Fitted(
        calibrator,
        {**fit, "map": Path(map_path).name},
        accuracy,
        nll_before,
        nll_after,
        fitted_map.record.get("selection"),
        fit_warnings,
        origin={"map": str(map_path)},
    )
    run = _write_and_audit(model, predictor, fitted, out, folders, audits, before)
    run.map = Path(map_path)
    fitted_on = f"fitted on {calibrator.fit_size:,} predictions" + (f" of {fit['source']}" if "source" in fit else "")
    run.notes = [f"the calibration map {map_path} ({fitted_on}) folded into {model.name}, in place of a fit"]
    return run


def _known(value: Any) -> float | None:
    """A map's record of a score: a number, or None where it has none."""
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


MAP_FILE = "calibration_map.json"  # what calibrate --predictions writes into OUT


@dataclasses.dataclass
class MapRun:
    """What `calibrate --predictions` fitted and wrote: the calibrator, the map's path and its JSON, the table it
    was chosen by, and the fit's warnings (in the map too)."""

    calibrator: Calibrator
    path: Path
    map: dict[str, Any]
    selection: Selection
    warnings: list[str]


def calibrate_predictions(
    predictions: Path,
    out: Path,
    settings: CalibrateSettings = CalibrateSettings(),
    *,
    seed: int = 0,
    label_column: str = LABEL_COLUMN,
) -> MapRun:
    """Fit `settings.methods` on a prediction file's scores and labels (predictions.files.read_predictions: an .npz,
    .csv or .parquet of logits or probabilities; `label_column`: a table's label column), chosen as run_calibrate
    chooses (choose_calibrator: on a `settings.holdout` part drawn with `seed`, against the uncalibrated scores, a
    map written only where it beats them unless settings.force_calibration), and write the portable calibration map
    to OUT/calibration_map.json (calibrators/portable.py), atomically. No model, no torch. UsageError when the map
    would replace an input, or exists and settings.force is not set, and as choose_calibrator; InputError for a file
    that is not predictions with labels. Nothing is written on an error."""
    predictions, out = Path(predictions), Path(out)
    check_folder(out, [MAP_FILE], inputs=run_inputs(files=[predictions]), force=settings.force)
    found = read_predictions(predictions, labels=True, label_column=label_column)
    logits, labels = found.logits, found.labels
    assert labels is not None  # read_predictions requires them
    warnings = missing_class_warnings(labels, found.num_classes)
    calibrator, selection, forced = choose_calibrator(
        logits,
        labels,
        list(settings.methods),
        settings.select,
        settings.holdout,
        seed,
        settings.force_calibration,
        fit_option="--predictions",
    )
    warnings += forced
    fit = {
        "source": predictions.name,
        "n": len(found),
        "n_fitted_on": len(labels),  # chosen on a part, then fitted on all of it
        "n_selected_on": selection.n_fit,
        "accuracy": float((logits.argmax(1) == labels).mean()),
        "nll_before": mean_nll(log_softmax(logits), labels),
        "nll_after": mean_nll(calibrator.transform(logits), labels),
    }
    record = calibration_map(
        calibrator,
        class_names=found.class_names,
        input_kind=found.kind,
        binary=found.binary,
        selection={**selection.to_dict(), "best_map": selection.best_map},
        fit=fit,
        warnings=warnings,
    )
    out.mkdir(parents=True, exist_ok=True)
    write_text(out / MAP_FILE, json.dumps(record, indent=2) + "\n")
    return MapRun(calibrator, out / MAP_FILE, record, selection, warnings)


def calibrate_resolved(r: Resolved, *, progress: ProgressFn | None = None, debug: bool = False) -> CalibrateRun:
    """The model calibration resolved calibrate options (settings/resolve.py) ask for: `run_calibrate` (MODEL fitted
    on --data) or `fold_calibration_map` (MODEL and --map). The calibrate command and `macs_audit.calibrate()` both
    run through here, so an option means the same in either. Every value is checked before the model loads; a bad
    one the spec set is said to come from the spec's key. --predictions is calibrate_predictions_resolved's."""
    from macs_audit.settings.resolve import naming_the_spec

    try:
        _check_sources(r)
        if r["predictions"] is not None:
            raise UsageError("--predictions writes a calibration map, not a model: leave MODEL out")
        methods, flags, audit = _parsed(r)
    except UsageError as error:
        raise naming_the_spec(error, r) from None
    settings = _settings(r, methods, debug)
    eval_data = DataSpec(r["eval_data"], "auto", "test", r["eval_limit"], r["seed"])
    if r["map"] is not None:
        return fold_calibration_map(
            r["model"], flags, r["map"], eval_data, r["out"], audit, settings, progress=progress
        )
    return run_calibrate(
        r["model"],
        flags,
        DataSpec(r["data"], r["data_format"], r["split"], r["limit"], r["seed"]),
        eval_data,
        r["out"],
        audit,
        settings,
        progress=progress,
    )


def calibrate_predictions_resolved(r: Resolved) -> MapRun:
    """`calibrate_predictions` of resolved calibrate options with --predictions (and no MODEL, --map or --data),
    as calibrate_resolved checks them: what `calibrate --predictions` runs."""
    from macs_audit.settings.resolve import naming_the_spec

    try:
        _check_sources(r)
        if r["predictions"] is None:
            raise UsageError("give --predictions FILE, the saved predictions to fit a calibration map on")
        methods = _methods(r)
    except UsageError as error:
        raise naming_the_spec(error, r) from None
    settings = _settings(r, methods)
    return calibrate_predictions(r["predictions"], r["out"], settings, seed=r["seed"], label_column=r["label_column"])


def _settings(r: Resolved, methods: list[str], debug: bool = False) -> CalibrateSettings:
    return CalibrateSettings(
        methods=tuple(methods),
        select=r["select"],
        holdout=r["holdout"],
        force_calibration=r["force_calibration"],
        force=r["force"],
        loading=ModelLoading(r["device"], r["trust_pickled"], debug),
    )


def _check_sources(r: Resolved) -> None:
    """One calibration asked for: MODEL fitted on --data, MODEL with --map, or --predictions alone (UsageError)."""
    model, predictions, folded, data = r["model"], r["predictions"], r["map"], r["data"]
    if predictions is not None and folded is not None:
        raise UsageError(
            "--map and --predictions do not go together: --predictions writes a calibration map, --map folds one "
            "into MODEL"
        )
    if predictions is not None and model is not None:
        raise UsageError(
            "give MODEL or --predictions, not both: --predictions fits a calibration map with no model (fold it "
            "into MODEL afterwards with --map)"
        )
    if folded is not None and model is None:
        raise UsageError("--map folds a calibration map into a model: give MODEL")
    if model is None and predictions is None:
        raise UsageError(
            "give MODEL (with --data, the fit data, or --map) to calibrate a model, or --predictions FILE to fit "
            "a calibration map on saved predictions"
        )
    for option, given, why in (
        ("--predictions", predictions, "the predictions are the fit data"),
        ("--map", folded, "the map is fitted already; --eval-data is what the audits read"),
    ):
        if given is not None and data is not None:
            raise UsageError(f"--data is not read with {option} ({why}); leave it out")
    if model is not None and folded is None and data is None:
        raise UsageError("give --data, or data in the spec's calibrate table")  # as the resolver says it


def _methods(r: Resolved) -> list[str]:
    """The methods, and the choice among them, of resolved calibrate options, each checked."""
    from macs_audit.calibrators.selection import check_holdout, check_select, parse_methods

    methods = parse_methods(r["method"])
    check_select(r["select"])
    check_holdout(r["holdout"])
    return list(methods)


def _parsed(r: Resolved) -> tuple[list[str], dict[str, Any], AuditOptions]:
    """The methods, the model's flags and the audits' options of resolved calibrate options, each checked."""
    from macs_audit.settings.parse import model_flags, parse_audit_options

    methods = _methods(r)
    flags = model_flags(
        r["arch"], r["num_classes"], r["input_size"], r["mean"], r["std"], r["output_kind"], r["crop_pct"],
        r["interpolation"],
    )  # fmt: skip
    audit = parse_audit_options(
        r["batch_size"], r["calibration_split"], r["bootstrap"], r["seed"], r["perturbations"],
        r["sensitivity_samples"], r["corruptions"], r["severities"], precision=r["precision"],
    )  # fmt: skip
    return methods, flags, audit
