"""Per-image metadata for slicing: a file of one row per image (`--metadata`), joined to a data source by key, and
the metadata a source carries itself (an .npz's `meta_<name>` arrays, a WebDataset sample's `.json` member).

A file is `.csv` (a header row), `.jsonl` / `.ndjson` (one JSON object per line) or `.parquet` (pyarrow, the
`parquet` extra). Exactly one column names the image (KEY_COLUMNS): `path` (relative to an image folder's root,
`/`-separated), `key` (a WebDataset sample's key) or `index` (the image's position in the data as read, 0 first;
under --limit still the position in the whole file). Every other column is metadata.

One rule types every metadata column, wherever it comes from (`column_values`, also the predictions files'): a
column whose every value is a number is numeric (float64, NaN where missing), any other is text (str, None where
missing). Values are kept exactly as given; each output format escapes what it shows (`macs_audit.text.printable`).
A column that cannot be sliced (no value, one value, an identifier, too many distinct texts) is dropped from the
columns and listed in the record's `skipped` with the reason.
"""

from __future__ import annotations

import codecs
import csv
import dataclasses
import decimal
import io
import json
import numbers
import re
from collections.abc import Sequence
from pathlib import Path, PurePosixPath
from typing import Any, cast

import numpy as np

from macs_audit.data.shards import FORMAT as SHARDS
from macs_audit.data.shards import KEY as SHARD_KEY
from macs_audit.data.sources import Source
from macs_audit.errors import InputError, UsageError
from macs_audit.text import shortened

KEY_COLUMNS = ("path", "key", "index")  # how a row names its image
MAX_CATEGORIES = 100  # a text column with more distinct values is not sliced (listed as skipped)
SUFFIXES = (".csv", ".jsonl", ".ndjson", ".parquet")
MAX_TEXT_BYTES = 2**30  # a CSV or JSON-lines file is read whole: 1 GiB is millions of rows
# Text that is a number: decimal digits only (float() also takes "1_000" and Unicode digits, which are text here).
NUMBER = re.compile(
    r"\s*[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?\s*|\s*[+-]?(?:inf|infinity|nan)\s*", re.I
)
INDEX = re.compile(r"\s*[0-9]+\s*")
FORMAT_KEYS = {"imagefolder": "path", SHARDS: "key"}  # the key a file may use besides `index`, by the data's format
FORMAT_WORDS = {"path": "an image folder", "key": "WebDataset shards"}


@dataclasses.dataclass(frozen=True)
class MetadataTable:
    """A metadata file as read, before it meets the data."""

    name: str  # the file's path as given (for messages)
    keyed_by: str  # one of KEY_COLUMNS
    keys: list[str] | np.ndarray  # str keys for path / key; int64 for index
    columns: dict[str, np.ndarray]  # column -> (rows,), normalised by `column_values`, in the file's order

    def __len__(self) -> int:
        return len(self.keys)


@dataclasses.dataclass(frozen=True)
class MetadataColumns:
    """Per image of a source, in its order (positions 0..len-1): the sliceable columns and what the report says of
    them. `record`: {"file", "keyed_by", "rows", "matched", "images_without_metadata", "rows_unmatched" (the file's
    join; None / 0 without a file), "columns": {name: {"kind", "missing", "from"}}, "skipped": {name: reason}}."""

    columns: dict[str, np.ndarray]  # float64 with NaN, or object of str with None, where an image has no value
    record: dict


def column_values(raw: Any, where: str = "metadata", rows: Sequence[str] | None = None) -> np.ndarray:
    """The one normaliser of a metadata column: float64 (NaN where missing) when every present cell is a number
    (int, float, or text that reads as one; a boolean is not), else an object array of str (None where missing;
    numbers as their text, booleans "true" / "false"). Missing: None, NaN, an empty string. A nested value (list,
    dict, array) is an InputError naming `where` and the row (`rows[i]` where given, else "row i")."""
    array = raw if isinstance(raw, np.ndarray) else None
    if array is not None and array.ndim != 1:
        raise InputError(f"{where}: expected one value per row, got an array of shape {array.shape}")
    if array is not None and array.dtype.kind in "iuf":
        return array.astype(np.float64)
    if array is not None and array.dtype.kind == "b":
        return np.array(["true" if v else "false" for v in array.tolist()], dtype=object)
    cells = raw.tolist() if array is not None else list(raw)
    kinds = [_cell(cell, where, rows[i] if rows is not None else f"row {i}") for i, cell in enumerate(cells)]
    if all(kind is None or isinstance(kind, float) for kind in kinds):
        return np.array([np.nan if kind is None else kind for kind in kinds], dtype=np.float64)
    out = np.empty(len(cells), dtype=object)
    for i, (cell, kind) in enumerate(zip(cells, kinds, strict=True)):
        out[i] = None if kind is None else kind if isinstance(kind, str) else _text(cell)
    return out


