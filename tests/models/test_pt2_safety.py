"""models/exported_program.py: a `.pt2` runs no code from the file unless trusted.

Each row edits a real `torch.export.save` archive so that one thing torch.export.load reads (a pickle, a
shape expression, a guard, a compiled library) would run code that writes a marker file. `evaluate` refuses
it in one line (exit 3) and the marker never appears; with --trust-pickled-model-code torch reads the file
as it is (the code runs: that is what trusting it means) and the run still ends in one line, never a traceback.
"""

from __future__ import annotations

import dataclasses
import json
import pickle
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest
from source_builders import QUICK, exported_program, three_class_npz
from typer.testing import CliRunner

from macs_audit.cli import app

runner = CliRunner()
Members = dict[str, bytes]


class WritesMarker:
    """Unpickling it writes `path`: the stand-in for any code a pickle can run."""

    def __init__(self, path: Path):
        self.path = str(path)

    def __reduce__(self):
        return (exec, (f"open({self.path!r}, 'w').write('ran')",))


def _writes(marker: Path) -> str:
    return f"open({str(marker)!r}, 'w').write('ran')"


def weights_pickle(members: Members, marker: Path) -> None:
    """A weight the config lists as pickled (torch: torch.load(weights_only=False))."""
    config_name = "data/weights/model_weights_config.json"
    config = json.loads(members[config_name])
    entry = next(iter(config["config"].values()))
    entry["use_pickle"] = True
    members[config_name] = json.dumps(config).encode()
    members["data/weights/" + entry["path_name"]] = pickle.dumps(WritesMarker(marker))


def legacy_pickle(members: Members, marker: Path) -> None:
    """The legacy state dict `data/weights/model.pt` (torch: weights-only, then in full)."""
    for name in [n for n in members if n.startswith("data/weights/")]:
        del members[name]
    members["data/weights/model.pt"] = pickle.dumps(WritesMarker(marker))


def sample_inputs_pickle(members: Members, marker: Path) -> None:
    members["data/sample_inputs/model.pt"] = pickle.dumps(WritesMarker(marker))


def _model_json(members: Members, change: Callable[[dict], None]) -> None:
    document = json.loads(members["models/model.json"])
    change(document)
    members["models/model.json"] = json.dumps(document).encode()


def shape_expression(members: Members, marker: Path) -> None:
    """A dynamic size's expression, which torch parses with sympy.sympify (an eval)."""
    symbol = "Symbol('s31', positive=True, integer=True)"  # the batch dimension's symbol in this torch's archives
    text = members["models/model.json"].decode()
    assert symbol in text
    code = f"exec({_writes(marker)!r}) or {symbol}"
    members["models/model.json"] = text.replace(json.dumps(symbol), json.dumps(code), 1).encode()


def guard(members: Members, marker: Path) -> None:
    """A guard on the inputs, which torch execs when it builds the program's module."""
    _model_json(members, lambda doc: doc.__setitem__("guards_code", [f"{_writes(marker)} > 0"]))


def compiled_library(members: Members, marker: Path) -> None:
    """An AOTInductor library, which torch.export.load loads as a shared library."""
    members["data/aotinductor/model/model.so"] = b"\x7fELF" + bytes(64)


@dataclasses.dataclass(frozen=True)
class Row:
    id: str
    edit: Callable[[Members, Path], None]
    message: str  # the refusal's fragment
    runs_when_trusted: bool = True  # whether the marker appears with --trust-pickled-model-code


ROWS = [
    Row("weights-pickle", weights_pickle, "holds a pickled Python object (builtins.exec, in data/weights/weight_0)"),
    Row("legacy-pickle", legacy_pickle, "holds a pickled Python object (builtins.exec, in data/weights/model.pt)"),
    Row(
        "sample-inputs-pickle",
        sample_inputs_pickle,
        "holds a pickled Python object (builtins.exec, in data/sample_inputs/model.pt)",
    ),
    Row("shape-expression", shape_expression, "holds code (the shape expression 'exec("),
    Row("guard", guard, 'holds code (the guard "open('),
    Row("compiled-library", compiled_library, "holds code (AOTInductor compiled code", runs_when_trusted=False),
]


def hostile_program(tmp_path: Path, row: Row, marker: Path) -> Path:
    """A real torch.export.save archive of a 3-class net with `row`'s edit."""
    good = exported_program(tmp_path / "good.pt2")  # noqa: F841  (the module; the file is what counts)
    with zipfile.ZipFile(tmp_path / "good.pt2") as archive:
        infos = archive.infolist()
        root = infos[0].filename.split("/", 1)[0] + "/"
        members = {info.filename[len(root) :]: archive.read(info) for info in infos}
    row.edit(members, marker)
    path = tmp_path / f"{row.id}.pt2"
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in members.items():
            archive.writestr(root + name, data)
    return path


def evaluate(model: Path, data: Path, *extra: str):
    return runner.invoke(app, ["evaluate", str(model), "--data", str(data), *QUICK, *extra])


@pytest.mark.parametrize("row", ROWS, ids=[row.id for row in ROWS])
def test_code_in_a_program_is_refused_and_never_runs(tmp_path, row):
    marker = tmp_path / "marker"
    model = hostile_program(tmp_path, row, marker)
    data = three_class_npz(tmp_path / "d.npz", n=12, size=32)
    result = evaluate(model, data)
    assert result.exit_code == 3, result.output
    assert not marker.exists()
    assert row.message in result.output and "--trust-pickled-model-code" in result.output
    assert "Traceback" not in result.output and "unexpected" not in result.output
    assert len([line for line in result.output.splitlines() if line.startswith("error:")]) == 1

    trusted = evaluate(model, data, "--trust-pickled-model-code")  # read as it is: the code runs
    assert marker.exists() == row.runs_when_trusted
    assert "Traceback" not in trusted.output and "unexpected" not in trusted.output


def test_a_program_torch_export_saved_loads_without_the_flag(tmp_path):
    exported_program(tmp_path / "net.pt2")
    data = three_class_npz(tmp_path / "d.npz", n=12, size=32)
    result = evaluate(tmp_path / "net.pt2", data, "-o", str(tmp_path / "r.json"))
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / "r.json").read_text())["model"]["format"] == "torch-export"


def test_a_program_with_dynamic_sizes_and_guards_loads_without_the_flag(tmp_path):
    """Shape expressions (FloorDiv, Max, Mul) and guards (`torch.sym_max`, `L['x'].size()[3] // 2`) as torch
    writes them for a program whose height and width are dynamic pass the check."""
    import torch

    from macs_audit.models.exported_program import code_in_program

    class Pooled(torch.nn.Module):
        def forward(self, x):
            return torch.nn.functional.avg_pool2d(x, 2).flatten(1)[:, :3]

    auto = torch.export.Dim.AUTO
    program = torch.export.export(Pooled(), (torch.zeros(4, 3, 32, 32),), dynamic_shapes=({0: auto, 2: auto, 3: auto},))
    torch.export.save(program, str(tmp_path / "dynamic.pt2"))
    with zipfile.ZipFile(tmp_path / "dynamic.pt2") as archive:
        text = next(archive.read(n) for n in archive.namelist() if n.endswith("models/model.json")).decode()
    assert "guards_code" in text and "FloorDiv" in text  # what the check must let through is in the file
    assert code_in_program(tmp_path / "dynamic.pt2") is None
