"""Per-image metadata: files written in each format (CSV, JSON lines, Parquet) read and joined to real data sources
(an image folder of PNGs, WebDataset shards written with tarfile, an .npz with its own meta_ arrays, an array set
cut by --limit); each bad input a one-line error naming the file and the place; values kept byte for byte."""

from __future__ import annotations

import csv
import io
import json
import tarfile
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from macs_audit.data.metadata import (
    MAX_CATEGORIES,
    column_values,
    join_metadata,
    metadata_from,
    read_metadata,
    source_keys,
)
from macs_audit.data.shards import MAX_JSON_BYTES, index_shards, load_shards
from macs_audit.data.sources import array_source, load_source
from macs_audit.data.splits import stratified_subset
from macs_audit.errors import InputError, UsageError

HOSTILE = ["\x1b[2J", "a\nb", "\u202eevil", "tab\there", "cr\r\nlf", "zero\u200bwidth", "quote\"'", "é😀"]


def png(value: int = 0) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(np.full((8, 8, 3), value, dtype=np.uint8)).save(buffer, format="PNG")
    return buffer.getvalue()


def image_folder(root: Path, classes=("cat", "dog"), per_class: int = 3) -> Path:
    """root/<class>/<i>.png, every image a different grey."""
    for c, name in enumerate(classes):
        (root / name).mkdir(parents=True)
        for i in range(per_class):
            (root / name / f"{i}.png").write_bytes(png(10 * c + i))
    return root


def shard(path: Path, samples: dict[str, dict[str, bytes]]) -> Path:
    """One uncompressed tar, each sample's members `<key>.<field>` in order (the layout webdataset writes)."""
    with tarfile.open(path, "w") as tar:
        for key, members in samples.items():
            for field, data in members.items():
                info = tarfile.TarInfo(f"{key}.{field}")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return path


def write_csv(path: Path, rows: list[list[str]]) -> Path:
    with open(path, "w", newline="", encoding="utf-8") as fh:
        csv.writer(fh).writerows(rows)
    return path


def write_jsonl(path: Path, objects: list[dict]) -> Path:
    path.write_text("".join(json.dumps(o) + "\n" for o in objects), encoding="utf-8")
    return path


def write_parquet(path: Path, columns: dict[str, list]) -> Path:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    pq.write_table(pa.table(columns), path)
    return path


def as_list(values: np.ndarray) -> list:
    """A column with NaN written as None, for comparison."""
    return [None if isinstance(v, float) and np.isnan(v) else v for v in values.tolist()]


# --- joined to each kind of data ------------------------------------------------------------------------------


def test_a_csv_keyed_by_path_joins_an_image_folder(tmp_path):
    source = load_source(image_folder(tmp_path / "images"))
    assert source_keys(source, "path") == ["cat/0.png", "cat/1.png", "cat/2.png", "dog/0.png", "dog/1.png", "dog/2.png"]
    rows = [
        ["path", "site", "iso"],
        ["dog/2.png", "b", "800"],
        ["./cat/0.png", "a", "100"],  # ./ is the same path
        ["cat/1.png", "a", ""],  # a missing value
        ["dog/0.png", "b", "400"],
        ["elsewhere/9.png", "c", "5"],  # names no image
    ]
    table = read_metadata(write_csv(tmp_path / "meta.csv", rows))
    assert table.keyed_by == "path" and list(table.columns) == ["site", "iso"] and len(table) == 5
    joined = join_metadata(table, source)
    assert as_list(joined.columns["site"]) == ["a", "a", None, "b", None, "b"]
    assert as_list(joined.columns["iso"]) == [100.0, None, None, 400.0, None, 800.0]
    assert joined.columns["iso"].dtype == np.float64 and joined.columns["site"].dtype == object
    record = joined.record
    assert {k: record[k] for k in ("file", "keyed_by", "rows", "matched", "images_without_metadata")} == {
        "file": str(tmp_path / "meta.csv"),
        "keyed_by": "path",
        "rows": 5,
        "matched": 4,
        "images_without_metadata": 2,
    }
    assert record["rows_unmatched"] == 1 and record["skipped"] == {}
    assert record["columns"] == {
        "site": {"kind": "categorical", "missing": 2, "from": "file"},
        "iso": {"kind": "numeric", "missing": 3, "from": "file"},
    }
    json.dumps(record)  # the report's: JSON-able


