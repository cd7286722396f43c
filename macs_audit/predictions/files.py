"""Prediction files: what a classifier already computed, read without its model (docs/predictions.md).

Three formats hold the same arrays:

- `.npz` (what `evaluate --save-predictions` writes): `logits` or `probabilities` (N, K), or (N,) / (N, 1) for a
  binary classifier's positive class; `labels` (N,); optional `class_names` (K,), `ids` (N,), `features` (N, D),
  `metadata_<name>` (N,), `ood_logits` / `unlabeled_logits` (M, K) (the companion sets a model audit scored),
  `output_names` (K,) (the logits' columns where a model names them otherwise than the data) and `batch_size`
  (the model audit's batches, which the clean view's sums follow to the last bit).
- `.csv` and `.parquet` (pyarrow, the `parquet` extra): one row per sample; the columns are read by name: the label
  column `label` (or the one `label_column` names), an `id` column, one column per class named `logit_<class>` or
  `prob_<class>` (in file order; one kind per file), `feature_<j>` columns, and any other column as metadata.

Probabilities become log-probabilities and a single column is a binary classifier's positive class (label 1), both
classes reported, by the one rule of macs_audit/scores.py.

Every problem is one InputError line naming the file: NaN or infinite values (their count and the first), a label
outside the classes, lengths that differ, probabilities whose rows do not sum to 1, duplicated ids, a table with no
label column where labels are needed, an array the format does not know (with the closest name).
"""

from __future__ import annotations

import csv
import dataclasses
import difflib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from macs_audit.errors import InputError
from macs_audit.scores import LOGITS, PROBABILITIES, as_logits, check_finite
from macs_audit.text import shortened

LABEL_COLUMN, ID_COLUMN = "label", "id"
CLASS_PREFIXES = {"logit_": LOGITS, "prob_": PROBABILITIES}
FEATURE_PREFIX, METADATA_PREFIX = "feature_", "metadata_"
COMPANIONS = ("ood", "unlabeled")  # the companion sets' logits an .npz may carry: `<purpose>_logits`
# The layer the features feed (models/features.FeatureHead), which a model audit saves beside them.
HEAD_ARRAYS = ("head_weight", "head_bias", "feature_layer", "feature_source")
NPZ_ARRAYS = (
    LOGITS,
    PROBABILITIES,
    "labels",
    "class_names",
    "output_names",
    "ids",
    "features",
    "batch_size",
    *(f"{purpose}_{what}" for purpose in COMPANIONS for what in ("logits", "source", "format", "features")),
    *HEAD_ARRAYS,
)
SUFFIXES = (".npz", ".csv", ".parquet")
PREDICTIONS_FORMAT = "predictions"  # the format a set read from a predictions file is recorded with


@dataclasses.dataclass(frozen=True)
class Companion:
    """A companion set's logits (M, K) a model audit saved beside its own (`write_predictions`), and the name and
    format of the data they came from, which its section records."""

    source: str
    format: str
    logits: np.ndarray
    features: np.ndarray | None = None


@dataclasses.dataclass(frozen=True)
class SavedHead:
    """The final layer the saved features feed: logits = features @ weight.T + bias (models/features.FeatureHead's
    numbers), the layer's name and how it was found."""

    weight: np.ndarray
    bias: np.ndarray | None
    layer: str
    source: str


@dataclasses.dataclass(frozen=True)
class Predictions:
    """A classifier's outputs on N samples, as an audit reads them."""

    name: str  # what messages and the report call it: the file's path
    logits: np.ndarray  # (N, K) floating point; log-probabilities where the file held probabilities
    labels: np.ndarray | None  # (N,) int64 in 0..K-1; None where the file has none
    class_names: list[str] | None  # in label order; None: by index
    kind: str  # what the file held: LOGITS or PROBABILITIES
    binary: bool = False  # one column, read as the positive class's (K = 2)
    ids: np.ndarray | None = None  # (N,) sample ids, unique
    output_names: list[str] | None = None  # the logits' columns' names where they differ from class_names
    features: np.ndarray | None = None  # (N, D)
    metadata: dict[str, np.ndarray] = dataclasses.field(default_factory=dict)  # name -> (N,)
    companions: dict[str, Companion] = dataclasses.field(default_factory=dict)  # by purpose: "ood", "unlabeled"
    batch_size: int | None = None  # the model audit's batch size, where --save-predictions recorded it
    head: SavedHead | None = None  # the layer `features` feed, where --save-predictions recorded it

    def __len__(self) -> int:
        return len(self.logits)

    @property
    def num_classes(self) -> int:
        return int(self.logits.shape[1])

    def names(self) -> list[str]:
        """The class names, "0", "1", ... where the file names none."""
        return self.class_names or [str(k) for k in range(self.num_classes)]


