"""The Python API (docs/api.md): audit predictions, gate a report, save and render it.

    import macs_audit

    report = macs_audit.audit_predictions(logits, labels, bootstrap=200)
    print(report.clean.metrics["ece"])
    report.save("report.html")

Every function returns values and raises `macs_audit.errors` exceptions with one-line messages: UsageError (bad
options or configuration), InputError (an input that cannot be read or used), OutputError (a file that cannot be
written). Nothing here prints or exits. The package's root serves these names (macs_audit/__init__.py).
"""

from __future__ import annotations

import dataclasses
import difflib
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from macs_audit import formats
from macs_audit import report as schema
from macs_audit.errors import InputError, MacsAuditError, OutputError, UsageError
from macs_audit.gating import GateResult

if TYPE_CHECKING:
    from macs_audit.auditing import AuditOptions
    from macs_audit.data.sources import Source
    from macs_audit.progress import ProgressFn

__all__ = [
    "GateResult",
    "InputError",
    "MacsAuditError",
    "OutputError",
    "Report",
    "UsageError",
    "audit",
    "apply_calibration",
    "audit_predictions",
    "calibrate",
    "calibrate_predictions",
    "gate",
    "load_report",
]


class Report(schema.Report):
    """A report (the schema: macs_audit.report.Report, docs/report-schema.md) that saves and renders itself.

    It is a macs_audit.report.Report (isinstance holds, and every function that takes one takes it) with the same
    fields and JSON; `Report.of(report)` makes one of a plain Report. The values are fields: `report.clean.metrics`
    (metric name -> value, e.g. "ece", "accuracy", "nll"), `report.clean.intervals` (name -> [low, high] of the 95%
    bootstrap interval), `report.temperature_scaling`, `report.views`, and the sections docs/report-schema.md lists.
    """

    @classmethod
    def of(cls, report: schema.Report) -> Report:
        """`report` as an API Report (itself where it is one already): the same field values, not copies."""
        if isinstance(report, cls):
            return report
        return cls(**{field.name: getattr(report, field.name) for field in dataclasses.fields(report)})

    def to_json(self, gate: GateResult | None = None) -> str:
        """The report's JSON (docs/report-schema.md), with the gate's results under "gate" where `gate` is given."""
        return formats.render("json", self, gate)

    def to_html(self, gate: GateResult | None = None) -> str:
        """A self-contained HTML page of the report (and of the gate's checks where given)."""
        return formats.render("html", self, gate)

    def to_markdown(self, gate: GateResult | None = None) -> str:
        """The report as Markdown (a pull request comment, a CI step summary), with the gate's checks if given."""
        return formats.render("md", self, gate)

    def save(self, path: str | os.PathLike[str], *, format: str | None = None, gate: GateResult | None = None) -> None:
        """Write the report to `path`, atomically (a crash leaves the old file or the new one, never half of one),
        in the format its extension names (.json, .html/.htm, .md/.markdown, .txt, .xml: JUnit, which lists gate
        checks and so needs `gate`) or `format` (json, html, md, terminal, junit). `gate`: its results go with the
        report. Raises UsageError for an unknown format or an extension that names none, OutputError where the file
        cannot be written."""
        from macs_audit.atomic import write_text

        write_text(path, formats.render(_format_of(Path(path), format), self, gate))


def _format_of(path: Path, name: str | None) -> str:
    """The format `name` gives (an alias read as its format), else the one `path`'s extension names."""
    if name is not None:
        name = formats.canonical(name)
        formats.format_module(name)  # an unknown name: the UsageError that lists the formats
        return name
    found = formats.EXTENSIONS.get(path.suffix.lower())
    if found is None:
        raise UsageError(
            f"cannot tell the format of {path} from its extension; use one of {', '.join(formats.EXTENSIONS)} "
            "or pass format="
        )
    return found