def test_a_flat_folder_of_unlabeled_images_is_keyed_by_file_name(tmp_path):
    root = tmp_path / "flat"
    root.mkdir()
    for i in range(4):
        (root / f"img{i}.png").write_bytes(png(i))
    source = load_source(root, labeled=False)
    assert source_keys(source, "path") == [f"img{i}.png" for i in range(4)]
    table = read_metadata(write_jsonl(tmp_path / "m.jsonl", [{"path": f"img{i}.png", "g": i % 2} for i in range(4)]))
    assert join_metadata(table, source).columns["g"].tolist() == [0.0, 1.0, 0.0, 1.0]


def test_jsonl_keyed_by_key_joins_shards_and_their_own_json_members(tmp_path):
    samples = {
        "k1": {"png": png(1), "cls": b"0", "json": json.dumps({"camera": "x100", "lux": 3}).encode()},
        "k2": {"png": png(2), "cls": b"1", "json": json.dumps({"camera": "x200"}).encode()},  # no lux: missing
        "k3": {"png": png(3), "cls": b"0"},  # no .json at all
        "k4": {"png": png(4), "cls": b"1", "json": json.dumps({"camera": "x100", "lux": 7.5}).encode()},
    }
    spec = str(shard(tmp_path / "s-000.tar", samples))
    source = load_shards(spec, None)
    assert source_keys(source, "key") == ["k1", "k2", "k3", "k4"]
    assert source.fetch.index.metadata == ()  # type: ignore[attr-defined]  # the source holds it, not the workers'
    objects = [{"key": "k4", "site": "north"}, {"key": "k1", "site": "south"}, {"key": "k2", "site": "north"}]
    joined = join_metadata(read_metadata(write_jsonl(tmp_path / "m.ndjson", objects)), source)
    assert list(joined.columns) == ["site", "camera", "lux"]
    assert as_list(joined.columns["site"]) == ["south", "north", None, "north"]
    assert as_list(joined.columns["camera"]) == ["x100", "x200", None, "x100"]
    assert as_list(joined.columns["lux"]) == [3.0, None, None, 7.5]
    assert joined.record["columns"]["camera"] == {"kind": "categorical", "missing": 1, "from": "shards"}
    assert joined.record["images_without_metadata"] == 1 and joined.record["rows_unmatched"] == 0
    only_shards = join_metadata(None, source)
    assert list(only_shards.columns) == ["camera", "lux"] and only_shards.record["file"] is None


def test_shards_json_members_missing_fields_and_faults(tmp_path):
    good = {"a": {"png": png(), "cls": b"0", "json": b'{"x": 1, "y": "u"}'}, "b": {"png": png(), "cls": b"1"}}
    index = index_shards([shard(tmp_path / "ok.tar", good)])
    assert index.metadata == ({"x": 1, "y": "u"}, None)
    faults = {
        "nested.tar": (b'{"x": [1, 2]}', r"nested\.tar:a\.json: field 'x' holds a nested value \(list\)"),
        "array.tar": (b"[1, 2]", r"array\.tar:a\.json: holds a JSON list"),
        "broken.tar": (b'{"x": ', r"broken\.tar:a\.json: not JSON"),
        "latin1.tar": (b'{"x": "\xe9"}', r"latin1\.tar:a\.json: not UTF-8 text at byte 7"),
        "deep.tar": (b"[" * 30_000 + b"]" * 30_000, r"deep\.tar:a\.json: not JSON \(nested too deeply\)"),
        "big.tar": (b" " * (MAX_JSON_BYTES + 1), r"big\.tar:a\.json: a \.json member of 65,537 bytes"),
    }
    for name, (data, message) in faults.items():
        path = shard(tmp_path / name, {"a": {"png": png(), "cls": b"0", "json": data}})
        with pytest.raises(InputError, match=message) as caught:
            index_shards([path])
        assert "\n" not in str(caught.value)