def _cell(cell: Any, where: str, row: str) -> float | str | None:
    """A cell's value: None (missing), a float (a number), or its text."""
    if cell is None:
        return None
    if isinstance(cell, (bool, np.bool_)):
        return "true" if cell else "false"
    if isinstance(cell, (numbers.Real, decimal.Decimal)):
        try:
            value = float(cell)
        except OverflowError:  # an integer past float's range (JSON reads any length): its digits
            return str(cell)
        return None if value != value else value  # NaN is missing
    if isinstance(cell, bytes):
        try:
            cell = cell.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InputError(f"{where}: {row} is not UTF-8 text (byte {exc.start}); store text as UTF-8") from None
    if isinstance(cell, str):
        if cell == "":
            return None
        if NUMBER.fullmatch(cell):
            value = float(cell)
            return None if value != value else value
        return cell
    if isinstance(cell, (list, tuple, dict, set, np.ndarray)):
        raise InputError(
            f"{where}: {row} holds a nested value ({type(cell).__name__}); a metadata cell is a number or text"
        )
    return str(cell)  # a date, a time: its text


def _text(cell: Any) -> str:
    """A number's text in a column of text: as written where it was text (CSV), else Python's (2, 2.0, 0.5)."""
    if isinstance(cell, bytes):
        return cell.decode("utf-8")
    if isinstance(cell, (float, np.floating)):
        return repr(float(cell))
    return str(cell)


# --- reading a file ---------------------------------------------------------------------------------------------


def read_metadata(path: Path) -> MetadataTable:
    """The metadata file at `path` (module docstring); InputError naming the file and the line or row for each fault
    (not UTF-8, a ragged CSV row, a JSON line that is not an object, no key column or several, an empty or
    duplicated key, a bad index, no rows, no column besides the key); UsageError for another suffix."""
    path = Path(path)
    name = str(path)
    suffix = path.suffix.lower()
    if suffix not in SUFFIXES:
        raise UsageError(
            f"{name}: cannot read metadata from a {suffix or 'suffixless'} file; use {', '.join(SUFFIXES)}"
        )
    if not path.is_file():
        raise InputError(f"{name}: no such file" if not path.exists() else f"{name}: not a file")
    if suffix == ".parquet":
        header, cells, rows = _parquet(path)
    else:
        text = _utf8(path)
        header, cells, rows = _csv(name, text) if suffix == ".csv" else _jsonl(name, text)
    if not rows:
        raise InputError(f"{name}: no rows; the file needs one row per image besides its header")
    present = [column for column in KEY_COLUMNS if column in header]
    if not present:
        raise InputError(
            f"{name}: no key column; name each row's image with one column of {', '.join(KEY_COLUMNS)} "
            f"(columns: {shortened(header, 8, 'columns')})"
        )
    if len(present) > 1:
        raise InputError(f"{name}: several key columns ({', '.join(present)}); keep one of them")
    keyed_by = present[0]
    others = [column for column in header if column != keyed_by]
    if not others:
        raise InputError(f"{name}: no column besides the key {keyed_by!r}; add the metadata columns")
    keys = _keys(name, keyed_by, cells[keyed_by], rows)
    columns = {column: column_values(cells[column], f"{name}: column {column!r}", rows) for column in others}
    return MetadataTable(name, keyed_by, keys, columns)


def _utf8(path: Path) -> str:
    """The file's text, decoded strictly (a UTF-8 byte-order mark is dropped, as Excel writes one)."""
    try:
        if path.stat().st_size > MAX_TEXT_BYTES:
            raise InputError(
                f"{path}: larger than {MAX_TEXT_BYTES // 2**30} GiB; a metadata file this large belongs in Parquet"
            )
        data = path.read_bytes()
    except OSError as exc:
        raise InputError(f"cannot read metadata {path}: {exc.strerror or exc}") from None
    start = len(codecs.BOM_UTF8) if data.startswith(codecs.BOM_UTF8) else 0
    try:
        return data[start:].decode("utf-8")
    except UnicodeDecodeError as exc:
        at = start + exc.start
        line = data.count(b"\n", 0, at) + 1
        raise InputError(f"{path}: not UTF-8 text at byte {at:,} (line {line}); save the file as UTF-8") from None