def load_report(path: str | os.PathLike[str]) -> Report:
    """The report saved at `path` (a JSON report of a schema version this one reads). Raises InputError naming the
    file where it is not one; what reading an older version renamed is listed in `report.deprecations`."""
    return Report.of(schema.load_report(Path(path)))


def gate(
    report: schema.Report,
    thresholds: Mapping[str, Any] | str | os.PathLike[str] | None = None,
    *,
    baseline: schema.Report | str | os.PathLike[str] | None = None,
    use_interval: bool | None = None,
) -> GateResult:
    """Check `report` against thresholds, as `macs-audit gate` does (docs/gate.md lists every key).

    `thresholds`: a dict in the gate table's form (`{"max_ece": 0.05, "corruptions": {"min_accuracy": 0.5}}`), a
    TOML file holding the table (`[tool.macs-audit.gate]` of a pyproject.toml, `[gate]` of a macs-audit.toml), or
    None: the file found from the current directory as the CLI finds it. `baseline`: a report (or its path) for the
    table's [baseline] allowances; None: the table's `baseline.report`, if it names one. `use_interval`: gate on the
    pessimistic end of the bootstrap intervals (None: the table's `use_interval`).

    Returns a GateResult: `passed` (every check held), `checks` (one Check per threshold: name, metric, op,
    threshold, observed, passed, detail, and the baseline's value for baseline checks), `failures` (the checks that
    failed), `skipped` (checks the table sets that could not run, and why), `notes` (deprecated keys read),
    `config` and `baseline` (what was read), `use_interval`; `to_dict()` is the JSON form. Raises UsageError for an
    invalid table (an unknown key names the closest one) and InputError where the report lacks a gated metric."""
    from macs_audit.gating import load_config, parse_config, run_gate

    if not isinstance(report, schema.Report):
        raise UsageError(
            f"report must be a Report (macs_audit.load_report(path) reads one), got {type(report).__name__}"
        )
    if isinstance(thresholds, Mapping):
        config = parse_config(dict(thresholds), "thresholds", base_dir=Path.cwd())
    elif thresholds is None or isinstance(thresholds, (str, os.PathLike)):
        config = load_config(None if thresholds is None else Path(thresholds))
    else:
        raise UsageError(f"thresholds must be a dict, a TOML file's path or None, got {type(thresholds).__name__}")
    if baseline is None and config.baseline_report is not None:
        baseline = config.baseline_report
    if baseline is None or isinstance(baseline, schema.Report):
        name = None if baseline is None else "(in memory)"  # what the result's `baseline` says was read
        return run_gate(report, config, baseline, use_interval=use_interval, baseline_name=name)
    if not isinstance(baseline, (str, os.PathLike)):
        raise UsageError(f"baseline must be a report, a report's path or None, got {type(baseline).__name__}")
    loaded = schema.load_report(Path(baseline))
    return run_gate(report, config, loaded, use_interval=use_interval, baseline_name=str(baseline))


# evaluate's options that are the command line's (where its outputs go) or the gate's (macs_audit.gate runs apart).
NOT_KEYWORDS = {
    "output": "call report.save(path)",
    "format": "call report.save(path, format=...)",
    "quiet": "the API never prints",
    "save_predictions": "use audit_predictions on logits you keep",
    "predictions": "saved predictions have their own functions: audit_predictions(path), calibrate_predictions(path)",
    "gate": "call macs_audit.gate(report, thresholds)",
    "baseline": "pass it to macs_audit.gate(report, thresholds, baseline=...)",
    "use_interval": "pass it to macs_audit.gate(report, thresholds, use_interval=...)",
    # The report is returned, never lost to a logging failure: it is logged on its own (docs/mlflow.md).
    **dict.fromkeys(
        ("mlflow", "mlflow_tracking_uri", "mlflow_experiment", "mlflow_run_name"),
        "log the report with macs_audit.integrations.mlflow.log_report(report)",
    ),
}