def test_npz_meta_arrays_and_a_file_keyed_by_index_under_a_limit(tmp_path):
    x = np.zeros((6, 4, 4, 3), dtype=np.uint8)
    y = np.array([0, 1, 0, 1, 0, 1])
    np.savez(tmp_path / "d.npz", x=x, y=y, meta_site=np.array(["a", "b", "a", "b", "c", "c"]), meta_t=np.arange(6.0))
    source = load_source(tmp_path / "d.npz")
    assert sorted(source.metadata) == ["site", "t"]
    subset = source.subset(np.array([5, 1, 3, 4]))  # as --limit cuts it: positions in the whole file
    assert source_keys(subset, "index").tolist() == [5, 1, 3, 4]
    assert subset.metadata_at(np.arange(4))["site"].tolist() == ["c", "b", "b", "c"]
    rows = [["index", "weather"], ["1", "rain"], ["5", "sun"], ["0", "rain"], ["3", "rain"], ["2", "sun"]]
    joined = join_metadata(read_metadata(write_csv(tmp_path / "w.csv", rows)), subset)
    assert as_list(joined.columns["weather"]) == ["sun", "rain", "rain", None]
    assert joined.columns["t"].tolist() == [5.0, 1.0, 3.0, 4.0]
    assert joined.record["columns"]["site"]["from"] == "npz" and joined.record["columns"]["weather"]["from"] == "file"
    counts = [joined.record[k] for k in ("rows", "matched", "images_without_metadata", "rows_unmatched")]
    assert counts == [5, 3, 1, 2]


def test_parquet_keyed_by_index_joins_an_array_set_cut_by_limit(tmp_path):
    x = np.zeros((40, 4, 4, 3), dtype=np.uint8)
    labels = np.arange(40) % 4
    source = array_source("arrays", "builtin", x, labels, ["a", "b", "c", "d"])
    chosen = stratified_subset(source.labels, 10, seed=1)
    subset = source.subset(chosen)
    path = write_parquet(
        tmp_path / "m.parquet",
        {"index": list(range(40)), "blur": [i / 10 for i in range(40)], "kind": ["x", "y", None, "z"] * 10},
    )
    table = read_metadata(path)
    assert table.keys.dtype == np.int64
    joined = join_metadata(table, subset)
    np.testing.assert_allclose(joined.columns["blur"], chosen / 10)
    assert as_list(joined.columns["kind"]) == [["x", "y", None, "z"][i % 4] for i in chosen]
    assert joined.record["rows_unmatched"] == 30 and joined.record["images_without_metadata"] == 0


def test_parquet_without_pyarrow_names_the_extra(tmp_path, monkeypatch):
    import builtins

    real = builtins.__import__

    def no_pyarrow(name, *args, **kwargs):
        if name.startswith("pyarrow"):
            raise ImportError(name)
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_pyarrow)
    (tmp_path / "m.parquet").write_bytes(b"PAR1")
    with pytest.raises(UsageError, match=r"pip install 'macs-audit\[parquet\]'"):
        read_metadata(tmp_path / "m.parquet")


# --- typing -----------------------------------------------------------------------------------------------------