def _csv(name: str, text: str) -> tuple[list[str], dict[str, list], list[str]]:
    """(header, column -> cells, each row's line) of CSV text; a row of another length than the header is an error."""
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        header = [cell.strip() for cell in next(reader, [])]
        if not header:
            raise InputError(f"{name}: the file is empty; it needs a header row and one row per image")
        check_header(name, header)
        body, lines = [], []
        for row in reader:
            if not row:  # a blank line
                continue
            if len(row) != len(header):
                raise InputError(
                    f"{name}: line {reader.line_num} has {len(row)} cells but the header has {len(header)}"
                )
            body.append(row)
            lines.append(f"line {reader.line_num}")
    except csv.Error as exc:
        raise InputError(f"{name}: line {reader.line_num} is not CSV ({exc})") from None
    return header, {column: [row[j] for row in body] for j, column in enumerate(header)}, lines


def check_header(name: str, header: list[str]) -> None:
    """InputError for a table header (a metadata file's, a predictions table's) with an empty or repeated name."""
    seen: set[str] = set()
    for column in header:
        if not column:
            raise InputError(f"{name}: the header has an empty column name")
        if column in seen:
            raise InputError(f"{name}: the header names column {column!r} twice")
        seen.add(column)


def _jsonl(name: str, text: str) -> tuple[list[str], dict[str, list], list[str]]:
    """(columns in first-seen order, column -> cells (None where a line lacks it), each row's line) of JSON lines.
    Lines are cut at "\\n" only: a JSON string may hold U+2028 and the other breaks str.splitlines() cuts at."""
    objects, lines = [], []
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except (ValueError, RecursionError) as exc:
            why = "nested too deeply" if isinstance(exc, RecursionError) else getattr(exc, "msg", str(exc))
            raise InputError(f"{name}: line {number} is not JSON ({why}); write one JSON object per line") from None
        if not isinstance(value, dict):
            raise InputError(f"{name}: line {number} holds a JSON {type(value).__name__}, not an object")
        for column, cell in value.items():
            if isinstance(cell, (list, dict)):
                raise InputError(
                    f"{name}: line {number}: {column!r} holds a nested value ({type(cell).__name__}); "
                    "a metadata cell is a number or text"
                )
        objects.append(value)
        lines.append(f"line {number}")
    header = list(dict.fromkeys(column for value in objects for column in value))
    return header, {column: [value.get(column) for value in objects] for column in header}, lines


def _parquet(path: Path) -> tuple[list[str], dict[str, list], list[str]]:
    """(columns, column -> cells as Python values, None where null, each row's name) of a Parquet file."""
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise UsageError(f"{path}: reading Parquet needs pyarrow: pip install 'macs-audit[parquet]'") from None
    try:
        table = pq.read_table(path)
    except (OSError, ValueError) as exc:  # pyarrow's ArrowInvalid is a ValueError
        raise InputError(f"{path}: cannot read it as Parquet ({exc})") from None
    header = list(table.column_names)
    check_header(str(path), header)
    cells = {column: table.column(column).to_pylist() for column in header}
    return header, cells, [f"row {i}" for i in range(table.num_rows)]


def _keys(name: str, keyed_by: str, cells: list, rows: list[str]) -> list[str] | np.ndarray:
    """The key column's cells: text (path, key) or non-negative integers (index); empty or duplicated ones refused."""
    keys: list[Any] = []
    for cell, row in zip(cells, rows, strict=True):
        if cell is None or cell == "":
            raise InputError(f"{name}: {row}: the {keyed_by!r} cell is empty; every row names its image")
        keys.append(_index(name, cell, row) if keyed_by == "index" else _key_text(name, keyed_by, cell, row))
    first: dict[Any, int] = {}
    duplicated: dict[Any, int] = {}  # key -> the row it comes back at first
    for i, key in enumerate(keys):
        if key in first:
            duplicated.setdefault(key, i)
        else:
            first[key] = i
    if duplicated:
        key = min(duplicated, key=lambda k: first[k])
        raise InputError(
            f"{name}: {keyed_by} {key!r} appears more than once ({rows[first[key]]} and {rows[duplicated[key]]}); "
            f"keys must be unique ({len(duplicated):,} are duplicated)"
        )
    return np.asarray(keys, dtype=np.int64) if keyed_by == "index" else keys