def audit(
    model: Any,
    data: Any = None,
    *,
    config: str | os.PathLike[str] | None = None,
    progress: ProgressFn | None = None,
    **options: Any,
) -> Report:
    """Audit `model` on `data` as `macs-audit evaluate` does, with its options and defaults as keywords (their names
    in docs/options.md: bootstrap=200, limit=1000, perturbations="none", corruptions="benchmark", preset="quick",
    ...). The report is the command's, bit for bit, for the same settings.

    `model`: a model file or folder (what MODEL takes), or an in-memory `torch.nn.Module` or
    `onnxruntime.InferenceSession`, with its preprocessing as keywords where it carries none (`input_size=224` or
    (224, 224), `mean=(0.485, 0.456, 0.406)`, `std=(...)`). `data`: a path (what --data takes), `(images, labels)`
    arrays (uint8 images, see `arrays_source`), or None for the built-in CIFAR-10 test set. `config`: a spec file
    whose [tool.macs-audit.evaluate] table sets the options not given here (none is searched for: a library does
    not depend on the current directory). `progress`: called as each stage begins and ends (macs_audit.progress).
    Raises UsageError for an unknown keyword (naming the closest) or a bad value, InputError for an input that
    cannot be read or used."""
    from macs_audit.plan import load_audit, plan_audit, run_planned
    from macs_audit.settings.resolve import resolve
    from macs_audit.settings.spec import read_spec

    given = {name: _keyword("audit", "evaluate", name, value) for name, value in options.items()}
    in_memory_model = None
    if isinstance(model, (str, os.PathLike)):
        given["model"] = Path(model)
    elif _in_memory_kind(model):
        in_memory_model = model
    else:
        raise UsageError(
            f"model must be a path, a torch.nn.Module or an onnxruntime.InferenceSession, got {type(model).__name__}"
        )
    in_memory_data = None
    if isinstance(data, tuple):
        if len(data) != 2:
            raise UsageError(f"data as arrays must be (images, labels), got a tuple of {len(data)}")
        in_memory_data = arrays_source(*data)
    elif data is not None:
        given["data"] = _path(data, "data", "a path, (images, labels) arrays or None")
    resolved = resolve("evaluate", given, read_spec(Path(config)) if config is not None else None)
    plan = plan_audit(resolved, model=in_memory_model, data=in_memory_data)
    result = run_planned(plan, load_audit(plan), progress=progress)
    return Report.of(result.report)


@dataclasses.dataclass(frozen=True)
class Calibrated:
    """What `calibrate` wrote and measured: the calibrated model's path, the fitted calibrator's name, the audits of
    the model before and after (the same data and settings), and the warnings the command prints."""

    model: Path
    calibrator: str
    before: Report
    after: Report
    warnings: list[str]


def calibrate(
    model: str | os.PathLike[str],
    data: str | os.PathLike[str] | None = None,
    *,
    out: str | os.PathLike[str],
    config: str | os.PathLike[str] | None = None,
    progress: ProgressFn | None = None,
    **options: Any,
) -> Calibrated:
    """Fit a post-hoc calibrator on `data` (the fit data), write `model` with it folded in to the folder `out`, and
    audit both on the evaluation data, as `macs-audit calibrate` does, with its options as keywords (docs/options.md:
    method="all", eval_data=..., holdout=0.2, force=True, ...). `config`: a spec file whose calibrate table sets the
    options not given here. Raises UsageError for a bad option, an output that exists without force=True or that
    would replace an input, or a calibrator no better than none (force_calibration=True writes it anyway)."""
    from macs_audit.calibrating import calibrate_resolved, fitted_name
    from macs_audit.settings.resolve import resolve
    from macs_audit.settings.spec import read_spec

    given = {name: _keyword("calibrate", "calibrate", name, value) for name, value in options.items()}
    given["model"] = _path(model, "model", "a model file or folder (calibrate writes a new one)")
    given["out"] = _path(out, "out", "the folder to write the calibrated model to")
    if data is not None:
        given["data"] = _path(data, "data", "a path (the fit data)")
    resolved = resolve("calibrate", given, read_spec(Path(config)) if config is not None else None)
    run = calibrate_resolved(resolved, progress=progress)
    return Calibrated(
        run.model, fitted_name(run.calibrator), Report.of(run.before), Report.of(run.after), list(run.warnings)
    )