def read_predictions(path: Path, *, labels: bool = True, label_column: str = LABEL_COLUMN) -> Predictions:
    """The predictions in `path` (.npz, .csv or .parquet), checked (see the module's docstring). `labels`: whether
    the audit needs them (an error where the file has none); without, labels the file holds are read all the same."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: no such file" if not path.exists() else f"{path}: not a file")
    suffix = path.suffix.lower()
    if suffix == ".npz":
        found = _read_npz(path)
    elif suffix in (".csv", ".parquet"):
        columns = _csv_columns(path) if suffix == ".csv" else _parquet_columns(path)
        found = _from_columns(str(path), columns, label_column)
    else:
        raise InputError(f"{path}: cannot tell predictions from a {suffix or 'suffixless'} file; use {_suffixes()}")
    if labels and found.labels is None:
        where = "an array named 'labels'" if suffix == ".npz" else f"a column named {label_column!r}"
        raise InputError(f"{path}: the file has no labels; the audit needs {where}")
    return found


def _suffixes() -> str:
    return ", ".join(SUFFIXES)


def _read_npz(path: Path) -> Predictions:
    from macs_audit.data.npz import open_npz

    name = str(path)
    with open_npz(path) as archive:
        keys = set(archive.keys)
        for key in sorted(keys):
            if key not in NPZ_ARRAYS and not key.startswith(METADATA_PREFIX):
                close = difflib.get_close_matches(key, NPZ_ARRAYS, n=1)
                hint = f"did you mean {close[0]!r}?" if close else f"it reads {', '.join(NPZ_ARRAYS)}"
                raise InputError(f"{name}: unknown array {key!r} ({hint}; metadata goes in metadata_<name>)")
        kinds = [kind for kind in (LOGITS, PROBABILITIES) if kind in keys]
        if len(kinds) != 1:
            what = "both 'logits' and 'probabilities'" if kinds else "neither 'logits' nor 'probabilities'"
            raise InputError(f"{name}: the file holds {what}; give exactly one (N, classes) array")
        kind = kinds[0]
        read = {key: archive.read(key) for key in keys}
    logits, binary = as_logits(name, kind, read.pop(kind))
    n, k = logits.shape
    class_names = _names(name, "class_names", read.pop("class_names", None), k, binary)
    output_names = _names(name, "output_names", read.pop("output_names", None), k, binary)
    labels = read.pop("labels", None)
    batch_size = read.pop("batch_size", None)
    companions = {
        purpose: Companion(
            _text(read.get(f"{purpose}_source")) or f"{name} ({purpose}_logits)",
            _text(read.get(f"{purpose}_format")) or PREDICTIONS_FORMAT,
            _companion(name, f"{purpose}_logits", read[f"{purpose}_logits"], k),
            read.get(f"{purpose}_features"),
        )
        for purpose in COMPANIONS
        if f"{purpose}_logits" in read
    }
    features = read.pop("features", None)
    ids = read.pop("ids", None)
    head = _head(name, read, features, k)
    metadata = {
        key[len(METADATA_PREFIX) :]: _metadata(name, key, value)
        for key, value in read.items()
        if key.startswith(METADATA_PREFIX)
    }
    return _checked(
        Predictions(
            name=name,
            logits=logits,
            labels=None if labels is None else _labels(name, labels, k, class_names),
            class_names=class_names,
            kind=kind,
            binary=binary,
            ids=ids,
            output_names=output_names if output_names != class_names else None,
            features=features,
            metadata=metadata,
            companions=companions,
            batch_size=_batch_size(name, batch_size),
            head=head,
        )
    )


def _csv_columns(path: Path) -> dict[str, np.ndarray]:
    """The CSV's columns by header, as strings (a row of another length than the header is an error)."""
    name = str(path)
    try:
        with open(path, newline="", encoding="utf-8-sig") as fh:
            rows = list(csv.reader(fh))
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise InputError(f"{name}: cannot read it as CSV ({exc})") from None
    if not rows:
        raise InputError(f"{name}: the file is empty; it needs a header row and one row per sample")
    header = [cell.strip() for cell in rows[0]]
    from macs_audit.data.metadata import check_header  # the metadata files' rule, read lazily as column_values

    check_header(name, header)
    body = rows[1:]
    for row_number, row in enumerate(body, start=2):
        if len(row) != len(header):
            raise InputError(f"{name}: line {row_number} has {len(row)} fields but the header has {len(header)}")
    values = np.array(body, dtype=str).reshape(len(body), len(header))
    return {column: values[:, j] for j, column in enumerate(header)}