def _index(name: str, cell: Any, row: str) -> int:
    """An `index` cell as an int: an integer, a whole float, or digits."""
    value: int | None = None
    if isinstance(cell, (int, np.integer)) and not isinstance(cell, (bool, np.bool_)):
        value = int(cell)
    elif isinstance(cell, float) and cell.is_integer():
        value = int(cell)
    elif isinstance(cell, str) and INDEX.fullmatch(cell):
        value = int(cell)
    if value is None or not 0 <= value < 2**63:
        raise InputError(
            f"{name}: {row}: index {cell!r} is not a non-negative integer (an image's position in the data, 0 first)"
        )
    return value


def _key_text(name: str, keyed_by: str, cell: Any, row: str) -> str:
    """A `path` or `key` cell as text; a path written `./a/b.png` or `a//b.png` is the path a/b.png."""
    if isinstance(cell, (int, np.integer)) and not isinstance(cell, (bool, np.bool_)):
        cell = str(cell)
    if not isinstance(cell, str):
        raise InputError(f"{name}: {row}: the {keyed_by!r} cell holds {cell!r}, not text")
    return PurePosixPath(cell).as_posix() if keyed_by == "path" else cell


# --- joining it to the data -------------------------------------------------------------------------------------


def source_keys(source: Source, keyed_by: str) -> list[str] | np.ndarray:
    """Each position's key of `source` (0..len-1): `path` its file relative to the image folder's root (POSIX form),
    `key` its WebDataset sample's key, `index` its position in the data as read (under a subset, in the whole set).
    UsageError for a key the source's format has not."""
    underlying = source.indices if source.indices is not None else np.arange(len(source), dtype=np.int64)
    if keyed_by == "index":
        return np.asarray(underlying, dtype=np.int64)
    if keyed_by not in FORMAT_KEYS.values():
        raise UsageError(f"metadata cannot be keyed by {keyed_by!r}; use one of {', '.join(KEY_COLUMNS)}")
    own = FORMAT_KEYS.get(source.format)
    if own != keyed_by:
        other = f"key it by {own} or by index" if own else "key it by index"
        raise UsageError(
            f"metadata keyed by {keyed_by} needs --data to be {FORMAT_WORDS[keyed_by]}; {source.name} is "
            f"{source.format}: {other}"
        )
    fetch = cast(Any, source.fetch)
    if keyed_by == "path":
        root = Path(source.name)
        return [_relative(Path(fetch.files[i]), root) for i in underlying.tolist()]
    names = fetch.index.names
    return [cast(re.Match, SHARD_KEY.match(names[i])).group(1) for i in underlying.tolist()]


def _relative(file: Path, root: Path) -> str:
    try:
        return file.relative_to(root).as_posix()
    except ValueError:
        return file.as_posix()


def join_metadata(table: MetadataTable | None, source: Source) -> MetadataColumns:
    """`table`'s columns per image of `source` (missing where an image has no row) and the source's own metadata
    (`Source.metadata`), the columns that cannot be sliced set aside (module docstring). InputError for a file that
    names no image of the data, for a column both in the file and in the data, or for keys the data repeats."""
    n = len(source)
    own = {
        column: column_values(raw, f"{source.name}: metadata {column!r}")
        for column, raw in source.metadata_at(np.arange(n, dtype=np.int64)).items()
    }
    keys = source_keys(source, table.keyed_by) if table is not None else None
    return join_keys(table, keys, n, source.name, own, source.format)


def join_keys(
    table: MetadataTable | None,
    keys: list[str] | np.ndarray | None,
    n: int,
    data: str,
    own: dict[str, np.ndarray],
    origin: str,
) -> MetadataColumns:
    """`table`'s columns per item of a data set of `n` items named `data`, matched by each item's key of the table's
    kind (`keys`), and the data's `own` columns (normalised, from `origin`: "npz", "shards", "predictions"): the
    columns that cannot be sliced set aside. InputError for a file that names no item, for a column both in the
    file and in the data, or for keys the data repeats."""
    columns: dict[str, np.ndarray] = {}
    origins: dict[str, str] = {}
    record = _no_file()
    if table is not None:
        assert keys is not None
        rows = _rows_of(table, keys, data)
        hit = rows >= 0
        matched = int(hit.sum())
        record.update(
            file=table.name,
            keyed_by=table.keyed_by,
            rows=len(table),
            matched=matched,
            images_without_metadata=n - matched,
            rows_unmatched=len(table) - len(np.unique(rows[hit])),
        )
        for column, values in table.columns.items():
            out = np.full(n, np.nan) if values.dtype.kind == "f" else np.full(n, None, dtype=object)
            out[hit] = values[rows[hit]]
            columns[column], origins[column] = out, "file"
    for column, values in own.items():
        if column in columns:
            raise InputError(
                f"metadata column {column!r} is both in {record['file']} and in {data} ({origin}); rename one of them"
            )
        columns[column], origins[column] = values, origin
    return metadata_from(columns, origins, record)