def calibrate_predictions(
    predictions: str | os.PathLike[str],
    *,
    out: str | os.PathLike[str],
    config: str | os.PathLike[str] | None = None,
    **options: Any,
) -> dict[str, Any]:
    """Fit a post-hoc calibrator on saved predictions (a file as `evaluate --predictions` reads it: held-out samples
    the model was not trained on) and write the portable calibration map to `out`/calibration_map.json, as
    `macs-audit calibrate --predictions` does, with its options as keywords (method="all", select, holdout, seed,
    force=True, force_calibration=True, label_column). Returns the map written (a dict: the method, its fitted
    numbers, the class order, the fit and selection data's sizes and the never-worse decision), which
    `apply_calibration` applies. Raises UsageError for a bad option, an output that exists without force=True, or no
    map better than none on the held-out part (force_calibration=True writes the best anyway); InputError for
    predictions that do not fit."""
    from macs_audit.calibrating import calibrate_predictions_resolved
    from macs_audit.settings.resolve import resolve
    from macs_audit.settings.spec import read_spec

    given = {name: _keyword("calibrate_predictions", "calibrate", name, value) for name, value in options.items()}
    given["predictions"] = _path(predictions, "predictions", "a predictions file (.npz, .csv, .parquet)")
    given["out"] = _path(out, "out", "the folder to write calibration_map.json to")
    resolved = resolve("calibrate", given, read_spec(Path(config)) if config is not None else None)
    return calibrate_predictions_resolved(resolved).map


def apply_calibration(calibration_map: Mapping[str, Any] | str | os.PathLike[str], scores: Any) -> np.ndarray:
    """The calibrated probabilities (N, K), float64, of `scores` under a calibration map (`calibrate_predictions`'
    result, or the path of a calibration_map.json that `macs-audit calibrate --predictions` wrote). `scores` are
    what the map was fitted on: logits (N, K), or probabilities where it was fitted on probabilities; a binary
    classifier's map takes its positive class's column, (N,) or (N, 1). numpy and scipy only: it runs in any
    Python process. np.log of the result are logits `audit_predictions` reads. Raises InputError for a file that is
    not a calibration map, or scores of another shape or kind."""
    from macs_audit.calibrators.portable import apply_calibration as apply

    return apply(calibration_map, scores)


def _keyword(function: str, command: str, name: str, value: Any) -> Any:
    """An API keyword's value as the options table holds it, checked as the flag's would be (settings/spec.py's
    checked_value: its type, its range; a sequence of numbers or names for a comma-list option joined); UsageError
    for an option `function` takes elsewhere. A name the command does not take is resolve()'s to refuse."""
    from macs_audit.settings.spec import checked_value
    from macs_audit.settings.table import BY_NAME

    if name in NOT_KEYWORDS:
        raise UsageError(f"{name} is not an option of {function}(): {NOT_KEYWORDS[name]}")
    option = BY_NAME.get(name)
    if option is None or command not in option.commands:
        return value
    return checked_value(option.of(command), value, f"(a keyword of {function}())")


def _in_memory_kind(model: Any) -> bool:
    """Whether `model` is a torch module or an onnxruntime session (checked by the classes' names: no import)."""
    return any(
        (cls.__module__.split(".")[0], cls.__name__) in (("torch", "Module"), ("onnxruntime", "InferenceSession"))
        for cls in type(model).__mro__
    )


def _path(value: Any, name: str, what: str) -> Path:
    if not isinstance(value, (str, os.PathLike)):
        raise UsageError(f"{name} must be {what}, got {type(value).__name__}")
    return Path(value)