def _parquet_columns(path: Path) -> dict[str, np.ndarray]:
    name = str(path)
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise InputError(f"{name}: reading Parquet needs pyarrow: pip install 'macs-audit[parquet]'") from None
    try:
        table = pq.read_table(path)
    except (OSError, ValueError) as exc:  # pyarrow's ArrowInvalid is a ValueError
        raise InputError(f"{name}: cannot read it as Parquet ({exc})") from None
    from macs_audit.data.metadata import check_header

    check_header(name, list(table.column_names))
    columns = {}
    for column in table.column_names:
        values = table.column(column)
        if values.null_count:
            columns[column] = np.array(["" if v is None else str(v) for v in values.to_pylist()], dtype=str)
        else:
            columns[column] = values.to_numpy(zero_copy_only=False)
    return columns


def _from_columns(name: str, columns: dict[str, np.ndarray], label_column: str) -> Predictions:
    """A table's predictions, its columns read by name (the module's docstring)."""
    class_columns = [c for c in columns if any(c.startswith(prefix) for prefix in CLASS_PREFIXES)]
    if not class_columns:
        raise InputError(
            f"{name}: no class columns: name one per class logit_<class> or prob_<class> "
            f"(columns: {shortened(columns, 8, 'columns')})"
        )
    kinds = {CLASS_PREFIXES[next(p for p in CLASS_PREFIXES if c.startswith(p))] for c in class_columns}
    if len(kinds) > 1:
        raise InputError(f"{name}: the class columns mix logit_ and prob_; give one kind (logits or probabilities)")
    kind = kinds.pop()
    prefix = next(p for p, k in CLASS_PREFIXES.items() if k == kind)
    raw = np.stack([_numbers(name, c, columns[c]) for c in class_columns], axis=1)
    logits, binary = as_logits(name, kind, raw)
    names = [c[len(prefix) :] for c in class_columns]
    class_names = _binary_names(names[0]) if binary else names
    if len(set(class_names)) != len(class_names) or "" in class_names:
        raise InputError(f"{name}: the class columns must each name a class once (logit_<class>)")
    features = [c for c in columns if c.startswith(FEATURE_PREFIX)]
    taken = {*class_columns, *features, label_column, ID_COLUMN}
    labels = None
    if label_column in columns:
        labels = _labels(name, columns[label_column], logits.shape[1], class_names)
    return _checked(
        Predictions(
            name=name,
            logits=logits,
            labels=labels,
            class_names=class_names,
            kind=kind,
            binary=binary,
            ids=columns.get(ID_COLUMN),
            features=np.stack([_numbers(name, c, columns[c]) for c in features], axis=1) if features else None,
            metadata={c: _metadata(name, c, columns[c]) for c in columns if c not in taken},
        )
    )


def _binary_names(positive: str) -> list[str]:
    """A binary classifier's class names from its one column's: ["0", "1"] for `prob_1`, else [not X, X]."""
    return ["0", "1"] if positive == "1" else [f"not {positive}", positive]


def _numbers(name: str, column: str, values: np.ndarray) -> np.ndarray:
    """A column as float64; an InputError naming the first cell that is not a number."""
    if values.dtype.kind in "fiub":
        return values.astype(np.float64)
    try:
        return values.astype(np.float64)
    except ValueError:
        for row, cell in enumerate(values):
            try:
                float(cell)
            except ValueError:
                raise InputError(f"{name}: column {column!r} row {row} is {str(cell)!r}, not a number") from None
        raise


def _metadata(name: str, column: str, values: np.ndarray) -> np.ndarray:
    """A metadata column, typed by the one rule of every metadata (data/metadata.column_values)."""
    from macs_audit.data.metadata import column_values

    return column_values(values, f"{name}: metadata {column!r}")


def _names(name: str, key: str, values: np.ndarray | None, k: int, binary: bool) -> list[str] | None:
    if values is None:
        return None
    names = [str(v) for v in np.asarray(values).reshape(-1)]
    if binary and len(names) == 1:
        names = _binary_names(names[0])
    if len(names) != k:
        raise InputError(f"{name}: {key} names {len(names)} classes but the predictions have {k} columns")
    if len(set(names)) != len(names):
        duplicate = next(n for n in names if names.count(n) > 1)
        raise InputError(f"{name}: {key} names class {duplicate!r} twice")
    return names


