"""`evaluate --predictions FILE`: an audit of saved predictions from resolved evaluate options (settings/resolve.py).
`plan_predictions` checks the options and reads the files (nothing is written before it returns), `run_predictions`
audits them (auditing/saved.py's `audit_logits`). No model loads and torch is never imported.

Only the options an audit of predictions reads apply (PREDICTION_OPTIONS, COMPANION_OPTIONS and where the outputs
go). One that needs a model, given as a flag, is a UsageError; set by the spec (whose evaluate table may describe
the model audit), it is left out and said in a warning; a preset's is left out. The report's settings record the
options that applied."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np

from macs_audit.auditing import AuditOptions, AuditResult, Companions, SavedLogits, SavedSet, audit_logits
from macs_audit.auditing.options import AUTO_BATCH_SIZE
from macs_audit.auditing.parity import SavedReference
from macs_audit.auditing.slicing import SliceColumns
from macs_audit.data.metadata import MetadataTable, join_keys, read_metadata
from macs_audit.errors import InputError, UsageError
from macs_audit.plan import COMPANION_OPTIONS, audit_options
from macs_audit.predictions.files import Predictions, read_predictions
from macs_audit.progress import ProgressFn
from macs_audit.settings.resolve import Resolved
from macs_audit.settings.table import BY_NAME, FLAG, MLFLOW_OPTIONS, PRESET, SPEC

# The AuditOptions an audit of predictions reads: the others need a model or images.
PREDICTION_OPTIONS = (
    "bootstrap",
    "seed",
    "calibration_split",
    "calibrators",
    "coverage",
    "conformal_split",
    "raps",
    "batch_size",
    "metadata",
    "slice_bins",
    "min_slice_size",
    "slice_correction",
)
# What either audit takes alike: where its outputs go, the gate, the spec and the preset, the MLflow logging.
RUN_OPTIONS = (
    "predictions",
    "output",
    "format",
    "quiet",
    "save_predictions",
    "problem_bars",
    "gate",
    "baseline",
    "use_interval",
    "config",
    "preset",
    "features",
    *MLFLOW_OPTIONS,
)
APPLIES = frozenset((*PREDICTION_OPTIONS, *COMPANION_OPTIONS, *RUN_OPTIONS))


@dataclasses.dataclass(frozen=True)
class PredictionsPlan:
    """An audit of saved predictions, read and checked: the options, the predictions and their companions, the
    report's settings record, and what the spec set that does not apply (`ignored`: the warning's option names)."""

    options: AuditOptions
    predictions: Predictions
    companions: Companions
    settings: dict[str, Any]
    ignored: tuple[str, ...]
    files: tuple[Path, ...]  # every file it read: no output may replace one
    columns: SliceColumns | None = None  # what the samples are sliced by: the file's metadata, --metadata's


def check_options(r: Resolved) -> tuple[str, ...]:
    """UsageError for an option a flag gave that needs a model; the spec's options that need a model, which an
    audit of predictions leaves out. (--predictions' own options without it: plan.check_predictions_options.)"""
    given = [name for name in r.values if name not in APPLIES and r.sources[name] in (FLAG, SPEC)]
    flagged = [name for name in given if r.sources[name] == FLAG]
    if flagged:
        what = "MODEL" if flagged[0] == "model" else BY_NAME[flagged[0]].flag
        raise UsageError(
            f"{what} needs a model, but --predictions audits saved predictions: give MODEL or --predictions, "
            f"and the options of that audit (docs/predictions.md)"
        )
    return tuple(given)


def plan_predictions(r: Resolved) -> PredictionsPlan:
    """Check the resolved options and read the predictions and their companions (InputError, one line, for a file
    that does not fit; nothing is written)."""
    from macs_audit.settings.parse import parse_shift_data
    from macs_audit.settings.resolve import naming_the_spec

    try:
        ignored = check_options(r)
        options = audit_options(r)
        shift = parse_shift_data(r["shift_predictions"], option="--shift-predictions")
    except UsageError as error:
        raise naming_the_spec(error, r) from None
    label_column = r["label_column"]
    predictions = read_predictions(r["predictions"], label_column=label_column)
    if options.batch_size == AUTO_BATCH_SIZE and predictions.batch_size is not None:
        options = dataclasses.replace(options, batch_size=predictions.batch_size)  # the model audit's batches
    companions = Companions(
        ood=_companion(predictions, "ood", r["ood_predictions"], label_column),
        unlabeled=_companion(predictions, "unlabeled", r["unlabeled_predictions"], label_column),
        shift={name: _shift_set(predictions, name, path, label_column) for name, path in shift},
        reference=_reference(predictions, r["reference_predictions"], label_column),
        # The features half where the file holds features (and --features is not off): models/features's head.
        features=predictions.features if options.features != "off" else None,
        head=predictions.head if options.features != "off" else None,
    )
    record = r.record()
    record["options"] = {name: value for name, value in record["options"].items() if name in APPLIES}
    if record["preset"] is not None and r.sources["preset"] == PRESET:
        record["preset"] = None
    files = [r["predictions"], r["ood_predictions"], r["unlabeled_predictions"], r["reference_predictions"]]
    files += [path for _, path in shift] + [r["metadata"]]
    return PredictionsPlan(
        options,
        predictions,
        companions,
        record,
        ignored,
        tuple(Path(f) for f in files if f is not None),
        prediction_columns(predictions, read_metadata(r["metadata"]) if r["metadata"] is not None else None),
    )


def prediction_columns(found: Predictions, table: MetadataTable | None) -> SliceColumns | None:
    """The columns the samples of `found` are sliced by: its own metadata columns and `table`'s (--metadata),
    matched by row (keyed by index) or by the file's ids (keyed by key or path); None without either."""
    if table is None and not found.metadata:
        return None
    keys: list[str] | np.ndarray | None = None
    if table is not None and table.keyed_by == "index":
        keys = np.arange(len(found), dtype=np.int64)
    elif table is not None:
        if found.ids is None:
            raise InputError(
                f"{table.name} is keyed by {table.keyed_by}, matched to the predictions' ids, but {found.name} has "
                "no ids; key it by index (the row)"
            )
        keys = [str(key) for key in np.asarray(found.ids).tolist()]
    joined = join_keys(table, keys, len(found), found.name, dict(found.metadata), "predictions")
    return SliceColumns.joined(joined, table is not None)


def run_predictions(plan: PredictionsPlan, *, progress: ProgressFn | None = None) -> AuditResult:
    """The audit of `plan`'s predictions; the report records the settings that applied."""
    from macs_audit.report import Settings

    found = plan.predictions
    assert found.labels is not None  # read_predictions requires them
    saved = SavedLogits(
        found.logits, found.labels, found.names(), found.output_names, source=found.name, columns=plan.columns
    )
    result = audit_logits(saved, plan.options, plan.companions, model_info=_model_info(found), progress=progress)
    result.report.settings = Settings.from_dict(plan.settings)
    return result


def _model_info(found: Predictions) -> dict[str, Any]:
    """What the report's model section says of a classifier known by its outputs: the file, what it held."""
    info: dict[str, Any] = {"path": found.name, "output": f"{found.kind} (declared by the file)"}
    if found.binary:
        info["output"] = f"{found.kind} of class 1 (one column; a binary classifier)"
    return info


def _companion(found: Predictions, purpose: str, path: Path | None, label_column: str) -> SavedSet | None:
    """The OOD or unlabeled set: its own file (labels not needed), or the arrays --save-predictions put beside the
    logits; not both."""
    saved = found.companions.get(purpose)
    if path is None:
        if saved is None:
            return None
        return SavedSet(saved.source, saved.logits, format=saved.format, features=saved.features)
    if saved is not None:
        raise UsageError(
            f"{found.name} holds {purpose}_logits and --{purpose}-predictions gives them too; give one of the two"
        )
    other = read_predictions(path, labels=False, label_column=label_column)
    _check_classes(found, other)
    return SavedSet(other.name, other.logits, features=other.features)


def _shift_set(found: Predictions, name: str, path: Path, label_column: str) -> SavedSet:
    other = read_predictions(path, label_column=label_column)
    _check_classes(found, other)
    return SavedSet(other.name, other.logits, other.labels)


def _check_classes(found: Predictions, other: Predictions) -> None:
    """Another file's predictions must be of the same classes, in the same order: the same column count, and the
    same class names where both files name them."""
    if other.num_classes != found.num_classes:
        raise InputError(
            f"{other.name} has {other.num_classes} classes but {found.name} has {found.num_classes}; "
            "give predictions of the same classifier's classes"
        )
    if found.class_names is not None and other.class_names is not None and other.class_names != found.class_names:
        k = next(i for i, (a, b) in enumerate(zip(found.class_names, other.class_names, strict=True)) if a != b)
        raise InputError(
            f"{other.name} names class {k} {other.class_names[k]!r} but {found.name} names it "
            f"{found.class_names[k]!r}; give both files' classes in the same order"
        )
    if found.binary != other.binary:
        raise InputError(f"{other.name} and {found.name} differ: one holds one column (binary), the other two or more")


def _reference(found: Predictions, path: Path | None, label_column: str) -> SavedReference | None:
    """The reference's predictions of the same samples, in the audited rows' order: by the files' ids where both
    have them (the same ids, in any order), else row for row (the same count). Labels it holds must agree."""
    if path is None:
        return None
    other = read_predictions(path, labels=False, label_column=label_column)
    _check_classes(found, other)
    order = _pairing(found, other)
    logits = other.logits[order]
    if other.labels is not None and found.labels is not None and not np.array_equal(other.labels[order], found.labels):
        row = int(np.flatnonzero(other.labels[order] != found.labels)[0])
        raise InputError(
            f"{other.name} and {found.name} disagree on the label of sample {_sample(found, row)}; "
            "the two files must hold the same samples"
        )
    paired_by = "id" if found.ids is not None and other.ids is not None else "row"
    return SavedReference(logits, {"path": other.name, "format": "predictions"}, paired_by)


def _pairing(found: Predictions, other: Predictions) -> np.ndarray:
    """The reference's rows in the audited rows' order (InputError where the two hold other samples)."""
    if found.ids is None or other.ids is None:
        if len(other) != len(found):
            raise InputError(
                f"{other.name} has {len(other):,} rows but {found.name} has {len(found):,}; pairing by row needs the "
                "same samples in the same order (or an id column in both files)"
            )
        return np.arange(len(found))
    mine, theirs = np.asarray(found.ids).astype(str), np.asarray(other.ids).astype(str)
    position = {sample: row for row, sample in enumerate(theirs)}
    missing = [sample for sample in mine if sample not in position]
    if missing or len(theirs) != len(mine):
        extra = sorted(str(sample) for sample in set(theirs) - set(mine))
        what = (
            f"id {str(missing[0])!r} is missing from {other.name}" if missing else f"{other.name} has id {extra[0]!r}"
        )
        raise InputError(
            f"the ids differ: {what} ({len(missing):,} of {found.name}'s ids are missing, {len(extra):,} extra); "
            "pair the two files on the same samples"
        )
    return np.array([position[sample] for sample in mine], dtype=np.int64)


def _sample(found: Predictions, row: int) -> str:
    return f"{str(np.asarray(found.ids)[row])!r} (row {row})" if found.ids is not None else f"row {row}"
