"""Hostile data-side inputs through the CLI, one row each (the format of test_bad_input.py): class-map and shard
`.cls` indexes that overflow or are digits int() refuses, JSON nested a hundred thousand deep, a shard pattern of
a billion names, a classes.txt of one name a million times, shards cut short, a RAPS penalty that overflows.
Each ends in its documented exit code and one line, never "unexpected"; the bounded ones at their real hostile
sizes, so that a regression hangs rather than passes. A damaged shard is left out, and counted in the report,
only with --skip-damaged-shards."""

from __future__ import annotations

import io
import json
import tarfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from conftest import linear_onnx, tiny_images
from test_bad_input import QUICK, Row, _all, _file, _fill, _image_tree, _shard, _snapshot
from typer.testing import CliRunner

from macs_audit.cli import app

runner = CliRunner()
DEEP = "[" * 100_000 + "]" * 100_000  # past Python's recursion limit in json.loads
SHARD = ("evaluate", "{model}", "--data", "s.tar", "--bootstrap", "0", "--perturbations", "none", "-q")
SHIFT = (*QUICK, "--shift-data", "a=a", "--class-map")


def _cut_shard(name: str, labels: tuple[int, ...], where: str) -> Callable[[Path], None]:
    """A shard as _shard writes it, cut short inside its last image's header (`header`) or its data (`data`)."""

    def make(tmp: Path) -> None:
        _shard(name, labels)(tmp)
        with tarfile.open(tmp / name) as tar:
            last = tar.getmembers()[-2]  # the last sample's image, its .cls after it
        cut = last.offset + 100 if where == "header" else last.offset_data + last.size // 2
        (tmp / name).write_bytes((tmp / name).read_bytes()[:cut])

    return make


def _cls_shard(name: str, label: bytes) -> Callable[[Path], None]:
    """A one-sample shard whose .cls member holds `label`."""

    def make(tmp: Path) -> None:
        from PIL import Image

        image = io.BytesIO()
        Image.fromarray(tiny_images(1)[0][0]).save(image, format="PNG")
        with tarfile.open(tmp / name, "w") as tar:
            for member, data in (("a.png", image.getvalue()), ("a.cls", label)):
                info = tarfile.TarInfo(member)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))

    return make


BUS = _image_tree("a", ("bus",))
ROWS = [
    Row(
        "class-map-json-index-overflows",
        (*SHIFT, "m.json"),
        2,
        "maps to '100000000000000000000000', not an output index (0 to 999,999)",
        _all(BUS, _file("m.json", '{"bus": 100000000000000000000000}')),
    ),
    Row(
        "class-map-json-index-superscript",
        (*SHIFT, "m.json"),
        2,
        "class 'bus' maps to '²', not an output index",
        _all(BUS, _file("m.json", '{"bus": "²"}')),
    ),
    Row(
        "class-map-csv-index-superscript",
        (*SHIFT, "m.csv"),
        2,
        "--class-map m.csv: class 'bus' maps to '²'",
        _all(BUS, _file("m.csv", "bus,²\n")),
    ),
    Row(
        "class-map-csv-index-overflows",
        (*SHIFT, "m.csv"),
        2,
        "maps to '100000000000000000000000'",
        _all(BUS, _file("m.csv", "bus,100000000000000000000000\n")),
    ),
    Row(
        "class-map-nested-arrays",
        (*SHIFT, "m.json"),
        2,
        "--class-map m.json: JSON nested too deeply",
        _all(BUS, _file("m.json", DEEP)),
    ),
    Row(
        "real-labels-nested-arrays",
        (*QUICK, "--real-labels-file", "real.json"),
        2,
        "--real-labels-file real.json: JSON nested too deeply",
        _file("real.json", DEEP),
    ),
    Row("class-map-dev-zero", (*SHIFT, "/dev/zero"), 2, "--class-map /dev/zero: not a regular file", BUS),
    Row("real-labels-dev-zero", (*QUICK, "--real-labels-file", "/dev/zero"), 2, "/dev/zero: not a regular file"),
    Row(
        "shard-cls-superscript",
        SHARD,
        3,
        "s.tar: a.cls: the .cls member holds '²', not a class index (0 to 999,999)",
        _cls_shard("s.tar", "²".encode()),
    ),
    Row(
        "shard-cls-overflows",
        SHARD,
        3,
        "a.cls: the .cls member holds '100000000000000000000000', not a class index",
        _cls_shard("s.tar", b"100000000000000000000000"),
    ),
    Row(
        "shard-pattern-of-a-billion-names",
        ("evaluate", "{model}", "--data", "s-{{000..999}}{{000..999}}{{000..999}}.tar", "-q"),
        2,
        "names more than 1,000,000 shards; the limit is 1,000,000",
    ),
    Row(
        "shard-classes-file-one-name-a-million-times",
        SHARD,
        3,
        "classes.txt: class name 'n01440764' appears twice; classes need distinct names",
        _all(_shard("s.tar", (0, 1)), _file("classes.txt", "n01440764\n" * 1_000_000)),
    ),
    Row(
        "shard-cut-in-a-header",
        SHARD,
        3,
        "neither a whole tar header nor the tar's end; pass --skip-damaged-shards to leave it out",
        _cut_shard("s.tar", (*range(10), 0), "header"),
    ),
    Row(
        "shard-cut-in-a-members-data",
        SHARD,
        3,
        "s.tar: damaged shard: member 's10.png' is cut short (its data would end at byte",
        _cut_shard("s.tar", (*range(10), 0), "data"),
    ),
    Row(
        "raps-penalty-overflows",
        (*QUICK, "--raps", "0,1e308"),
        2,
        "--raps must be K_REG,PENALTY (an integer 0 to 1,000,000 and a number 0 to 100), got '0,1e308'",
    ),
    Row("raps-k-reg-past-a-float", (*QUICK, "--raps", "1" + "0" * 400 + ",0.1"), 2, "--raps must be K_REG,PENALTY"),
]


