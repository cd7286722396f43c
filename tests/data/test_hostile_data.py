"""Hostile values where the data side reads them: each a one-line MacsAuditError naming the file and the key (or
the option), never a Python error; the bounded ones at their real hostile sizes, so that a regression hangs
rather than passes. A shard cut short anywhere is an error, or, with skip_damaged, left out and named."""

from __future__ import annotations

import io
import re
import tarfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from macs_audit.auditing.calibration import parse_raps
from macs_audit.data.label_space import read_class_map
from macs_audit.data.real_labels import read_real_labels
from macs_audit.data.shards import DamagedShardError, class_names, expand, index_shards
from macs_audit.errors import InputError, UsageError

DEEP = "[" * 100_000 + "]" * 100_000  # past Python's recursion limit in json.loads


def _write(name: str, text: str) -> Callable[[Path], Path]:
    def make(tmp: Path) -> Path:
        (tmp / name).write_text(text, encoding="utf-8")
        return tmp / name

    return make


def _shard(path: Path, labels: list[bytes]) -> Path:
    """One uncompressed tar of small PNGs, sample i's .cls member holding labels[i]."""
    image = io.BytesIO()
    Image.fromarray(np.zeros((8, 8, 3), dtype=np.uint8)).save(image, format="PNG")
    with tarfile.open(path, "w") as tar:
        for i, label in enumerate(labels):
            for member, data in ((f"s{i}.png", image.getvalue()), (f"s{i}.cls", label)):
                info = tarfile.TarInfo(member)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return path


CASES = [
    # (id, reader, file setup, error class, message)
    (
        "class-map-json-overflow",
        read_class_map,
        _write("m.json", '{"bus": 100000000000000000000000}'),
        UsageError,
        "m.json: class 'bus' maps to '100000000000000000000000', not an output index (0 to 999,999)",
    ),
    (
        "class-map-json-superscript",
        read_class_map,
        _write("m.json", '{"bus": "²"}'),
        UsageError,
        "m.json: class 'bus' maps to '²', not an output index",
    ),
    (
        "class-map-json-past-the-limit",
        read_class_map,
        _write("m.json", '{"bus": 1000000}'),
        UsageError,
        "maps to '1000000', not an output index (0 to 999,999)",
    ),
    (
        "class-map-csv-superscript",
        read_class_map,
        _write("m.csv", "bus,²\n"),
        UsageError,
        "m.csv: class 'bus' maps to '²'",
    ),
    (
        "class-map-csv-arabic-indic",
        read_class_map,
        _write("m.csv", "bus,٣\n"),
        UsageError,
        "m.csv: class 'bus' maps to '٣'",
    ),
    (
        "class-map-csv-overflow",
        read_class_map,
        _write("m.csv", "bus,100000000000000000000000\n"),
        UsageError,
        "maps to '100000000000000000000000'",
    ),
    (
        "class-map-nested-arrays",
        read_class_map,
        _write("m.json", DEEP),
        UsageError,
        "--class-map {tmp}/m.json: JSON nested too deeply",
    ),
    (
        "real-labels-nested-arrays",
        read_real_labels,
        _write("real.json", DEEP),
        UsageError,
        "--real-labels-file {tmp}/real.json: JSON nested too deeply",
    ),
    (
        "shard-cls-superscript",
        lambda p: index_shards([p]),
        lambda t: _shard(t / "s.tar", ["²".encode()]),
        InputError,
        "s.tar: s0.cls: the .cls member holds '²', not a class index (0 to 999,999)",
    ),
    (
        "shard-cls-overflow",
        lambda p: index_shards([p]),
        lambda t: _shard(t / "s.tar", [b"100000000000000000000000"]),
        InputError,
        "s0.cls: the .cls member holds '100000000000000000000000', not a class index",
    ),
    (
        "shard-cls-past-the-limit",
        lambda p: index_shards([p]),
        lambda t: _shard(t / "s.tar", [b"1000000"]),
        InputError,
        "s0.cls: the .cls member holds '1000000', not a class index",
    ),
    (
        "shard-classes-file-one-name-a-million-times",
        lambda p: class_names([p.with_name("s.tar")], np.array([0, 1])),  # classes.txt beside the shard
        _write("classes.txt", "n01440764\n" * 1_000_000),
        InputError,
        "classes.txt: class name 'n01440764' appears twice; classes need distinct names",
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[case[0] for case in CASES])
def test_hostile_values_are_one_line_errors(tmp_path, case):
    _, read, setup, error, message = case
    path = setup(tmp_path)
    with pytest.raises(error) as caught:
        read(path)
    text = str(caught.value)
    assert message.format(tmp=tmp_path) in text and "\n" not in text


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("s-{000..999}{000..999}{000..999}.tar", "names more than 1,000,000 shards; the limit is 1,000,000"),
        ("s-{000000..999999999}.tar", "names more than 1,000,000 shards"),
        ("s-{0..1000000}.tar", "names more than 1,000,000 shards"),
        ("s-{0.." + "9" * 5000 + "}.tar", "names no shard or too many"),  # int() of it would refuse 4,300 digits
        ("s-{" + "0" * 5000 + "1..2}.tar", "names no shard or too many"),
    ],
)
def test_a_pattern_is_counted_before_it_is_expanded(spec, message):
    with pytest.raises(UsageError, match=re.escape(message)):
        expand(spec)