def _labels(name: str, values: np.ndarray, k: int, class_names: Sequence[str] | None) -> np.ndarray:
    """Labels as int64 class indices: integers (or whole numbers, or booleans for a binary classifier), or class
    names where the file names its classes. InputError for a label outside the classes."""
    array = np.asarray(values)
    if array.ndim != 1:
        raise InputError(f"{name}: labels must be one per sample (N,), got shape {array.shape}")
    if array.dtype.kind == "U" and class_names is not None and not _all_integers(array):
        index = {class_name: i for i, class_name in enumerate(class_names)}
        unknown = np.flatnonzero([label not in index for label in array])
        if len(unknown):
            row = int(unknown[0])
            raise InputError(
                f"{name}: label {str(array[row])!r} (row {row}) is not a class ({shortened(class_names, 8)}); "
                f"{len(unknown):,} labels are not"
            )
        return np.array([index[label] for label in array], dtype=np.int64)
    if array.dtype.kind == "U":
        if not _all_integers(array):
            row = next(i for i, label in enumerate(array) if not _is_integer(label))
            raise InputError(f"{name}: label {str(array[row])!r} (row {row}) is not a class index")
        array = np.array([int(float(label)) for label in array], dtype=np.int64)
    elif array.dtype.kind == "b":
        array = array.astype(np.int64)
    elif array.dtype.kind == "f":
        whole = np.isfinite(array) & (array == np.round(array))
        if not whole.all():
            row = int(np.flatnonzero(~whole)[0])
            raise InputError(f"{name}: label {str(array[row])!r} (row {row}) is not a class index")
        array = np.array([int(float(label)) for label in array], dtype=np.int64)
    elif array.dtype.kind not in "iu":
        raise InputError(f"{name}: labels must be class indices, got {array.dtype}")
    outside = np.flatnonzero((array < 0) | (array >= k))
    if len(outside):
        row = int(outside[0])
        raise InputError(
            f"{name}: label {int(array[row])} (row {row}) is out of range for {k} classes (0..{k - 1}); "
            f"{len(outside):,} labels are"
        )
    return array.astype(np.int64)


def _is_integer(text: str) -> bool:
    """Whether `text` is a whole number: "3", or "3.0" as pandas writes a float column of labels."""
    try:
        value = float(text)
    except ValueError:
        return False
    return value.is_integer()


def _all_integers(values: np.ndarray) -> bool:
    return all(_is_integer(str(v)) for v in values)


def _companion(name: str, key: str, values: np.ndarray, k: int) -> np.ndarray:
    array = np.asarray(values)
    if array.ndim != 2 or array.shape[1] != k or array.dtype.kind != "f" or len(array) == 0:
        raise InputError(f"{name}: {key} must be (samples, {k}) floating-point logits, got {array.dtype} {array.shape}")
    check_finite(f"{name}: {key}", array)
    return array


def _head(name: str, read: dict[str, np.ndarray], features: np.ndarray | None, k: int) -> SavedHead | None:
    """The saved final layer (HEAD_ARRAYS), checked against the features' dimension and the classes."""
    if "head_weight" not in read:
        return None
    weight = np.asarray(read["head_weight"], dtype=np.float64)
    bias = read.get("head_bias")
    dimension = None if features is None else np.asarray(features).shape[-1]
    if weight.ndim != 2 or weight.shape[0] != k or (dimension is not None and weight.shape[1] != dimension):
        raise InputError(
            f"{name}: head_weight must be (classes {k}, feature dimension {dimension}), got {weight.shape}"
        )
    if bias is not None and np.asarray(bias).shape != (k,):
        raise InputError(f"{name}: head_bias must be ({k},), got {np.asarray(bias).shape}")
    return SavedHead(
        weight,
        None if bias is None else np.asarray(bias, dtype=np.float64),
        _text(read.get("feature_layer")) or "the saved head",
        _text(read.get("feature_source")) or "saved with the predictions",
    )


def _text(value: np.ndarray | None) -> str | None:
    return None if value is None else str(np.asarray(value).reshape(-1)[0]) if np.asarray(value).size else None