def test_column_values_types_numbers_and_text():
    numeric = column_values(["1", "2.5", "", None, "-3e2", " 4 ", "nan", float("nan")])
    assert numeric.dtype == np.float64 and as_list(numeric) == [1.0, 2.5, None, None, -300.0, 4.0, None, None]
    assert column_values(np.array([3, 4], dtype=np.int16)).dtype == np.float64
    mixed = column_values(["1.50", "x", 2, 2.0, None, ""])  # numbers in a text column: their text
    assert mixed.dtype == object and mixed.tolist() == ["1.50", "x", "2", "2.0", None, None]
    assert column_values([True, False, None]).tolist() == ["true", "false", None]  # booleans are not numbers
    assert column_values(np.array([True, False])).tolist() == ["true", "false"]
    assert column_values(["1_000", "٣"]).tolist() == ["1_000", "٣"]  # float() reads them; they are text here
    assert column_values(np.array([b"a", b"b"])).tolist() == ["a", "b"]
    assert column_values([10**400, "x"]).tolist() == [str(10**400), "x"]  # past float's range: its digits
    with pytest.raises(InputError, match=r"f\.csv: column 'c': line 3 holds a nested value \(list\)"):
        column_values(["a", [1]], "f.csv: column 'c'", ["line 2", "line 3"])
    with pytest.raises(InputError, match=r"m: expected one value per row, got an array of shape \(2, 2\)"):
        column_values(np.zeros((2, 2)), "m")


def test_csv_numbers_read_as_pandas_reads_them(tmp_path):
    pd = pytest.importorskip("pandas")
    rows = [["index", "a", "b"], ["0", "1", ""], ["1", "2.5", "7"], ["2", "", "-1e3"], ["3", "NaN", "8"]]
    path = write_csv(tmp_path / "n.csv", rows)
    table = read_metadata(path)
    reference = pd.read_csv(path)
    for column in ("a", "b"):
        np.testing.assert_array_equal(table.columns[column], reference[column].to_numpy(dtype=np.float64))


def test_nan_counts_as_missing_and_unsliceable_columns_are_skipped(tmp_path):
    n = 2 * (MAX_CATEGORIES + 10)
    rows = [["index", "score", "constant", "ident", "many", "empty", "good", "half"]]
    for i in range(n):
        rows.append(
            [
                str(i),
                "nan" if i % 4 == 0 else str(i % 3),
                "same",
                f"id-{i}",
                f"v{i // 2}",  # 110 distinct values, each twice
                "",
                "ab"[i % 2],
                "only" if i % 2 else "",
            ]
        )
    source = array_source("arrays", "builtin", np.zeros((n, 2, 2, 3), np.uint8), np.zeros(n, np.int64), ["c"])
    joined = join_metadata(read_metadata(write_csv(tmp_path / "m.csv", rows)), source)
    assert list(joined.columns) == ["score", "good", "half"]  # a value on half the images: those against the rest
    assert joined.record["columns"]["score"]["missing"] == n // 4
    assert np.isnan(joined.columns["score"]).sum() == n // 4
    skipped = joined.record["skipped"]
    assert skipped["constant"] == "one value, 'same', for every image"
    assert "an identifier" in skipped["ident"]
    assert f"110 distinct values, more than the {MAX_CATEGORIES} a sliced" in skipped["many"]
    assert skipped["empty"] == "no value for any image"
    assert "half" not in skipped and joined.record["columns"]["half"]["missing"] == n // 2
    numeric = metadata_from({"flat": np.full(5, 2.0)}, "predictions")
    assert numeric.columns == {} and numeric.record["skipped"] == {"flat": "one value, 2, for every image"}
    kept = metadata_from({"site": np.array(["a", "b", "a"], dtype=object)}, "predictions")
    assert kept.record["columns"]["site"] == {"kind": "categorical", "missing": 0, "from": "predictions"}