def test_several_ranges_are_counted_together_and_expand_as_nested_loops():
    names = [p.name for p in expand("s-{0..1}x{08..10}.tar")]
    assert names == ["s-0x08.tar", "s-0x09.tar", "s-0x10.tar", "s-1x08.tar", "s-1x09.tar", "s-1x10.tar"]
    with pytest.raises(UsageError, match="names more than 1,000,000 shards"):  # each range alone is below it
        expand("s-{0..9}{0..99999}{0..1}.tar")


@pytest.mark.parametrize(
    "text", ["0,1e308", "0,101", "0,inf", "0,nan", "0,-1", "1000001,0.1", "1" + "0" * 400 + ",0.1", "²,0.1"]
)
def test_the_raps_options_range(text):
    with pytest.raises(UsageError, match=re.escape("an integer 0 to 1,000,000 and a number 0 to 100), got")):
        parse_raps(text)


def test_the_raps_options_bounds_are_allowed():
    assert parse_raps("1000000,100") == (1_000_000, 100.0) and parse_raps("0,0") == (0, 0.0)


def _cuts(size: int, end: int) -> list[int]:
    """Cut positions across the whole tar: in every header and data stretch, at every block's start, inside the
    end-of-archive block and after it."""
    inside = end + tarfile.BLOCKSIZE
    return sorted({*range(0, inside, 97), *range(0, inside, tarfile.BLOCKSIZE), inside - 1, inside, size - 1})


def test_a_shard_cut_anywhere_is_an_error_or_whole(tmp_path):
    """Every cut before the end-of-archive block ends whole is an InputError naming the shard, damaged (exit 3)
    unless the cut leaves no tar header to know it by; every cut after it reads every sample."""
    whole = _shard(tmp_path / "whole.tar", [b"0", b"1", b"2"])
    data = whole.read_bytes()
    with tarfile.open(whole) as tar:
        end = tar.getmembers()[-1].offset_data + tarfile.BLOCKSIZE  # the last member's data is one block
    cut = tmp_path / "cut.tar"
    for at in _cuts(len(data), end):
        cut.write_bytes(data[:at])
        if at >= end + tarfile.BLOCKSIZE:
            assert len(index_shards([cut]).names) == 3
            continue
        with pytest.raises(InputError) as caught:
            index_shards([cut])
        text = str(caught.value)
        assert str(cut) in text and "\n" not in text, (at, text)
        if at >= 262:  # a tar header's "ustar" magic is there: known as a tar cut short
            assert isinstance(caught.value, DamagedShardError) and "damaged shard" in text, (at, text)


def test_damaged_shards_are_skipped_and_named_only_when_asked(tmp_path):
    good = _shard(tmp_path / "s-0.tar", [b"0", b"1"])
    data = _shard(tmp_path / "s-1.tar", [b"0", b"1", b"2"]).read_bytes()
    with tarfile.open(tmp_path / "s-1.tar") as tar:
        members = tar.getmembers()
    (tmp_path / "s-1.tar").write_bytes(data[: members[2].offset + 100])  # inside sample 1's image header
    (tmp_path / "s-2.tar").write_bytes(data[: members[2].offset_data + 10])  # inside its data
    paths = expand(f"{tmp_path}/s-{{0..2}}.tar")
    with pytest.raises(DamagedShardError, match=r"s-1\.tar: damaged shard: at byte 2,048 .*--skip-damaged-shards"):
        index_shards(paths)
    with pytest.raises(DamagedShardError, match=r"s-2\.tar: damaged shard: member 's1.png' is cut short"):
        index_shards(paths[2:])
    index = index_shards(paths, skip_damaged=True)
    assert index.names == ("s0.png", "s1.png") and index.shard.tolist() == [0, 0]
    assert [s.split(":")[0] for s in index.skipped] == [str(paths[1]), str(paths[2])]
    assert index_shards([good], skip_damaged=True).skipped == ()
    with pytest.raises(InputError, match=r"the shards hold no samples \(2 damaged\)"):
        index_shards(paths[1:], skip_damaged=True)