def _rows_of(table: MetadataTable, keys: list[str] | np.ndarray, data: str) -> np.ndarray:
    """For each item's key, the table row of its key, -1 where none; InputError where none matches."""
    wanted = keys.tolist() if isinstance(keys, np.ndarray) else keys
    if table.keyed_by != "index":  # an index names one image; a shard key may come back in another shard
        seen: set[str] = set()
        for key in wanted:
            if key in seen:
                raise InputError(
                    f"{data}: the {table.keyed_by} {key!r} names more than one image, so metadata keyed by "
                    f"{table.keyed_by} is ambiguous; key it by index"
                )
            seen.add(key)
    table_keys = table.keys.tolist() if isinstance(table.keys, np.ndarray) else table.keys
    row_of = {key: i for i, key in enumerate(table_keys)}
    rows = np.fromiter((row_of.get(key, -1) for key in wanted), dtype=np.int64, count=len(wanted))
    if not (rows >= 0).any():
        raise InputError(
            f"{table.name}: none of its {len(table):,} keys (keyed by {table.keyed_by}) name an image of "
            f"{data}; e.g. {table_keys[0]!r}, where the data's are like {wanted[0]!r}"
        )
    return rows


def _no_file() -> dict[str, Any]:
    """The join counts of a record without a metadata file."""
    return {"file": None, "keyed_by": None, "rows": 0, "matched": 0, "images_without_metadata": 0, "rows_unmatched": 0}


def metadata_from(
    columns: dict[str, np.ndarray], origins: dict[str, str] | str, record: dict | None = None
) -> MetadataColumns:
    """MetadataColumns of per-image `columns` already normalised by `column_values` (a predictions file's, or a
    join's), each from `origins` ("file", "npz", "shards", "predictions"; one for all, or per column): the columns
    that cannot be sliced moved to `skipped`. `record`: the file's join counts (None: no file)."""
    out = dict(record or _no_file())
    kept: dict[str, np.ndarray] = {}
    described: dict[str, dict] = {}
    skipped: dict[str, str] = {}
    for column, values in columns.items():
        reason = unsliceable(values)
        if reason is not None:
            skipped[column] = reason
            continue
        numeric = values.dtype.kind == "f"
        missing = int(np.isnan(values).sum()) if numeric else sum(v is None for v in values)
        kept[column] = values
        origin = origins if isinstance(origins, str) else origins[column]
        described[column] = {"kind": "numeric" if numeric else "categorical", "missing": missing, "from": origin}
    out["columns"], out["skipped"] = described, skipped
    return MetadataColumns(kept, out)


def unsliceable(values: np.ndarray) -> str | None:
    """Why a normalised column (`column_values`) cannot be sliced, in words for the report's `skipped`, or None:
    no value, one value, a different text for every image (an identifier), more than MAX_CATEGORIES texts."""
    if values.dtype.kind == "f":
        present = values[~np.isnan(values)]
        distinct = np.unique(present)
        if not len(present):
            return "no value for any image"
        if len(distinct) == 1 and len(present) == len(values):
            return f"one value, {float(distinct[0]):g}, for every image"
        return None
    texts = [v for v in values if v is not None]
    if not texts:
        return "no value for any image"
    distinct_texts = set(texts)
    if len(distinct_texts) == 1:  # with images lacking it, the marked images against the rest
        return f"one value, {_shown(texts[0])}, for every image" if len(texts) == len(values) else None
    if len(distinct_texts) == len(texts):
        return f"a different value for every image ({len(texts):,}): an identifier, not a category"
    if len(distinct_texts) > MAX_CATEGORIES:
        return f"{len(distinct_texts):,} distinct values, more than the {MAX_CATEGORIES} a sliced text column may have"
    return None


def _shown(value: str, limit: int = 40) -> str:
    """A value as a reason quotes it: repr (so that control characters are escapes), cut at `limit` characters."""
    return repr(value if len(value) <= limit else value[:limit] + "...")