def test_hostile_values_survive_byte_for_byte(tmp_path):
    n = len(HOSTILE)
    values = HOSTILE
    rows = [["index", "v"]] + [[str(i), v] for i, v in enumerate(values)]
    read = {
        "csv": read_metadata(write_csv(tmp_path / "h.csv", rows)),
        "jsonl": read_metadata(write_jsonl(tmp_path / "h.jsonl", [{"index": i, "v": v} for i, v in enumerate(values)])),
    }
    try:
        read["parquet"] = read_metadata(write_parquet(tmp_path / "h.parquet", {"index": list(range(n)), "v": values}))
    except pytest.skip.Exception:
        pass
    for kind, table in read.items():
        assert table.columns["v"].tolist() == values, kind
    line_separator = read_metadata(write_jsonl(tmp_path / "ls.jsonl", [{"index": 0, "v": "a\u2028b\x85c"}]))
    assert line_separator.columns["v"].tolist() == ["a\u2028b\x85c"]  # JSON lines are cut at \n only
    np.savez(tmp_path / "h.npz", x=np.zeros((n, 2, 2, 3), np.uint8), y=np.zeros(n, np.int64), meta_v=np.array(values))
    joined = join_metadata(None, load_source(tmp_path / "h.npz"))
    assert "v" in joined.record["skipped"]  # a value per image: an identifier, but read intact
    assert load_source(tmp_path / "h.npz").metadata["v"].tolist() == values
    spec = shard(
        tmp_path / "h.tar",
        {f"s{i}": {"png": png(), "json": json.dumps({"v": v}).encode()} for i, v in enumerate(values)},
    )
    assert load_shards(str(spec), None, labeled=False).metadata["v"].tolist() == values
    key = read_metadata(write_jsonl(tmp_path / "k.jsonl", [{"key": "\x1b[31mk", "v": 1}, {"key": "b", "v": 2}]))
    assert key.keys == ["\x1b[31mk", "b"]
    constant = metadata_from({"v": np.array(["\x1b[2J"] * 3, dtype=object)}, "file")
    assert constant.record["skipped"]["v"] == "one value, '\\x1b[2J', for every image"  # a reason quotes it escaped


# --- faults -----------------------------------------------------------------------------------------------------


def _text(name: str, content: str | bytes):
    def make(tmp: Path) -> Path:
        data = content.encode() if isinstance(content, str) else content
        (tmp / name).write_bytes(data)
        return tmp / name

    return make