def audit_predictions(  # noqa: PLR0913 (the arrays a predictions file holds, as keywords)
    logits: np.ndarray | str | os.PathLike[str],
    labels: np.ndarray | None = None,
    *,
    kind: str = "logits",
    class_names: Sequence[str] | None = None,
    ood_logits: np.ndarray | None = None,
    unlabeled_logits: np.ndarray | None = None,
    shift: Mapping[str, tuple[np.ndarray, np.ndarray]] | None = None,
    reference_logits: np.ndarray | None = None,
    metadata: Mapping[str, Any] | str | os.PathLike[str] | None = None,
    **options: Any,
) -> Report:
    """Audit a classifier from its predictions alone, as `macs-audit evaluate --predictions` does: `logits` (N, K) of
    N samples and `labels` (N,) in 0..K-1; or `logits` a predictions file (.npz, .csv, .parquet; docs/predictions.md)
    and no `labels`.

    `kind`: what the arrays hold, "logits" or "probabilities" (rows summing to 1 within 1e-3; read as
    log-probabilities). A single column (N,) or (N, 1) is a binary classifier's positive class (label 1), both
    classes reported. The report has the sections that need predictions only (the clean view with its intervals,
    temperature scaling, calibrators, conformal sets; OOD detection with `ood_logits` of other samples, label-free
    estimates with `unlabeled_logits` of unlabeled target samples; a shift section with `shift`, name -> (logits,
    labels) of shifted sets of the same classes; a parity section with `reference_logits`, another model's outputs
    of the same samples, row for row, all of the same `kind`); robustness and corruptions need a model and are
    absent, and `report.conventions.absent_sections` says why. With the same seed and split, its sections equal
    those of the model's audit that gave the logits.

    `metadata`: what the samples are sliced by (docs/slices.md): name -> (N,) values (numbers or text, one per
    row), or a metadata file (CSV, JSON lines, Parquet) keyed by `index` (the row), or with a predictions file also
    by `key` (its ids). `class_names`: in label order (default "0", "1", ...). `options`: the audit's (the CLI's
    defaults where not given): bootstrap (resamples, 0 for none), seed, calibration_split (the fraction the
    temperature is fitted on), calibrators ("all", "none", or a sequence of method names), coverage and
    conformal_split (conformal sets), raps ((k_reg, penalty)), slice_bins, min_slice_size and slice_correction
    (the slices'), batch_size (the clean view's sums run in batches of it, as a model audit's pass did: its
    report's runtime.batch_size gives the same numbers to the last bit; default all at once). Raises UsageError for
    an unknown option or a bad value, InputError for predictions that do not fit (NaN or infinite values, a label
    out of range, lengths that differ, probabilities whose rows do not sum to 1)."""
    from macs_audit.auditing import Companions, SavedLogits, SavedSet, audit_logits
    from macs_audit.auditing.parity import SavedReference
    from macs_audit.predictions.files import LOGITS, PROBABILITIES, as_logits

    if isinstance(logits, (str, os.PathLike)):
        arrays: dict[str, Any] = {"class_names": class_names, "ood_logits": ood_logits, "shift": shift}
        arrays |= {"unlabeled_logits": unlabeled_logits, "reference_logits": reference_logits}
        given = [name for name, value in arrays.items() if value is not None] + (["kind"] if kind != "logits" else [])
        if given:
            raise UsageError(
                f"{given[0]} goes with logits as arrays; a predictions file holds its own (docs/predictions.md)"
            )
        if isinstance(metadata, Mapping):
            raise UsageError("metadata as arrays goes with logits as arrays; with a predictions file give a file")
        return _audit_file(Path(logits), labels, {**options, **({"metadata": metadata} if metadata else {})})
    audit = prediction_options(options)
    if kind not in (LOGITS, PROBABILITIES):
        raise UsageError(f"kind must be {LOGITS!r} or {PROBABILITIES!r}, got {kind!r}")
    if labels is None:
        raise UsageError("labels are needed with logits as arrays (a predictions file holds its own)")

    def read(name: str, values: np.ndarray) -> np.ndarray:
        array = np.asarray(values)
        if array.ndim == 0 or array.dtype.kind not in "fiu" or array.size == 0:
            from macs_audit.auditing.saved import checked_logits

            return checked_logits(name, array)  # says what is wrong with it
        return as_logits(name, kind, array)[0]

    z = read("logits", logits)
    names = list(class_names) if class_names is not None else [str(i) for i in range(z.shape[1])]
    companions = Companions(
        ood=None if ood_logits is None else SavedSet("ood_logits", read("ood_logits", ood_logits)),
        unlabeled=None
        if unlabeled_logits is None
        else SavedSet("unlabeled_logits", read("unlabeled_logits", unlabeled_logits)),
        shift={
            name: SavedSet(f"shift {name!r}", read(f"shift {name!r}", pair[0]), np.asarray(pair[1]))
            for name, pair in (shift or {}).items()
        },
        reference=None
        if reference_logits is None
        else SavedReference(read("reference_logits", reference_logits), {"format": "predictions"}, "row"),
    )
    columns = _array_columns(metadata, len(z))
    result = audit_logits(SavedLogits(z, np.asarray(labels), names, columns=columns), audit, companions)
    return Report.of(result.report)