def _batch_size(name: str, value: np.ndarray | None) -> int | None:
    if value is None:
        return None
    array = np.asarray(value)
    if array.shape != () or array.dtype.kind not in "iu" or int(array) < 1:
        raise InputError(f"{name}: batch_size must be one positive integer, got {array!r}")
    return int(array)


def _checked(found: Predictions) -> Predictions:
    """The lengths of the per-sample arrays against the logits', and the ids unique."""
    n, name = len(found.logits), found.name
    per_sample: dict[str, Any] = {"labels": found.labels, "ids": found.ids, "features": found.features}
    per_sample.update({f"metadata {key!r}": values for key, values in found.metadata.items()})
    for what, values in per_sample.items():
        if values is not None and len(values) != n:
            raise InputError(f"{name}: {len(values):,} {what} for {n:,} rows of {found.kind}")
    if found.features is not None:
        features = np.asarray(found.features)
        if features.ndim != 2 or features.dtype.kind not in "fiu":
            raise InputError(f"{name}: features must be (samples, dimensions) numbers, got shape {features.shape}")
        check_finite(f"{name}: features", features.astype(np.float64, copy=False))
    for purpose, companion in found.companions.items():
        if companion.features is None:
            continue
        shape, rows = np.asarray(companion.features).shape, len(companion.logits)
        dimension = None if found.features is None else np.asarray(found.features).shape[1]
        if len(shape) != 2 or shape[0] != rows or (dimension is not None and shape[1] != dimension):
            raise InputError(f"{name}: {purpose}_features must be ({rows}, {dimension}), got {shape}")
    if found.ids is not None:
        check_unique_ids(name, found.ids)
    return found


def check_unique_ids(name: str, ids: np.ndarray) -> None:
    """InputError naming an id that appears more than once, with its first two rows."""
    values, first, counts = np.unique(np.asarray(ids), return_index=True, return_counts=True)
    if (counts > 1).any():
        duplicate = values[np.flatnonzero(counts > 1)[0]]
        rows = np.flatnonzero(np.asarray(ids) == duplicate)
        raise InputError(
            f"{name}: id {duplicate.item()!r} appears {len(rows)} times (rows {rows[0]} and {rows[1]}); "
            f"ids must be unique ({int((counts > 1).sum()):,} are not)"
        )


def write_predictions(path: Path, result: Any) -> None:
    """A model audit's predictions (an auditing AuditResult and its report), as `read_predictions` reads them:
    the clean logits and labels, the class names (and the logits' columns' names where they differ), the batch
    size the clean view was accumulated in, the --ood-data and --unlabeled logits with their sources, and the columns
    the images were sliced by, so that `evaluate --predictions` of the file gives the same sections, bit for bit.
    Written atomically."""
    from macs_audit.atomic import atomic_path

    report = result.report
    arrays: dict[str, Any] = {LOGITS: result.logits, "labels": result.labels}
    arrays["class_names"] = np.array(report.data.class_names, dtype=str)
    output_names = result.output_names
    if output_names is not None and list(output_names) != list(report.data.class_names):
        arrays["output_names"] = np.array(output_names, dtype=str)
    if report.runtime.batch_size is not None:
        arrays["batch_size"] = np.array(report.runtime.batch_size, dtype=np.int64)
    if result.head is not None:  # the features the audit read, and the layer they feed
        arrays["features"] = result.features["clean"]
        arrays["head_weight"] = result.head.weight
        if result.head.bias is not None:
            arrays["head_bias"] = result.head.bias
        arrays["feature_layer"] = np.array(result.head.layer, dtype=str)
        arrays["feature_source"] = np.array(result.head.source, dtype=str)
    for purpose, logits in (result.target_logits or {}).items():
        arrays[f"{purpose}_logits"] = logits
        section = getattr(report, purpose)
        arrays[f"{purpose}_source"] = np.array(section.source, dtype=str)
        if section.format is not None:
            arrays[f"{purpose}_format"] = np.array(section.format, dtype=str)
        if purpose in result.features:
            arrays[f"{purpose}_features"] = result.features[purpose]
    # The columns the images were sliced by (a metadata file's, the image properties), so that the audit of the file
    # slices its rows alike: text with "" where missing (read back as missing), numbers with NaN.
    for name, values in (result.columns.columns if result.columns is not None else {}).items():
        text = values.dtype.kind != "f"
        arrays[f"{METADATA_PREFIX}{name}"] = (
            np.array(["" if v is None else v for v in values], dtype=str) if text else values
        )
    with atomic_path(path) as tmp, open(tmp, "wb") as fh:
        np.savez(fh, **arrays)