FAULTS = [
    ("latin-1", _text("m.csv", b"path,v\na.png,caf\xe9\n"), r"m\.csv: not UTF-8 text at byte 16 \(line 2\)"),
    ("ragged", _text("m.csv", "path,v\na.png,1\nb.png,2,3\n"), r"m\.csv: line 3 has 3 cells but the header has 2"),
    ("empty-csv", _text("m.csv", ""), r"m\.csv: the file is empty"),
    ("header-only", _text("m.csv", "path,v\n"), r"m\.csv: no rows"),
    ("empty-jsonl", _text("m.jsonl", "\n \n"), r"m\.jsonl: no rows"),
    ("no-key", _text("m.csv", "file,v\na,1\n"), r"m\.csv: no key column; .* path, key, index \(columns: file, v\)"),
    ("two-keys", _text("m.csv", "path,index,v\na,1,2\n"), r"m\.csv: several key columns \(path, index\)"),
    ("key-only", _text("m.csv", "path\na.png\n"), r"m\.csv: no column besides the key 'path'"),
    ("empty-key", _text("m.csv", "path,v\na.png,1\n,2\n"), r"m\.csv: line 3: the 'path' cell is empty"),
    (
        "json-null-key",
        _text("m.jsonl", '{"key": "a", "v": 1}\n{"v": 2}\n'),
        r"m\.jsonl: line 2: the 'key' cell is empty",
    ),
    (
        "duplicates",
        _text("m.csv", "key,v\nb,1\na,1\na,2\nb,3\nc,1\nc,2\n"),
        r"m\.csv: key 'b' appears more than once \(line 2 and line 5\); keys must be unique \(3 are duplicated\)",
    ),
    ("fraction-index", _text("m.csv", "index,v\n0,a\n1.5,b\n"), r"m\.csv: line 3: index '1\.5' is not a non-negative"),
    ("text-index", _text("m.csv", "index,v\nx,a\n"), r"m\.csv: line 2: index 'x' is not a non-negative integer"),
    (
        "negative-index",
        _text("m.jsonl", '{"index": -1, "v": 1}\n'),
        r"m\.jsonl: line 1: index -1 is not a non-negative",
    ),
    (
        "bool-index",
        _text("m.jsonl", '{"index": true, "v": 1}\n'),
        r"m\.jsonl: line 1: index True is not a non-negative",
    ),
    ("huge-index", _text("m.jsonl", '{"index": 1e30, "v": 1}\n'), r"index 1e\+30 is not a non-negative"),
    ("not-json", _text("m.jsonl", '{"path": "a", "v": 1}\n{"path": \n'), r"m\.jsonl: line 2 is not JSON"),
    (
        "json-array",
        _text("m.jsonl", '{"path": "a", "v": 1}\n\n[1, 2]\n'),
        r"m\.jsonl: line 3 holds a JSON list, not an",
    ),
    (
        "deep-json",
        _text("m.jsonl", "[" * 100_000 + "]" * 100_000 + "\n"),
        r"m\.jsonl: line 1 is not JSON \(nested too deeply\)",
    ),
    (
        "long-number",
        _text("m.jsonl", '{"index": 0, "v": ' + "9" * 5000 + "}\n"),
        r"m\.jsonl: line 1 is not JSON \(Exceeds the limit",
    ),
    (
        "nested",
        _text("m.jsonl", '{"path": "a", "v": {"x": 1}}\n'),
        r"m\.jsonl: line 1: 'v' holds a nested value \(dict\)",
    ),
    ("header-twice", _text("m.csv", "path,v,v\na,1,2\n"), r"m\.csv: the header names column 'v' twice"),
    ("empty-header", _text("m.csv", "path,,v\na,1,2\n"), r"m\.csv: the header has an empty column name"),
    ("key-not-text", _text("m.jsonl", '{"path": 1.5, "v": 1}\n'), r"m\.jsonl: line 1: the 'path' cell holds 1\.5"),
    ("bad-parquet", _text("m.parquet", b"not parquet"), r"m\.parquet: cannot read it as Parquet"),
]


@pytest.mark.parametrize("make, message", [f[1:] for f in FAULTS], ids=[f[0] for f in FAULTS])
def test_bad_files_are_one_line_input_errors(tmp_path, make, message):
    path = make(tmp_path)
    if path.suffix == ".parquet":
        pytest.importorskip("pyarrow")
    with pytest.raises(InputError, match=message) as caught:
        read_metadata(path)
    assert "\n" not in str(caught.value) and str(path) in str(caught.value)


def test_another_suffix_is_a_usage_error(tmp_path):
    with pytest.raises(UsageError, match=r"m\.xlsx: cannot read metadata from a \.xlsx file; use \.csv, \.jsonl"):
        read_metadata(tmp_path / "m.xlsx")
    with pytest.raises(InputError, match=r"missing\.csv: no such file"):
        read_metadata(tmp_path / "missing.csv")
    (tmp_path / "folder.jsonl").mkdir()
    with pytest.raises(InputError, match=r"folder\.jsonl: not a file"):
        read_metadata(tmp_path / "folder.jsonl")


def test_a_parquet_nested_column_names_the_row(tmp_path):
    path = write_parquet(tmp_path / "n.parquet", {"index": [0, 1], "tags": [["a"], ["b", "c"]]})
    with pytest.raises(InputError, match=r"n\.parquet: column 'tags': row 0 holds a nested value \(list\)"):
        read_metadata(path)