def _array_columns(metadata: Mapping[str, Any] | str | os.PathLike[str] | None, n: int) -> Any:
    """audit_predictions' `metadata` for logits as arrays: its columns (auditing/slicing.SliceColumns), or None."""
    from macs_audit.auditing.slicing import SliceColumns
    from macs_audit.data.metadata import column_values, join_keys, read_metadata

    if metadata is None:
        return None
    if isinstance(metadata, Mapping):
        own = {str(name): column_values(np.asarray(values), f"metadata {name!r}") for name, values in metadata.items()}
        for name, values in own.items():
            if len(values) != n:
                raise InputError(f"metadata {name!r} has {len(values):,} values but the logits {n:,} rows")
        return SliceColumns.joined(join_keys(None, None, n, "logits", own, "arrays"), with_file=False)
    table = read_metadata(_path(metadata, "metadata", "a mapping of columns or a metadata file"))
    if table.keyed_by != "index":
        raise InputError(f"{table.name} is keyed by {table.keyed_by}; logits as arrays are matched by index (the row)")
    joined = join_keys(table, np.arange(n, dtype=np.int64), n, "logits", {}, "arrays")
    return SliceColumns.joined(joined, with_file=True)


def _audit_file(path: Path, labels: Any, options: Mapping[str, Any]) -> Report:
    """audit_predictions of a predictions file, as `evaluate --predictions FILE` runs it (predictions/audit.py)."""
    from macs_audit.predictions.audit import plan_predictions, run_predictions
    from macs_audit.settings.resolve import resolve

    if labels is not None:
        raise UsageError("labels come from the predictions file; pass labels only with logits as arrays")
    prediction_options(options)  # the options' names and values checked as for arrays
    # Each value as its flag's: a (k_reg, penalty) or a list of methods joined as the flag writes it (_keyword).
    given = {name: _keyword("audit_predictions", "evaluate", name, value) for name, value in options.items()}
    plan = plan_predictions(resolve("evaluate", {**given, "predictions": path}))
    return Report.of(run_predictions(plan).report)