@pytest.fixture()
def workdir(tmp_path, monkeypatch):
    """A 10-class model and 60 images, in a directory with no gate config above it to find."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".git").mkdir()
    linear_onnx(tmp_path / "model.onnx")
    x, y = tiny_images(60)
    np.savez(tmp_path / "data.npz", x=x, y=y)
    return tmp_path


@pytest.mark.parametrize("row", ROWS, ids=[row.id for row in ROWS])
def test_hostile_data(row: Row, workdir: Path) -> None:
    if row.setup is not None:
        row.setup(workdir)
    before = _snapshot(workdir)
    result = runner.invoke(app, [_fill(arg, workdir) for arg in row.args])
    assert result.exit_code == row.exit_code, result.output
    assert row.message in result.stderr, result.stderr
    assert "unexpected" not in result.output and "Traceback" not in result.output and "Warning" not in result.output
    assert len([line for line in result.stderr.splitlines() if line.strip()]) == 1, result.stderr
    assert _snapshot(workdir) == before, "an input or output file changed"


def test_a_damaged_shard_is_skipped_and_counted_only_when_asked(workdir):
    """Two shards, the second cut short inside a header: an error naming it; with --skip-damaged-shards the first
    shard's images alone are scored and the report's data.damaged_shards_skipped is 1 (0 where none is damaged)."""
    _shard("s-0.tar", tuple(range(10)))(workdir)
    _cut_shard("s-1.tar", (0, 1, 2), "header")(workdir)
    args = ["evaluate", str(workdir / "model.onnx"), "--data", "s-{0..1}.tar", "--bootstrap", "0"]
    args += ["--perturbations", "none", "--sensitivity-samples", "0", "-q"]
    refused = runner.invoke(app, args)
    assert refused.exit_code == 3 and "s-1.tar: damaged shard" in refused.stderr, refused.output
    for spec, skipped, n in (("s-{0..1}.tar", 1, 10), ("s-0.tar", 0, 10)):
        result = runner.invoke(app, [*args[:3], spec, *args[4:], "--skip-damaged-shards", "-o", "r.json"])
        assert result.exit_code == 0, result.output
        data = json.loads((workdir / "r.json").read_text())["data"]
        assert data["damaged_shards_skipped"] == skipped and data["n"] == n
    result = runner.invoke(app, [*args[:3], "s-0.tar", *args[4:], "-o", "plain.json"])  # without it: no such key
    assert result.exit_code == 0 and "damaged_shards_skipped" not in json.loads((workdir / "plain.json").read_text())