def test_a_file_naming_no_image_is_refused(tmp_path):
    source = load_source(image_folder(tmp_path / "images"))
    table = read_metadata(write_csv(tmp_path / "m.csv", [["path", "v"], ["0.png", "a"], ["x/1.png", "b"]]))
    with pytest.raises(InputError, match=r"m\.csv: none of its 2 keys \(keyed by path\) name an image of .*images; "):
        join_metadata(table, source)


def test_a_column_in_both_the_file_and_the_npz_is_refused(tmp_path):
    np.savez(
        tmp_path / "d.npz", x=np.zeros((3, 2, 2, 3), np.uint8), y=np.array([0, 1, 0]), meta_site=np.array([1, 2, 3])
    )
    table = read_metadata(write_csv(tmp_path / "m.csv", [["index", "site"], ["0", "a"], ["1", "b"]]))
    with pytest.raises(InputError, match=r"metadata column 'site' is both in .*m\.csv and in .*d\.npz \(npz\)"):
        join_metadata(table, load_source(tmp_path / "d.npz"))


def test_npz_meta_arrays_of_another_shape_are_refused(tmp_path):
    x, y = np.zeros((3, 2, 2, 3), np.uint8), np.array([0, 1, 0])
    np.savez(tmp_path / "short.npz", x=x, y=y, meta_site=np.array([1, 2]))
    with pytest.raises(InputError, match=r"short\.npz: metadata array 'meta_site' has shape \(2,\); .* \(3,\)"):
        load_source(tmp_path / "short.npz")
    np.savez(tmp_path / "wide.npz", x=x, y=y, meta_site=np.zeros((3, 2)))
    with pytest.raises(InputError, match=r"'meta_site' has shape \(3, 2\)"):
        load_source(tmp_path / "wide.npz")


def test_a_key_the_data_has_not_is_a_usage_error(tmp_path):
    np.savez(tmp_path / "d.npz", x=np.zeros((2, 2, 2, 3), np.uint8), y=np.array([0, 1]))
    npz = load_source(tmp_path / "d.npz")
    folder = load_source(image_folder(tmp_path / "images"))
    spec = shard(tmp_path / "s.tar", {"a": {"png": png(), "cls": b"0"}})
    shards = load_shards(str(spec), None)
    with pytest.raises(
        UsageError, match=r"keyed by path needs --data to be an image folder; .*d\.npz is npz: key it by index"
    ):
        source_keys(npz, "path")
    with pytest.raises(
        UsageError, match=r"keyed by key needs --data to be WebDataset shards; .* is imagefolder: key it by path"
    ):
        source_keys(folder, "key")
    with pytest.raises(UsageError, match=r"keyed by path needs .* is shards: key it by key or by index"):
        source_keys(shards, "path")
    assert source_keys(shards, "index").tolist() == [0] and source_keys(folder, "index").tolist() == list(range(6))


def test_shard_keys_repeated_across_shards_are_ambiguous(tmp_path):
    first = shard(tmp_path / "s-0.tar", {"a": {"png": png(), "cls": b"0"}})
    shard(tmp_path / "s-1.tar", {"a": {"png": png(), "cls": b"1"}})
    assert first.exists()
    source = load_shards(str(tmp_path / "s-{0..1}.tar"), None)
    table = read_metadata(write_csv(tmp_path / "m.csv", [["key", "v"], ["a", "x"]]))
    with pytest.raises(
        InputError, match=r"s-\{0\.\.1\}\.tar: the key 'a' names more than one image, .*; key it by index"
    ):
        join_metadata(table, source)


def test_predictions_metadata_is_typed_by_the_same_rule(tmp_path):
    from macs_audit.predictions.files import read_predictions

    rows = [["label", "logit_a", "logit_b", "site", "iso"], ["0", "1", "0", "x", "100"], ["1", "0", "1", "", "nan"]]
    found = read_predictions(write_csv(tmp_path / "p.csv", rows))
    assert found.metadata["site"].tolist() == ["x", None]
    assert as_list(found.metadata["iso"]) == [100.0, None]