def prediction_options(options: Mapping[str, Any]) -> AuditOptions:
    """The AuditOptions of an audit of predictions: PREDICTION_OPTIONS set from `options`, the rest defaults.
    UsageError for a key that is none of them: one that needs a model says so, another names the closest."""
    from macs_audit.auditing import AuditOptions
    from macs_audit.predictions.audit import PREDICTION_OPTIONS

    known = {field.name for field in dataclasses.fields(AuditOptions)}
    for key in options:
        if key in PREDICTION_OPTIONS:
            continue
        if key in known:
            raise UsageError(f"{key} needs a model and its images; an audit of predictions takes only {_listed()}")
        close = difflib.get_close_matches(key, PREDICTION_OPTIONS, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else f"; use {_listed()}"
        raise UsageError(f"unknown option {key!r}{hint}")
    from macs_audit.auditing import check_calibration_split
    from macs_audit.auditing.calibration import check_conformal_split, parse_raps
    from macs_audit.metrics.conformal import check_coverage
    from macs_audit.plan import parse_correction
    from macs_audit.settings.table import defaults_of

    # evaluate's defaults where not given (calibrators "all"), each value checked as its flag's would be.
    given = {name: _keyword("audit_predictions", "evaluate", name, value) for name, value in options.items()}
    values = {**{name: defaults_of("evaluate")[name] for name in PREDICTION_OPTIONS}, **given}
    extra = {"batch_size": values["batch_size"]} if values["batch_size"] is not None else {}
    return AuditOptions(
        bootstrap=values["bootstrap"],
        seed=values["seed"],
        calibration_split=check_calibration_split(values["calibration_split"]),
        calibrators=_calibrators(values["calibrators"]),
        coverage=check_coverage(values["coverage"]),
        conformal_split=check_conformal_split(values["conformal_split"]),
        raps=parse_raps(values["raps"]),
        slice_bins=values["slice_bins"],
        min_slice_size=values["min_slice_size"],
        slice_correction=parse_correction(values["slice_correction"]),
        **extra,
    )


def _listed() -> str:
    from macs_audit.predictions.audit import PREDICTION_OPTIONS

    return ", ".join(PREDICTION_OPTIONS)


def _calibrators(value: Any) -> tuple[str, ...]:
    """The calibrators option as AuditOptions holds it: "all", "none", a comma-separated string or a sequence of
    method names (calibrators.selection.METHODS), in the methods' order."""
    from macs_audit.calibrators.selection import parse_methods

    if isinstance(value, str):
        return () if value.strip() == "none" else tuple(parse_methods(value))
    if isinstance(value, Sequence) and all(isinstance(name, str) for name in value):
        return tuple(parse_methods(",".join(value))) if value else ()
    raise UsageError(f"calibrators must be 'all', 'none' or a list of method names, got {type(value).__name__}")


def arrays_source(
    x: np.ndarray, y: np.ndarray, *, class_names: Sequence[str] | None = None, name: str = "arrays"
) -> Source:
    """A data source of images in memory: `x` uint8 in [0, 255], (N, H, W, C) (or (N, C, H, W), or (N, H, W) for
    grey), `y` (N,) integer labels in 0..K-1, `class_names` in label order (default: "0", "1", ..., matched with the
    model's outputs by position). Float images are refused rather than guessed at: (x * 255).round() of [0, 1]
    floats, as uint8, is the one rule. Raises InputError for arrays that do not fit."""
    from macs_audit.data.sources import array_source
    from macs_audit.models.config import MAX_CLASSES

    x, y = np.asarray(x), np.asarray(y)
    if x.dtype != np.uint8:
        raise InputError(
            f"{name}: images must be uint8 in [0, 255], got {x.dtype}; convert [0, 1] floats with "
            "(x * 255).round().astype(np.uint8)"
        )
    if class_names is not None:
        return array_source(name, "arrays", x, y, list(class_names))
    count = int(y.max()) + 1 if y.size and np.issubdtype(y.dtype, np.integer) else 0
    if count > MAX_CLASSES:  # before a name is made for each class up to it
        raise InputError(f"{name}: label {count - 1} is not a class index (0..K-1, K at most {MAX_CLASSES:,})")
    source = array_source(name, "arrays", x, y, [str(i) for i in range(count)])
    return dataclasses.replace(source, named=False)
