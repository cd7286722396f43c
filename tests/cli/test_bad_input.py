"""The bad-input corpus: every way a user can hand the CLI something wrong, one row each.

Each row runs one command in a fresh directory and checks three things: the exit code (2 usage,
3 input or runtime, as docs/errors.md documents), a fragment of the one-line message on stderr, and
that no file in the directory changed (nothing written, replaced, removed or left behind).

Row format (append rows to ROWS; keep them short):

    Row(id, args, exit_code, message, setup=None, env=None)

- `args`: the command line after `macs-audit`; these placeholders are filled in:
  {tmp} the run's directory (also the working directory), {model} a 10-class ONNX model,
  {data} a 60-image npz, {report} a saved report, {config} a passing gate config (macs-audit.toml).
- `setup`: optional function(tmp: Path) that adds files before the run (its files count as inputs:
  they must not change either).
- `env`: optional environment variables for the run.

Faults a command line cannot produce (a full disk, a read-only file system) are simulated in the
tests after the table.
"""

from __future__ import annotations

import dataclasses
import errno
import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from conftest import linear_onnx, tiny_images
from fixtures.synthetic_report import synthetic_report
from typer.testing import CliRunner

from macs_audit.cli import app

runner = CliRunner()
PASSING = "[gate]\nmin_accuracy = 0.5\n"


@dataclasses.dataclass(frozen=True)
class Row:
    id: str
    args: tuple[str, ...]
    exit_code: int
    message: str
    setup: Callable[[Path], object] | None = None
    env: dict[str, str] | None = None


# ------------------------------------------------------------------------------------------ setups


def _npz(name: str, **arrays) -> Callable[[Path], None]:
    def make(tmp: Path) -> None:
        np.savez(tmp / name, **arrays)

    return make


def _file(name: str, content: bytes | str) -> Callable[[Path], None]:
    def make(tmp: Path) -> None:
        path = tmp / name
        path.parent.mkdir(parents=True, exist_ok=True)
        (path.write_bytes if isinstance(content, bytes) else path.write_text)(content)  # type: ignore[operator]

    return make


def _dir(name: str) -> Callable[[Path], None]:
    def make(tmp: Path) -> None:
        (tmp / name).mkdir(parents=True, exist_ok=True)

    return make


def _all(*setups: Callable[[Path], object]) -> Callable[[Path], None]:
    def make(tmp: Path) -> None:
        for setup in setups:
            setup(tmp)

    return make


def _cifar_c(name: str, n: int, corruptions: tuple[str, ...] = ("fog",), shift: int = 0) -> Callable[[Path], None]:
    """A released-layout directory of `n` images per severity (labels (i + shift) % 10)."""

    def make(tmp: Path) -> None:
        folder = tmp / name
        folder.mkdir()
        labels = (np.arange(n) + shift) % 10
        np.save(folder / "labels.npy", np.tile(labels, 5).astype(np.uint8))
        for corruption in corruptions:
            np.save(folder / f"{corruption}.npy", np.zeros((5 * n, 32, 32, 3), np.uint8))

    return make


def _torchscript(name: str) -> Callable[[Path], None]:
    """A scripted torch module (imports torch: only the rows that use it pay for that)."""

    def make(tmp: Path) -> None:
        import torch

        torch.jit.save(torch.jit.script(torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3072, 10))), tmp / name)

    return make


def _lightning(name: str, extra_key: bool) -> Callable[[Path], None]:
    """A Lightning-style checkpoint of the project's ResNet-9 ({"state_dict": {"model.<key>": ...}, "epoch": ...});
    with `extra_key` one key lacks the prefix, so it is not stripped and the keys do not fit."""

    def make(tmp: Path) -> None:
        import timm
        import torch

        from macs_audit.models import architectures  # noqa: F401

        state = {f"model.{k}": v for k, v in timm.create_model("macs_resnet9_c10").state_dict().items()}
        if extra_key:
            state["criterion.weight"] = torch.ones(10)
        torch.save({"state_dict": state, "epoch": 2}, tmp / name)

    return make


def _onnx_without_its_data(name: str) -> Callable[[Path], None]:
    """An ONNX model saved with its weights in NAME.data beside it, and that file then lost."""

    def make(tmp: Path) -> None:
        import onnx

        proto = onnx.load(str(linear_onnx(tmp / f"{name}.tmp.onnx")))
        (tmp / f"{name}.tmp.onnx").unlink()
        onnx.save_model(proto, str(tmp / name), save_as_external_data=True, location=f"{name}.data", size_threshold=0)
        (tmp / f"{name}.data").unlink()

    return make


_RANDOM_BYTES = np.random.default_rng(0).integers(0, 256, 4096, dtype=np.uint8).tobytes()


def _object_npz(name: str, key: str) -> Callable[[Path], None]:
    """An npz whose `key` is an object array (loading it would need pickle)."""

    def make(tmp: Path) -> None:
        x, y = tiny_images(12)
        arrays = {"x": x, "y": y, key: np.array([str(v) for v in y] if key == "y" else ["a", 1], dtype=object)}
        np.savez(tmp / name, **arrays, allow_pickle=True)

    return make


def _safetensors(name: str, sidecar: dict | None = None) -> Callable[[Path], None]:
    """A small safetensors state dict (written without torch), with a sidecar JSON if given."""

    def make(tmp: Path) -> None:
        from safetensors.numpy import save_file

        save_file({"fc.weight": np.zeros((10, 3), np.float32)}, str(tmp / name))
        if sidecar is not None:
            (tmp / name).with_suffix(".json").write_text(json.dumps(sidecar))

    return make


def _remove(name: str) -> Callable[[Path], None]:
    """Takes away one of the shared inputs (the passing gate config, so that no config is found)."""

    def make(tmp: Path) -> None:
        (tmp / name).unlink()

    return make


def _onnx(name: str, **kwargs) -> Callable[[Path], None]:
    """conftest.linear_onnx with its options (num_classes, size, nan, ...)."""

    def make(tmp: Path) -> None:
        linear_onnx(tmp / name, **kwargs)

    return make


def _pickled(name: str, whole_module: bool) -> Callable[[Path], None]:
    """torch.save of a whole nn.Module (needs pickled code to load) or of its bare state dict (needs --arch)."""

    def make(tmp: Path) -> None:
        import torch

        module = torch.nn.Linear(3, 10)
        torch.save(module if whole_module else module.state_dict(), tmp / name)

    return make


def _resnet9(name: str) -> Callable[[Path], None]:
    """The project's ResNet-9 as safetensors, with a sidecar naming its architecture: a model that loads."""

    def make(tmp: Path) -> None:
        import timm
        import torch

        from macs_audit.models import architectures  # noqa: F401
        from macs_audit.models.export import save_safetensors, write_sidecar

        # Seeded: an unseeded initialisation follows whatever the worker's tests drew before, and some draws give a
        # network whose held-out temperature sharpens it, which finetune refuses before its first step.
        torch.manual_seed(0)
        save_safetensors(timm.create_model("macs_resnet9_c10", num_classes=10), tmp / name)
        write_sidecar((tmp / name).with_suffix(".json"), {"arch": "macs_resnet9_c10", "num_classes": 10})

    return make


def _symlink_loop(name: str) -> Callable[[Path], None]:
    def make(tmp: Path) -> None:
        (tmp / name).symlink_to(tmp / name)

    return make


def _damaged_npz(name: str, how: str) -> Callable[[Path], None]:
    """The 60-image data.npz as a damaged copy of it can be: `half` cut in half (its zip directory lost with the
    second half), `crc` one byte of its pixels changed (the member's CRC no longer matches)."""

    def make(tmp: Path) -> None:
        data = bytearray((tmp / "data.npz").read_bytes())
        if how == "half":
            del data[len(data) // 2 :]
        else:
            data[len(data) // 2] ^= 0xFF  # inside x.npy, the first and largest member
        (tmp / name).write_bytes(bytes(data))

    return make


def _npz_claiming(name: str, shape: tuple[int, ...]) -> Callable[[Path], None]:
    """An .npz whose x.npy header claims uint8 images of `shape` over one image's bytes, with 12 labels."""

    def make(tmp: Path) -> None:
        import io
        import zipfile

        header, labels = io.BytesIO(), io.BytesIO()
        np.lib.format.write_array_header_1_0(header, {"descr": "|u1", "fortran_order": False, "shape": shape})
        np.save(labels, _Y)
        with zipfile.ZipFile(tmp / name, "w") as archive:
            archive.writestr("x.npy", header.getvalue() + bytes(32 * 32 * 3))
            archive.writestr("y.npy", labels.getvalue())

    return make


def _png_tree(name: str, width: int, height: int) -> Callable[[Path], None]:
    """An image folder of 10 classes, each one PNG whose header claims width x height (its pixel data a few bytes)."""

    def make(tmp: Path) -> None:
        import struct
        import zlib

        def chunk(kind: bytes, data: bytes) -> bytes:
            return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

        header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)  # 8-bit RGB
        png = (
            b"\x89PNG\r\n\x1a\n"
            + chunk(b"IHDR", header)
            + chunk(b"IDAT", zlib.compress(bytes(16)))
            + chunk(b"IEND", b"")
        )
        for label in range(10):
            (tmp / name / str(label)).mkdir(parents=True)
            (tmp / name / str(label) / "0.png").write_bytes(png)

    return make


def _scripted(name: str, returns: str) -> Callable[[Path], None]:
    """A TorchScript model whose forward raises (`raise`), or returns its logits in a `tuple` or a `dict`."""

    def make(tmp: Path) -> None:
        import torch

        class Raises(torch.nn.Module):
            def forward(self, x: torch.Tensor) -> torch.Tensor:
                raise RuntimeError("this model's forward fails")

        class Pair(torch.nn.Module):
            def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
                z = x.mean((2, 3)).repeat(1, 4)[:, :10]
                return z, z

        class Named(torch.nn.Module):
            def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
                return {"logits": x.mean((2, 3)).repeat(1, 4)[:, :10]}

        module = {"raise": Raises, "tuple": Pair, "dict": Named}[returns]()
        torch.jit.save(torch.jit.script(module), tmp / name)

    return make


_X, _Y = tiny_images(12)
EVALUATE = ("evaluate", "{model}", "--data", "{data}", "--bootstrap", "0", "--perturbations", "none")
QUICK = (*EVALUATE, "--sensitivity-samples", "0", "-q")
CALIBRATE = ("calibrate", "{model}", "--data", "{data}", "--eval-data", "{data}", "-q")
SAVE = ("-o", "r.json", "--save-predictions", "p.npz")


def _quick(model: str = "{model}", data: str = "{data}", *extra: str) -> tuple[str, ...]:
    """QUICK with another model or data set, writing a report and predictions (neither may appear)."""
    return (QUICK[0], model, QUICK[2], data, *QUICK[4:], *SAVE, *extra)


FINETUNE = ("finetune", "{tmp}/net.safetensors", "--arch", "resnet18", "--data", "{data}", "-q")
# A fine-tuning run of the ResNet-9 (net.safetensors) with a quick before/after audit on the 60 images.
FINETUNE_QUICK = ("finetune", "net.safetensors", "--out", "ft", "--eval-data", "{data}", *EVALUATE[4:], "-q")

# Strings from the data: an escape that clears the screen and one that retitles the terminal window.
ESC = "\x1b[2J\x1b]0;title\x07"
ESC_SHOWN = "\\x1b[2J\\x1b]0;title\\x07"  # as printable() shows it


def _report_json(name: str, change: Callable[[dict], object] | None = None, text: str | None = None):
    """A report file: the synthetic report's JSON as `change` leaves it, or `text` as it is."""

    def make(tmp: Path) -> None:
        data = json.loads(synthetic_report(corruptions=["fog"]).to_json())
        if change is not None:
            change(data)
        (tmp / name).write_text(json.dumps(data) if text is None else text, encoding="utf-8")

    return make


def _put(path: str, value: object) -> Callable[[dict], None]:
    """Sets the report's key at the dotted `path` (clean.metrics) to `value`."""

    def change(data: dict) -> None:
        *parents, key = path.split(".")
        for part in parents:
            data = data[part]
        data[key] = value

    return change


def _hostile(data: dict) -> None:
    """Escapes, control characters and rich markup in the strings a report carries: the model's path, the data
    source, a class name, a perturbation view's name and the corruption's name (everywhere the report names it)."""
    data["model"]["path"] = f"{ESC}net\x00.onnx"
    data["data"]["source"] = f"[red]src[/red]{ESC}\u202e"
    data["data"]["class_names"][3] = f"[red]cat[/red]{ESC}"
    data["views"][0]["name"] = f"[bold]noise[/bold]{ESC}"
    fog = f"fog{ESC}"
    for view in data["views"]:
        if view["corruption"] == "fog":
            view["corruption"], view["name"] = fog, view["name"].replace("fog", fog)
    summary = data["corruption_summary"]
    summary["corruptions"] = {fog: summary["corruptions"]["fog"]}
    for family in summary["families"].values():
        family["corruptions"] = [fog if c == "fog" else c for c in family["corruptions"]]


def _shard(name: str, labels: tuple[int, ...]) -> Callable[[Path], None]:
    """One uncompressed tar shard of small PNGs and their .cls labels, as webdataset writes them."""

    def make(tmp: Path) -> None:
        import io
        import tarfile

        from PIL import Image

        with tarfile.open(tmp / name, "w") as tar:
            for i, label in enumerate(labels):
                image = io.BytesIO()
                Image.fromarray(tiny_images(1, seed=i)[0][0]).save(image, format="PNG")
                for member, data in ((f"s{i}.png", image.getvalue()), (f"s{i}.cls", str(label).encode())):
                    info = tarfile.TarInfo(member)
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))

    return make


def _image_tree(root: str, classes: tuple[str, ...]) -> Callable[[Path], None]:
    """root/<class>/0.png: one small image per class."""

    def make(tmp: Path) -> None:
        from PIL import Image

        for i, name in enumerate(classes):
            (tmp / root / name).mkdir(parents=True)
            Image.fromarray(tiny_images(1, seed=i)[0][0]).save(tmp / root / name / "0.png")

    return make


# -------------------------------------------------------------------------------------------- rows

ROWS: list[Row] = [
    # usage: options that ask for nothing or for something impossible (exit 2)
    Row("evaluate-unknown-perturbation", (*EVALUATE[:4], "--perturbations", "snow"), 2, "unknown perturbation"),
    Row("evaluate-bad-severities", (*EVALUATE, "--corruptions", "fog", "--severities", "0-9"), 2, "severities"),
    Row("evaluate-negative-seed", (*QUICK, "--seed", "-1"), 2, "'--seed'"),
    Row("evaluate-reference-is-the-model", _quick("{model}", "{data}", "--reference", "{model}"), 2, "is MODEL itself"),
    Row(
        "evaluate-reference-other-classes",
        _quick("{model}", "{data}", "--reference", "k5.onnx"),
        3,
        "the reference has 5 classes but the candidate has 10",
        _onnx("k5.onnx", num_classes=5),
    ),
    Row(
        "evaluate-reference-other-input-size",
        _quick("{model}", "{data}", "--reference", "s16.onnx"),
        3,
        "the reference takes 16x16 images but the candidate takes 32x32",
        _onnx("s16.onnx", size=16),
    ),
    Row("evaluate-unknown-provider", (*QUICK, "--provider", "rocm"), 2, "unknown provider 'rocm'"),
    Row("evaluate-gpu-provider-on-the-cpu", (*QUICK, "--device", "cpu", "--provider", "cuda"), 2, "runs on a GPU"),
    Row("evaluate-reference-missing", _quick("{model}", "{data}", "--reference", "none.onnx"), 3, "model not found"),
    Row("corrupt-negative-seed", ("corrupt", "--data", "{data}", "--out", "o", "--seed", "-1"), 2, "'--seed'"),
    Row("evaluate-calibration-split-1", (*QUICK, "--calibration-split", "1"), 2, "--calibration-split"),
    Row("evaluate-corruptions-comma", (*QUICK, "--corruptions", ","), 2, "names no corruption"),
    Row("evaluate-perturbations-comma", (*QUICK[:6], "--perturbations", ","), 2, "names no perturbation"),
    Row(
        "corrupt-corruptions-comma", ("corrupt", "--data", "{data}", "--out", "o", "--corruptions", ","), 2, "names no"
    ),
    Row("corrupt-partial-severities", ("corrupt", "--data", "{data}", "--out", "o", "--severities", "1-3"), 2, "1-5"),
    Row("evaluate-cifar-c-without-corruptions", (*QUICK, "--cifar-c", "{tmp}"), 2, "--cifar-c needs --corruptions"),
    Row("evaluate-frost-without-corruptions", (*QUICK, "--frost-textures", "{tmp}"), 2, "needs --corruptions"),
    Row("report-unknown-format", ("report", "{report}", "--format", "pdf"), 2, "unknown --format"),
    Row("gate-missing-config", ("gate", "{report}", "--config", "nope.toml"), 2, "nope.toml"),
    Row(
        "gate-config-not-utf8",
        ("gate", "{report}", "--config", "latin1.toml"),
        2,
        "not UTF-8",
        _file("latin1.toml", b"[gate]\nmin_accuracy = 0.5 # caf\xe9\n"),
    ),
    Row(
        "sidecar-arch-not-a-string",
        (*QUICK[:1], "{tmp}/net.safetensors", *QUICK[2:]),
        2,
        "arch must be a timm architecture name",
        _safetensors("net.safetensors", {"arch": 5}),
    ),
    # data that cannot be used (exit 3)
    Row(
        "npz-string-labels",
        (*QUICK[:3], "s.npz", *QUICK[4:]),
        3,
        "must be integer",
        _npz("s.npz", x=_X, y=_Y.astype(str)),
    ),
    Row("npz-object-labels", (*QUICK[:3], "o.npz", *QUICK[4:]), 3, "object array", _object_npz("o.npz", "y")),
    Row(
        "npz-object-class-names",
        (*QUICK[:3], "c.npz", *QUICK[4:]),
        3,
        "'class_names'",
        _object_npz("c.npz", "class_names"),
    ),
    Row("evaluate-missing-data", (*QUICK[:3], "nope.npz", *QUICK[4:]), 3, "nope.npz"),
    Row(
        "npz-label-not-a-class-index",
        (*QUICK[:3], "big.npz", *QUICK[4:]),
        3,
        "is not a class index",
        _npz("big.npz", x=_X, y=_Y * 10**12),
    ),
    Row(
        "npz-not-a-zip",
        (*QUICK[:3], "junk.npz", *QUICK[4:]),
        3,
        "not an .npz (zip) archive",
        _file("junk.npz", b"\x80\x04junk" * 20),
    ),
    Row("report-not-utf8", ("report", "junk.json"), 3, "not UTF-8", _file("junk.json", b"\xb4\x00\xff" * 10)),
    Row(
        "corruption-baseline-not-utf8",
        (*QUICK, "--corruptions", "fog", "--corruption-baseline", "junk.json"),
        3,
        "not UTF-8",
        _file("junk.json", b"\xb4\x00\xff" * 10),
    ),
    # corruption inputs, checked before the clean audit
    Row(
        "cifar-c-missing-file",
        (*QUICK, "--corruptions", "fog,snow", "--cifar-c", "cc"),
        3,
        "has no snow.npy",
        _cifar_c("cc", 60),
    ),
    Row(
        "cifar-c-other-data-size",
        (*QUICK, "--corruptions", "fog", "--cifar-c", "cc"),
        3,
        "does not match the clean data",
        _cifar_c("cc", 20),
    ),
    Row("cifar-c-missing-folder", (*QUICK, "--corruptions", "fog", "--cifar-c", "nope"), 3, "nope does not exist"),
    Row("frost-textures-missing", (*QUICK, "--corruptions", "frost", "--frost-textures", "nope"), 3, "frost texture"),
    Row(
        "corrupt-frost-textures-missing",
        ("corrupt", "--data", "{data}", "--out", "o", "--corruptions", "frost", "--frost-textures", "nope"),
        3,
        "frost texture",
    ),
    # outputs, checked before the model is loaded
    Row("evaluate-output-is-a-directory", (*QUICK, "-o", "{tmp}"), 2, "is a directory"),
    Row("evaluate-output-is-the-model", (*QUICK, "-o", "{model}"), 2, "would replace the input"),
    Row("evaluate-output-junit", (*QUICK, "-o", "checks.xml"), 2, "JUnit output lists gate checks"),
    Row("evaluate-output-pr-comment", (*QUICK, "-f", "pr-comment", "-o", "c.md"), 2, "pr-comment lists gate checks"),
    Row("evaluate-unknown-format", (*QUICK, "-o", "r.json", "--format", "pdf"), 2, "unknown --format 'pdf'"),
    Row("evaluate-predictions-is-the-data", (*QUICK, "--save-predictions", "{data}"), 2, "would replace the input"),
    Row("evaluate-raps-malformed", (*QUICK, "--raps", "2"), 2, "--raps must be K_REG,PENALTY"),
    Row("evaluate-conformal-split-above-one", (*QUICK, "--conformal-split", "1.5"), 2, "--conformal-split must be"),
    Row("evaluate-output-twice", (*QUICK, "-o", "x.json", "--save-predictions", "x.json"), 2, "its own file"),
    Row("evaluate-both-to-stdout", (*QUICK, "-o", "-", "--save-predictions", "-"), 2, "standard output"),
    Row(
        "evaluate-output-under-a-file",
        (*QUICK, "-o", "f.txt/r.json"),
        3,
        "cannot write f.txt/r.json",
        _file("f.txt", "x"),
    ),
    Row(
        "evaluate-output-symlink-loop",
        (*QUICK, "-o", "loop.json"),
        3,
        "cannot write loop.json",
        _symlink_loop("loop.json"),
    ),
    Row("report-output-is-the-report", ("report", "{report}", "-o", "{report}"), 2, "would replace the input"),
    Row("report-output-is-a-directory", ("report", "{report}", "-f", "md", "-o", "{tmp}"), 2, "is a directory"),
    Row("report-same-output-twice", ("report", "{report}", "-o", "a.md", "-o", "a.md"), 2, "given twice"),
    Row("gate-output-is-the-config", ("gate", "{report}", "-f", "md", "-o", "{config}"), 2, "would replace the input"),
    Row("compare-output-is-an-input", ("compare", "{report}", "{report}", "-o", "{report}"), 2, "would replace"),
    Row("corrupt-out-is-stdout", ("corrupt", "--data", "{data}", "--out", "-"), 2, "'-' (standard output)"),
    Row(
        "corrupt-out-is-a-file", ("corrupt", "--data", "{data}", "--out", "f.txt"), 2, "is a file", _file("f.txt", "x")
    ),
    # post-hoc calibrators: unknown names, and a fit split too small for the method's parameters
    Row(
        "calibrate-unknown-method",
        (*CALIBRATE, "--out", "cal", "--method", "platt"),
        2,
        "unknown calibration method platt",
    ),
    Row(
        "calibrate-unknown-select",
        (*CALIBRATE, "--out", "cal", "--select", "auroc"),
        2,
        "--select 'auroc' is not a score",
    ),
    Row(
        "calibrate-split-too-small",
        (*CALIBRATE, "--out", "cal", "--method", "isotonic"),
        2,
        "needs a calibration split of at least 100 images, got 60",
    ),
    Row("evaluate-crop-pct-above-one", (*EVALUATE, "--crop-pct", "1.5"), 2, "crop_pct must be in (0, 1], got 1.5"),
    Row("evaluate-unknown-calibrator", (*EVALUATE, "--calibrators", "platt"), 2, "unknown calibration method platt"),
    # commands that write models never replace an input, and an existing output only with --force
    Row(
        "calibrate-existing-output",
        (*CALIBRATE, "--out", "cal"),
        2,
        "already holds calibration.json; pass --force",
        _file("cal/calibration.json", "{}"),
    ),
    Row(
        "export-existing-onnx",
        ("export", "net.safetensors", "--arch", "resnet18"),
        2,
        "net.onnx already exists; pass --force",
        _all(_safetensors("net.safetensors"), _file("net.onnx", b"old")),
    ),
    Row(
        "export-out-is-the-checkpoint",
        ("export", "net.safetensors", "--arch", "resnet18", "--out", "net.safetensors", "--force"),
        2,
        "would replace the input",
        _safetensors("net.safetensors"),
    ),
    Row(
        "finetune-out-is-the-model",
        (*FINETUNE, "--out", "{tmp}", "--name", "net", "--force"),
        2,
        "would replace the input",
        _safetensors("net.safetensors", {"num_classes": 10}),
    ),
    Row(
        "finetune-existing-output",
        (*FINETUNE, "--out", "ft"),
        2,
        "already holds model.onnx; pass --force",
        _all(_safetensors("net.safetensors"), _file("ft/model.onnx", b"old")),
    ),
    # real checkpoints as users bring them: damaged files, keys that do not fit, weights kept beside the model
    Row("pt-random-bytes", ("evaluate", "w.pt"), 3, "not a valid checkpoint (", _file("w.pt", _RANDOM_BYTES)),
    Row("pt-empty", ("evaluate", "w.pt"), 3, "not a valid checkpoint (the file is empty)", _file("w.pt", b"")),
    Row(
        "pt-random-bytes-trusted",
        ("evaluate", "w.pt", "--arch", "resnet18", "--trust-pickled-model-code"),
        3,
        "not a valid checkpoint",
        _file("w.pt", _RANDOM_BYTES),
    ),
    Row(
        "ckpt-keys-do-not-fit",
        ("evaluate", "last.ckpt", "--arch", "macs_resnet9_c10", "--data", "{data}"),
        3,
        "under 'model.', which was not stripped because criterion.weight lacks it",
        _lightning("last.ckpt", extra_key=True),
    ),
    Row(
        "onnx-external-data-missing",
        ("evaluate", "big.onnx", "--data", "{data}"),
        3,
        "keep big.onnx.data next to big.onnx",
        _onnx_without_its_data("big.onnx"),
    ),
    Row(
        "finetune-negative-checkpoint-every",
        ("finetune", "w.pt", "--data", "{data}", "--out", "o", "--checkpoint-every", "-1"),
        2,
        "'--checkpoint-every'",
    ),
    # moved from tests/cli/test_cli_evaluate.py: a model or data set that cannot be audited
    Row("evaluate-missing-model", _quick("nope.onnx"), 3, "model not found: nope.onnx"),
    Row(
        "evaluate-corrupt-onnx",
        _quick("c.onnx"),
        3,
        "cannot load ONNX model c.onnx",
        _file("c.onnx", b"\x08\x07garbage" * 10),
    ),
    Row(
        "evaluate-class-count",
        _quick("k5.onnx"),
        3,
        "the model has 5 classes but the data set has 10",
        _onnx("k5.onnx", num_classes=5),
    ),
    Row(
        "evaluate-wrong-input-size",
        _quick("{model}", "{data}", "--input-size", "64"),
        3,
        "input is 32x32 but the input size is set to 64x64",
    ),
    Row("evaluate-nan-logits", _quick("nan.onnx"), 3, "NaN or infinite outputs", _onnx("nan.onnx", nan=True)),
    Row(
        "evaluate-pickled-module",
        _quick("module.pt"),
        3,
        "--trust-pickled-model-code",
        _pickled("module.pt", whole_module=True),
    ),
    Row(
        "evaluate-state-dict-without-arch",
        _quick("sd.pt"),
        2,
        "sd.pt holds only weights: pass --arch",
        _pickled("sd.pt", whole_module=False),
    ),
    Row(
        "evaluate-empty-data",
        _quick("{model}", "e.npz"),
        3,
        "e.npz: the data set is empty",
        _npz("e.npz", x=np.zeros((0, 32, 32, 3), np.uint8), y=np.zeros(0, np.int64)),
    ),
    Row(
        "evaluate-label-out-of-range",  # no class names: 11 classes are inferred, the model has 10
        _quick("{model}", "l.npz"),
        3,
        "the model has 10 classes but the data set has 11",
        _npz("l.npz", x=_X, y=np.where(np.arange(12) == 3, 10, _Y)),
    ),
    Row("evaluate-missing-data-with-outputs", _quick("{model}", "missing.npz"), 3, "data not found: missing.npz"),
    Row("evaluate-unknown-device", ("evaluate", "{model}", "--device", "tpu"), 2, "unknown device 'tpu'"),
    Row(
        "evaluate-calibration-split-1.5",
        ("evaluate", "{model}", "--calibration-split", "1.5"),
        2,
        "--calibration-split must be in [0, 1), got 1.5",
    ),
    Row("evaluate-batch-size-0", ("evaluate", "{model}", "--batch-size", "0"), 2, "Invalid value for '--batch-size'"),
    Row("evaluate-no-model", ("evaluate",), 2, "give MODEL (or the model in the spec's evaluate table"),
    # moved from tests/cli/test_cli_corrupt.py
    Row(
        "cifar-c-other-labels",
        (*QUICK, "--corruptions", "fog", "--cifar-c", "cc", "-o", "r.json"),
        3,
        "does not match",
        _cifar_c("cc", 60, shift=1),
    ),
    # gate configs, reports and formats of the saved-report commands (tests/cli/test_cli_gate.py, test_cli_report.py)
    *(
        Row(f"gate-config-{name}", ("gate", "{report}", "--config", "bad.toml"), code, message, _file("bad.toml", text))
        for name, text, code, message in (
            ("unknown-key", "[gate]\nmax_ecee = 0.1\n", 2, "unknown key 'max_ecee'"),
            ("string-threshold", "[gate]\nmax_ece = 'low'\n", 2, "max_ece must be a finite number, got str"),
            ("bad-toml", "[gate\n", 2, "not valid TOML"),
            ("corruption-mean-not-run", "[gate]\nmin_corruption_accuracy = 0.5\n", 3, "mean_accuracy_15"),
            (
                "unrun-corruption",
                "[gate]\nmax_ece = 0.1\n[gate.corruptions.snow]\nmin_accuracy = 0.5\n",
                3,
                "no such corruption",
            ),
        )
    ),
    Row("gate-missing-report", ("gate", "missing.json", "--config", "{config}"), 3, "report not found"),
    Row("gate-config-not-found", ("gate", "{report}", "--config", "nope.toml"), 2, "gate config not found"),
    Row("gate-no-config", ("gate", "{report}"), 2, "no gate thresholds found", _remove("macs-audit.toml")),
    Row(
        "gate-unknown-format",
        ("gate", "{report}", "--config", "{config}", "--format", "pdf"),
        2,
        "unknown --format 'pdf'",
    ),
    Row(
        "gate-formats-outputs-mismatch",
        ("gate", "{report}", "--config", "{config}", "-f", "md", "-f", "html", "-o", "x.md"),
        2,
        "2 --format but 1 --output",
    ),
    Row(
        "gate-output-format-unknown",
        ("gate", "{report}", "--config", "{config}", "-o", "x.pdf"),
        2,
        "cannot tell the format",
    ),
    Row(
        "gate-baseline-without-allowances",
        ("gate", "{report}", "--config", "pass.toml", "--baseline", "{report}"),
        2,
        "a baseline report was given but pass.toml [gate] has no [gate.baseline] allowances",
        _file("pass.toml", PASSING),
    ),
    Row("report-junit", ("report", "{report}", "-f", "junit"), 2, "JUnit output lists gate checks"),
    Row("report-pr-comment", ("report", "{report}", "-f", "pr-comment"), 2, "comment reports the gate's checks"),
    Row("report-not-json", ("report", "{config}"), 3, "not valid JSON"),
    Row("compare-missing-report", ("compare", "{report}", "missing.json"), 3, "report not found"),
    # moved from tests/cli/test_export.py and tests/finetune/test_finetune.py
    Row("export-onnx", ("export", "{model}"), 2, "already an ONNX"),
    Row("export-unknown-precision", ("export", "{model}", "--precision", "bf16"), 2, "unknown --precision 'bf16'"),
    Row(
        "export-int8-without-calibration-data",
        ("export", "{model}", "--precision", "int8"),
        2,
        "needs --calibration-data",
    ),
    Row(
        "export-fp16-with-calibration-data",
        ("export", "{model}", "--precision", "fp16", "--calibration-data", "{data}"),
        2,
        "--calibration-data is for --precision int8, not fp16",
    ),
    Row(
        "export-fp16-with-int8-target",
        ("export", "{model}", "--precision", "fp16", "--int8-target", "arm"),
        2,
        "--int8-target is for --precision int8, not fp16",
    ),
    Row(
        "export-fp32-with-int8-target",
        ("export", "{model}", "--int8-target", "x86"),
        2,
        "--int8-target is for --precision int8, not fp32",
    ),
    Row(
        "export-unknown-int8-target",
        ("export", "{model}", "--precision", "int8", "--calibration-data", "{data}", "--int8-target", "avx2"),
        2,
        "unknown --int8-target 'avx2'; choose from x86, x86-vnni, arm or gpu",
    ),
    Row(
        "export-int8-calibration-images-not-the-input",
        ("export", "{model}", "--precision", "int8", "--calibration-data", "g.npz", "--calibration-images", "20"),
        3,
        "the calibration images are 32x32x1 (H x W x C) but the model takes 3-channel images",
        _npz("g.npz", x=np.zeros((40, 32, 32, 1), np.uint8), y=np.arange(40) % 10),
    ),
    Row(
        "export-int8-calibration-data-other-classes",
        ("export", "{model}", "--precision", "int8", "--calibration-data", "k20.npz", "--calibration-images", "20"),
        3,
        "the model has 10 classes but the data set has 20",
        _npz("k20.npz", x=np.zeros((40, 32, 32, 3), np.uint8), y=np.arange(40) % 20),
    ),
    Row(
        "export-int8-too-few-calibration-images",
        ("export", "{model}", "--precision", "int8", "--calibration-data", "{data}", "--calibration-images", "512"),
        3,
        "--calibration-images 512 is more than the 60 images",
    ),
    Row("export-without-arch", ("export", "w.safetensors"), 2, "--arch", _safetensors("w.safetensors")),
    Row(
        "finetune-onnx",
        ("finetune", "{model}", "--data", "{data}", "--out", "o"),
        2,
        "is an ONNX model, which cannot be fine-tuned: fine-tune the PyTorch checkpoint",
    ),
    Row(
        "finetune-unknown-objective",
        ("finetune", "net.safetensors", "--data", "{data}", "--out", "o", "--objective", "hinge", "-q"),
        2,
        "--objective must be one of",
        _resnet9("net.safetensors"),
    ),
    # ---------------------------------------------------- models, data, options, export and training
    Row(
        "export-opset-1",
        ("export", "net.safetensors", "--opset", "1"),
        2,
        "opsets 18 to 25",
        _resnet9("net.safetensors"),
    ),
    Row(
        "export-opset-99999",
        ("export", "net.safetensors", "--opset", "99999"),
        2,
        "opsets 18 to 25",
        _resnet9("net.safetensors"),
    ),
    Row(
        "npz-cut-in-half",
        _quick("{model}", "half.npz"),
        3,
        "the archive is incomplete",
        _damaged_npz("half.npz", "half"),
    ),
    Row(
        "npz-bad-crc",
        _quick("{model}", "crc.npz"),
        3,
        "the archive is damaged (Bad CRC-32",
        _damaged_npz("crc.npz", "crc"),
    ),
    Row(
        "npz-header-claims-1e9-images",
        _quick("{model}", "huge.npz"),
        3,
        "needs 2.79 TiB, more than the 32.00 GiB an .npz array may hold",
        _npz_claiming("huge.npz", (10**9, 32, 32, 3)),
    ),
    Row(
        "npz-header-claims-more-than-it-holds",
        _quick("{model}", "short.npz"),
        3,
        "holds 3.00 KiB: the file is damaged or cut short",
        _npz_claiming("short.npz", (1000, 32, 32, 3)),
    ),
    Row(
        "png-header-1e10-pixels",
        _quick("{model}", "bomb"),
        3,
        "has 10,000,000,000 pixels, more than the 89,478,485",
        _png_tree("bomb", 100_000, 100_000),
    ),
    Row(
        "png-12000x12000-no-pillow-warning",
        _quick("{model}", "big"),
        3,
        "is 12000x12000 (144,000,000 pixels)",
        _png_tree("big", 12_000, 12_000),
    ),
    Row(
        "onnx-dynamic-input-size-60000",
        _quick("dyn.onnx", "{data}", "--input-size", "60000"),
        2,
        "input_size 60000x60000 from --input-size is larger than 4096x4096",
        _onnx("dyn.onnx", size="side"),
    ),
    Row(
        "onnx-metadata-input-size-60000",
        _quick("dyn.onnx"),
        2,
        "input_size 60000x60000 from the model's ONNX metadata is larger than 4096x4096",
        _onnx("dyn.onnx", size="side", metadata={"macs_audit.input_size": "[60000, 60000]"}),
    ),
    Row(
        "onnx-metadata-num-classes-not-a-number",
        _quick("abc.onnx"),
        2,
        "num_classes must be a whole number, got 'abc' from the model's ONNX metadata",
        _onnx("abc.onnx", metadata={"macs_audit.num_classes": '"abc"'}),
    ),
    Row(
        "evaluate-severities-1-10000000000",
        (*QUICK, "--corruptions", "fog", "--severities", "1-10000000000"),
        2,
        "severities must lie in 1-5, got '1-10000000000'",
    ),
    Row("evaluate-mean-nan", _quick("{model}", "{data}", "--mean", "nan,nan,nan"), 2, "--mean must be finite numbers"),
    Row("evaluate-std-nan", _quick("{model}", "{data}", "--std", "nan,nan,nan"), 2, "--std must be finite numbers"),
    Row(
        "torchscript-forward-raises",
        _quick("raise.pt"),
        3,
        "the model raise.pt failed on a batch of shape (60, 3, 32, 32)",
        _scripted("raise.pt", "raise"),
    ),
    Row(
        "torchscript-returns-a-tuple",
        _quick("tuple.pt"),
        3,
        "returned a tuple of 2 (Tensor, Tensor), not a tensor: its forward must return one tensor of logits",
        _scripted("tuple.pt", "tuple"),
    ),
    Row(
        "torchscript-returns-a-dict",
        _quick("dict.pt"),
        3,
        "returned a dict with keys 'logits', not a tensor",
        _scripted("dict.pt", "dict"),
    ),
    Row(
        "sidecar-nested-100k-deep",
        _quick("deep.onnx"),
        3,
        "sidecar deep.json: JSON nested too deeply",
        _all(_onnx("deep.onnx"), _file("deep.json", "[" * 100_000 + "]" * 100_000)),
    ),
    Row(
        "finetune-epochs-inf",
        (*FINETUNE_QUICK, "--data", "{data}", "--batch-size", "16", "--epochs", "inf"),
        2,
        "--epochs must be a finite number, got inf",
        _resnet9("net.safetensors"),
    ),
    Row(
        "finetune-val-data-missing",
        (*FINETUNE_QUICK, "--data", "{data}", "--batch-size", "16", "--val-data", "missing.npz"),
        3,
        "missing.npz",
        _resnet9("net.safetensors"),
    ),
    Row(
        "finetune-from-scratch-unknown-arch",
        (*FINETUNE_QUICK, "--data", "{data}", "--batch-size", "16", "--from-scratch", "--arch", "no_such_net"),
        2,
        "no_such_net",
        _resnet9("net.safetensors"),
    ),
    Row(
        "finetune-fewer-images-than-a-batch",
        (*FINETUNE_QUICK, "--data", "d20.npz"),
        2,
        "the training split has 20 images, fewer than --batch-size 128",
        _all(_resnet9("net.safetensors"), _npz("d20.npz", x=np.concatenate([_X, _X[:8]]), y=np.arange(20) % 10)),
    ),
    # ------------------------------------------- reports, configs, writers and strings from the data
    *(
        [Row("init-out-is-dev-full", ("init", "{report}", "-o", "/dev/full"), 3, "cannot write /dev/full: No space")]
        if os.path.exists("/dev/full")
        else []
    ),
    Row(
        "report-nested-100k-deep",
        ("report", "deep.json"),
        3,
        "deep.json: not a macs-audit report: nested more than 64 levels deep",
        _file("deep.json", "[" * 100_000 + "]" * 100_000),
    ),
    Row(
        "gate-config-array-20k-deep",
        ("gate", "{report}", "--config", "deep.toml"),
        2,
        "deep.toml cannot be used: arrays or tables nested more than 64 levels deep",
        _file("deep.toml", "[gate]\nmin_accuracy = " + "[" * 20_000 + "]" * 20_000 + "\n"),
    ),
    Row(
        "gate-clean-metrics-null",
        ("gate", "bad.json", "--config", "{config}"),
        3,
        "bad.json: clean.metrics: expected an object, got null",
        _report_json("bad.json", _put("clean.metrics", None)),
    ),
    Row(
        "compare-clean-metrics-a-list",
        ("compare", "{report}", "bad.json"),
        3,
        "bad.json: clean.metrics: expected an object, got an array",
        _report_json("bad.json", _put("clean.metrics", [0.9])),
    ),
    Row(
        "report-class-names-a-number",
        ("report", "bad.json", "-f", "html"),
        3,
        "bad.json: data.class_names: expected an array of strings, got 5",
        _report_json("bad.json", _put("data.class_names", 5)),
    ),
    Row(
        "report-created-a-number",
        ("report", "bad.json", "-f", "md"),
        3,
        "bad.json: created: expected a string, got 5",
        _report_json("bad.json", _put("created", 5)),
    ),
    Row(
        "report-interval-not-a-pair",
        ("report", "bad.json"),
        3,
        "bad.json: clean.intervals.accuracy: expected an array of 2 numbers, got an array of 1",
        _report_json("bad.json", _put("clean.intervals.accuracy", [0.9])),
    ),
    Row(
        "gate-ood-score-a-string",
        ("gate", "bad.json", "--config", "{config}"),
        3,
        'bad.json: ood.scores.msp.auroc: expected a number, got "high"',
        _report_json("bad.json", _put("ood.scores.msp.auroc", "high")),
    ),
    Row(
        "report-nan",
        ("report", "bad.json"),
        3,
        "bad.json: not valid JSON: NaN is not a JSON number",
        _report_json("bad.json", text='{"schema_version": "3.0", "clean": {"metrics": {"ece": NaN}}}'),
    ),
    Row(
        "report-schema-1-x",  # read by 2.x for one major version; 3.0 reads 2.x and 3.x only
        ("report", "old.json"),
        3,
        "old.json: report schema 1.2 is not supported (this version writes 3.4 and reads 2.x and 3.x)",
        _report_json("old.json", _put("schema_version", "1.2")),
    ),
    Row("report-missing-named-with-escapes", ("report", f"{ESC}gone.json"), 3, f"not found: {ESC_SHOWN}gone.json"),
    Row(
        "gate-corruption-names-with-escapes-in-the-message",
        ("gate", "evil.json", "--config", "snow.toml"),
        3,
        f"(it has: fog{ESC_SHOWN})",
        _all(_report_json("evil.json", _hostile), _file("snow.toml", "[gate.corruptions.snow]\nmin_accuracy = 0.5\n")),
    ),
    # natural-shift sets and their label spaces (--shift-data, --class-map)
    Row("evaluate-shift-data-no-name", (*QUICK, "--shift-data", "{tmp}/a"), 2, "--shift-data must be NAME=DIR"),
    Row("evaluate-shift-data-twice", (*QUICK, "--shift-data", "a=x", "--shift-data", "a=y"), 2, "names 'a' twice"),
    Row(
        "evaluate-class-map-of-no-class",
        (*QUICK, "--class-map", "m.json"),
        2,
        "--class-map m.json names none of the classes of --data",
        _file("m.json", '{"bus": 1}'),
    ),
    Row("evaluate-shift-data-missing", (*QUICK, "--shift-data", "a={tmp}/gone"), 3, "data not found"),
    Row(
        "evaluate-class-prompts-on-a-model-that-reads-none",
        (*QUICK, "--class-prompts", "p.json"),
        2,
        "--class-prompts p.json is read only by an OpenCLIP zero-shot model (--arch open_clip:NAME)",
        _file("p.json", '{"classes": ["a", "b"], "templates": ["a {}"]}'),
    ),
    Row(
        "evaluate-shift-wordnet-ids-on-10-outputs",
        (*QUICK, "--shift-data", "a=a"),
        3,
        "--shift-data a: the data's classes are WordNet ids but the model has 10 outputs",
        _image_tree("a", ("n01440764", "n01443537")),
    ),
    Row(
        "evaluate-shift-partial-class-map",
        (*QUICK, "--shift-data", "a=a", "--class-map", "m.json"),
        3,
        "class map m.json: 1 of the data's classes does not map: car",
        _all(_image_tree("a", ("bus", "car")), _file("m.json", '{"bus": 1}')),
    ),
    Row(
        "evaluate-shift-class-map-not-json",
        (*QUICK, "--shift-data", "a=a", "--class-map", "m.json"),
        2,
        "--class-map m.json: not valid JSON",
        _all(_image_tree("a", ("bus",)), _file("m.json", "{bus")),
    ),
    Row(
        "evaluate-shift-class-map-csv-rows",
        (*QUICK, "--shift-data", "a=a", "--class-map", "m.csv"),
        2,
        "every CSV row must be class,index",
        _all(_image_tree("a", ("bus",)), _file("m.csv", "bus,1,2\n")),
    ),
    Row("evaluate-real-labels-of-an-npz", (*QUICK, "--real-labels"), 3, "needs the ImageNet validation images"),
    Row(
        "evaluate-real-labels-file-not-a-list",
        (*QUICK, "--real-labels-file", "real.json"),
        2,
        "--real-labels-file real.json: expected a list of 50,000 label lists",
        _file("real.json", "[[1]]"),
    ),
    Row("evaluate-shards-missing", ("evaluate", "{model}", "--data", "s-{{000..001}}.tar", "-q"), 3, "shard not found"),
    Row(
        "evaluate-shards-not-a-tar",
        ("evaluate", "{model}", "--data", "s.tar", "-q"),
        3,
        "s.tar is not an uncompressed tar shard",
        _file("s.tar", b"\x1f\x8b" + b"0" * 600),
    ),
    Row(
        "evaluate-shards-classes-file-short",
        ("evaluate", "{model}", "--data", "s.tar", "-q"),
        3,
        "classes.txt names 1 classes but the shards' labels go up to 1",
        _all(_shard("s.tar", (0, 1)), _file("classes.txt", "n01440764\n")),
    ),
    Row(
        "evaluate-sidecar-model-args-not-an-object",
        ("evaluate", "net.safetensors", "-q"),
        2,
        "model_args must be a JSON object of the architecture's keyword arguments",
        _safetensors("net.safetensors", {"arch": "resnet18", "num_classes": 10, "model_args": "deep"}),
    ),
    Row(
        "evaluate-shards-bad-range",
        ("evaluate", "{model}", "--data", "s-{{9..1}}.tar", "-q"),
        2,
        "names no shard or too many",
    ),
    Row(
        "evaluate-a-subset-of-the-models-classes",
        ("evaluate", "{model}", "--data", "k5.npz", "-q"),
        3,
        "k5.npz: cannot map the data's 5 classes (a, b, c, d, e) to the model's 10 outputs, which it does not name",
        _npz("k5.npz", x=np.zeros((20, 32, 32, 3), np.uint8), y=np.arange(20) % 5, class_names=np.array(list("abcde"))),
    ),
    Row(
        "gate-shift-unknown-key",
        ("gate", "{report}", "--config", "s.toml"),
        2,
        "unknown key 'min_acc' in s.toml [gate]: shift.imagenet-a",
        _file("s.toml", "[gate.shift.imagenet-a]\nmin_acc = 0.5\n"),
    ),
    # Model sources (models/sources.py): folders, torch.export programs, the --arch prefixes, --precision.
    Row(
        "evaluate-model-folder-without-config",
        _quick("m"),
        3,
        "m is a folder without config.json: a model folder is a Hugging Face save_pretrained or timm save_for_hf",
        _dir("m"),
    ),
    Row(
        "evaluate-model-folder-config-not-a-models",
        _quick("m"),
        3,
        "m/config.json is not a model's configuration: it names neither a timm architecture",
        _file("m/config.json", '{"name": "my dataset", "version": 2}'),
    ),
    Row(
        "evaluate-timm-folder-without-weights",
        _quick("m"),
        3,
        "m has a config.json but no weights: expected model.safetensors or pytorch_model.bin beside it",
        _file("m/config.json", '{"architecture": "resnet18", "num_classes": 10}'),
    ),
    Row(
        "evaluate-timm-folder-wrong-class-count",
        (*_quick("m"), "--num-classes", "10"),
        3,
        "--num-classes 10 does not match the 3 classes of m/config.json",
        _all(
            _file("m/config.json", '{"architecture": "resnet18", "num_classes": 3}'),
            _file("m/model.safetensors", b"\0" * 8),
        ),
    ),
    Row(
        "evaluate-hf-folder-wrong-class-count",
        (*_quick("m"), "--num-classes", "10"),
        3,
        "--num-classes 10 does not match the 3 labels of m",
        _all(_file("m/config.json", '{"model_type": "vit", "num_labels": 3}'), _file("m/model.safetensors", b"")),
    ),
    Row(
        "evaluate-exported-program-damaged",
        _quick("net.pt2"),
        3,
        "cannot load torch.export program net.pt2",
        _file("net.pt2", _RANDOM_BYTES),
    ),
    Row(
        "evaluate-torchvision-unknown-builder",
        (*_quick("w.pt"), "--arch", "torchvision:not_a_net"),
        2,
        "--arch torchvision:not_a_net: not a torchvision classification model",
        _pickled("w.pt", whole_module=False),
    ),
    Row(
        "evaluate-open-clip-prompts-without-classes",
        (*_quick("w.pt"), "--arch", "open_clip:ViT-B-32", "--class-prompts", "p.json"),
        2,
        '--class-prompts p.json needs "classes": a list of at least 2 class names',
        _all(_pickled("w.pt", whole_module=False), _file("p.json", '{"templates": ["a photo of a {}."]}')),
    ),
    Row(
        "evaluate-open-clip-without-prompts",
        (*_quick("w.pt"), "--arch", "open_clip:ViT-B-32"),
        2,
        "--arch open_clip:NAME needs --class-prompts FILE",
        _pickled("w.pt", whole_module=False),
    ),
    Row(
        "evaluate-hf-hub-not-cached",
        _quick("hf-hub:timm/not-a-cached-model"),
        3,
        "hf-hub:timm/not-a-cached-model is not in the local Hugging Face cache",
        env={"HF_HUB_CACHE": "/nonexistent/macs-audit-hub-cache", "HF_HUB_OFFLINE": "1"},
    ),
    Row("evaluate-precision-unknown", (*QUICK, "--precision", "fp64"), 2, "--precision must be one of fp32, bf16"),
    Row("evaluate-precision-onnx", (*QUICK, "--precision", "bf16"), 2, "--precision bf16 is for torch models"),
    Row(
        "evaluate-interpolation-unknown",
        (*QUICK, "--interpolation", "lanczos"),
        2,
        "interpolation must be one of bilinear, bicubic, nearest, bilinear-no-antialias, bicubic-no-antialias, "
        "got 'lanczos' from --interpolation",
    ),
    Row(
        "evaluate-timm-folder-interpolation-unknown",
        _quick("m"),
        3,
        "m/config.json: interpolation 'lanczos' is not one macs-audit resizes with",
        _all(
            _file(
                "m/config.json",
                '{"architecture": "resnet18", "num_classes": 10, "pretrained_cfg": {"interpolation": "lanczos"}}',
            ),
            _file("m/model.safetensors", b"\0" * 8),
        ),
    ),
    Row(
        "gate-shift-set-not-in-report",
        ("gate", "{report}", "--config", "s.toml"),
        3,
        "the gate has thresholds for shift set 'imagenet-a' but the report has no such set",
        _file("s.toml", "[gate.shift.imagenet-a]\nmin_accuracy = 0.5\n"),
    ),
]


# ------------------------------------------------------------------------------------------ runner


def _snapshot(root: Path) -> dict[str, object]:
    """Every entry under `root`: a file's mode and content hash, a link's target, a directory."""
    out: dict[str, object] = {}
    for path in sorted(root.rglob("*")):
        rel = str(path.relative_to(root))
        if path.is_symlink():
            out[rel] = ("link", os.readlink(path))
        elif path.is_dir():
            out[rel] = ("dir",)
        elif path.is_file():
            out[rel] = ("file", path.stat().st_mode, hashlib.sha256(path.read_bytes()).hexdigest())
        else:
            out[rel] = ("special", path.stat().st_mode)
    return out


@pytest.fixture()
def workdir(tmp_path, monkeypatch):
    """The inputs every row can name, in a directory with no pyproject.toml above it to find."""
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".git").mkdir()  # stops the gate config search here
    linear_onnx(tmp_path / "model.onnx")
    x, y = tiny_images(60)
    np.savez(tmp_path / "data.npz", x=x, y=y)
    (tmp_path / "report.json").write_text(synthetic_report(corruptions=["fog"]).to_json())
    (tmp_path / "macs-audit.toml").write_text(PASSING)
    return tmp_path


def _fill(arg: str, tmp: Path) -> str:
    return arg.format(
        tmp=tmp,
        model=tmp / "model.onnx",
        data=tmp / "data.npz",
        report=tmp / "report.json",
        config=tmp / "macs-audit.toml",
    )


@pytest.mark.parametrize("row", ROWS, ids=[row.id for row in ROWS])
def test_bad_input(row: Row, workdir: Path, monkeypatch) -> None:
    if row.setup is not None:
        row.setup(workdir)
    for key, value in (row.env or {}).items():
        monkeypatch.setenv(key, _fill(value, workdir))
    before = _snapshot(workdir)
    result = runner.invoke(app, [_fill(arg, workdir) for arg in row.args])
    assert result.exit_code == row.exit_code, result.output
    assert row.message in result.stderr, result.stderr
    assert "unexpected" not in result.stderr and "Traceback" not in result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) <= 3, result.stderr  # one message (click adds its usage line and a hint)
    assert _snapshot(workdir) == before, "an input or output file changed"


# ------------------------------------------- faults a command line cannot produce, simulated here


@pytest.mark.parametrize("code", [errno.EROFS, errno.ENOSPC, errno.EPERM, errno.EACCES])
@pytest.mark.parametrize("command", ["evaluate", "report"])
def test_os_errors_on_write_name_the_users_path(workdir, monkeypatch, command, code):
    """A read-only file system, a full disk, a refused rename: exit 3, one line naming the user's path
    (never the atomic writer's temporary file), nothing left behind."""
    real_replace = os.replace

    def refuse(src, dst):
        if str(src).endswith(".tmp"):
            raise OSError(code, os.strerror(code), str(src), None, str(dst))
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", refuse)
    args = {
        "evaluate": [_fill(a, workdir) for a in QUICK] + ["-o", "out/r.json"],
        "report": ["report", str(workdir / "report.json"), "-o", "out/r.md"],
    }[command]
    before = _snapshot(workdir)
    result = runner.invoke(app, args)
    assert result.exit_code == 3, result.output
    target = "out/r.json" if command == "evaluate" else "out/r.md"
    assert f"error: cannot write {target}: {os.strerror(code)}" in result.stderr
    assert ".tmp" not in result.stderr and "unexpected" not in result.stderr
    after = _snapshot(workdir)
    assert {k: v for k, v in after.items() if k != "out"} == before  # at most the empty folder was made


def test_a_full_disk_while_saving_predictions_names_the_users_path(workdir, monkeypatch):
    import macs_audit.predictions.files as files_module

    def full(path, result):
        from macs_audit.atomic import atomic_path

        with atomic_path(path):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))  # what write() on a full disk raises

    monkeypatch.setattr(files_module, "write_predictions", full)
    result = runner.invoke(app, [_fill(a, workdir) for a in QUICK] + ["--save-predictions", "p.npz"])
    assert result.exit_code == 3
    assert "error: cannot write p.npz: No space left on device (free some space" in result.stderr
    assert not any(p.name.endswith(".tmp") for p in workdir.iterdir())


@pytest.mark.parametrize(
    "args,target",
    [
        (("evaluate", "missing.onnx", "-o", "ro/r.json"), "ro/r.json"),
        (("evaluate", "missing.onnx", "--save-predictions", "ro/p.npz"), "ro/p.npz"),
        (("calibrate", "missing.onnx", "--data", "{data}", "--out", "ro/cal"), "ro/cal"),
        (("finetune", "missing.pt", "--data", "{data}", "--out", "ro/ft"), "ro/ft"),
        (("export", "missing.pt", "--out", "ro/m.onnx"), "ro/m.onnx"),
        (("corrupt", "--data", "missing.npz", "--out", "ro/cc"), "ro/cc"),
        (("report", "{report}", "-o", "ro/r.md"), "ro/r.md"),
    ],
)
def test_an_unwritable_output_fails_before_anything_is_loaded(workdir, monkeypatch, args, target):
    """os.access is what a read-only mount answers (root included). The inputs here do not exist: had the
    command loaded them first, it would have failed on them instead."""
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode: False if Path(p) == workdir / "ro" else real_access(p, mode))
    (workdir / "ro").mkdir()
    before = _snapshot(workdir)
    result = runner.invoke(app, [_fill(a, workdir) for a in args])
    assert result.exit_code == 3 and f"error: cannot write {target}: Permission denied" in result.stderr, result.output
    assert _snapshot(workdir) == before


@pytest.mark.parametrize("config,code,verdict", [("pass", 0, "gate passed"), ("fail", 1, "gate FAILED")])
def test_an_unwritable_step_summary_is_a_warning_after_the_verdict(workdir, monkeypatch, config, code, verdict):
    (workdir / "fail.toml").write_text("[gate]\nmin_accuracy = 0.99\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(workdir))  # a directory: cannot be appended to
    args = ["gate", str(workdir / "report.json")] + (
        ["--config", str(workdir / "fail.toml")] if config == "fail" else []
    )
    result = runner.invoke(app, args)
    assert result.exit_code == code, result.output
    assert result.stderr.index(verdict) < result.stderr.index("warning: cannot append to $GITHUB_STEP_SUMMARY")
    assert "error" not in result.stderr


# ------------------------------------------- strings from the data, shown on every output

CORRUPTION_GATE = "[gate]\nmin_accuracy = 0.5\n[gate.corruptions]\nmin_accuracy = 0.01\n"  # a check per corruption
RENAMED = f"{ESC}b.json"  # a report whose file name holds escapes (compare names both files)


@pytest.mark.parametrize(
    "args, output, shown",
    [
        (("report", "evil.json"), None, "[bold]noise[/bold]\\x1b[2J"),  # markup in a view's name, as written
        (("report", "evil.json", "-f", "md"), None, "\\\\x1b\\[2J\\\\x1b\\]0;title\\\\x07net\\\\x00.onnx"),
        (("report", "evil.json", "-f", "html"), None, f"[red]cat[/red]{ESC_SHOWN}"),
        (("gate", "evil.json", "--config", "c.toml"), None, f"corruptions.fog{ESC_SHOWN}.min_accuracy"),
        (("gate", "evil.json", "--config", "c.toml", "-f", "md"), None, "gate passed"),
        (("gate", "evil.json", "--config", "c.toml", "-f", "junit", "-o", "out.xml"), "out.xml", "fog"),
        (("compare", "{report}", "evil.json"), None, f"[bold]noise[/bold]{ESC_SHOWN}"),
        (("compare", "{report}", RENAMED), None, f"B = {ESC_SHOWN}b.json"),
        (("compare", "{report}", "evil.json", "-f", "junit", "-o", "out.xml"), "out.xml", "noise"),
        (("compare", "{report}", "evil.json", "-f", "html"), None, "noise"),
    ],
    ids=[
        "report-terminal",
        "report-md",
        "report-html",
        "gate-terminal",
        "gate-md",
        "gate-junit",
        "compare-terminal",
        "compare-terminal-file-name",
        "compare-junit",
        "compare-html",
    ],
)
def test_strings_from_the_data_reach_no_output_raw(workdir, args, output, shown):
    """Escapes and control characters in a report's strings are shown as escapes (macs_audit.text.printable) in
    every format, rich markup in them is shown as written, and the JUnit XML parses. `color=True`: standard
    output is taken as a terminal would get it (click strips escapes only from what is not a terminal)."""
    import xml.etree.ElementTree as ET

    _report_json("evil.json", _hostile)(workdir)
    (workdir / RENAMED).write_bytes((workdir / "evil.json").read_bytes())
    (workdir / "c.toml").write_text(CORRUPTION_GATE)
    result = runner.invoke(app, [_fill(a, workdir) for a in args], color=True)
    assert result.exit_code == 0, result.output
    text = result.stdout + result.stderr
    if output is not None:
        text += (workdir / output).read_text(encoding="utf-8")
        ET.parse(workdir / output)  # XML 1.0 holds no control characters
    for raw in ("\x1b[2J", "\x1b]", "\x07", "\x00", "\u202e"):
        assert raw not in text, f"{raw!r} reached the output"
    assert shown in text


@pytest.mark.parametrize(
    "args",
    [
        ("evaluate", "{model}", "--data", "{data}", "--perturbations", "none", "--sensitivity-samples", "0"),
        ("report", "{report}", "-f", "md"),
    ],
    ids=["evaluate", "report"],
)
def test_an_output_name_with_escapes_is_shown_as_escapes(workdir, args):
    """The 'written to' line names the user's file through printable(), as error lines do."""
    name = f"{ESC}[2Jout[red]x[/red]"
    result = runner.invoke(app, [_fill(a, workdir) for a in args] + ["-o", name], color=True)
    assert result.exit_code == 0, result.output
    assert (workdir / name).is_file()
    assert "\x1b" not in result.stderr and f"written to {ESC_SHOWN}[2Jout[red]x[/red]" in result.stderr


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this system")
def test_init_streams_to_a_fifo_with_a_reader(workdir):
    """A FIFO is streamed to like every output (never read as a TOML file, never replaced by a file): the reader
    gets the table and init returns."""
    import threading

    fifo = workdir / "gate.fifo"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()), daemon=True)
    reader.start()
    before = _snapshot(workdir)
    outcome: list = []
    command = threading.Thread(
        target=lambda: outcome.append(runner.invoke(app, ["init", str(workdir / "report.json"), "-o", str(fifo)])),
        daemon=True,
    )
    command.start()
    command.join(timeout=60)
    if command.is_alive():  # unblock both threads (a writer, then its end closed) before failing
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        pytest.fail("init -o FIFO did not return")
    reader.join(timeout=10)
    result = outcome[0]
    assert result.exit_code == 0, result.output
    assert got and b"[tool.macs-audit.gate]" in got[0] and b"min_accuracy" in got[0]
    assert _snapshot(workdir) == before  # still the FIFO, nothing beside it


# --------------------------------------- unreadable models and data, interruptions, simulated here


@pytest.mark.parametrize(
    "which,path,args",
    [
        ("model", "model.onnx", _quick()),
        ("data", "data.npz", _quick()),
        ("data", "images", _quick("{model}", "{tmp}/images")),
        ("report", "report.json", ("gate", "{report}", "--config", "{config}")),
        ("report", "report.json", ("report", "{report}")),
        ("report", "report.json", ("compare", "{report}", "{report}")),
        ("report", "report.json", ("init", "{report}", "-o", "{tmp}/new.toml")),
    ],
    ids=["model", "npz", "image-folder", "gate-report", "report", "compare", "init"],
)
def test_an_unreadable_input_is_an_input_error_from_its_loader(workdir, monkeypatch, which, path, args):
    """chmod 000 as a user other than root (the tests run as root, who reads it anyway): os.access, which click's
    readable check asks, says no, and opening the file (listing the folder) raises PermissionError. Not click's
    usage error (exit 2): the loader's input error (exit 3), naming the file or folder."""
    import builtins
    import io

    target = workdir / path
    if path == "images":
        (target / "cat").mkdir(parents=True)
    real_access, real_open, real_listdir = os.access, io.open, os.listdir

    def access(name, mode, *args, **kwargs):
        return False if Path(name) == target else real_access(name, mode, *args, **kwargs)

    def refusing(real):
        def call(file, *args, **kwargs):
            if isinstance(file, (str, os.PathLike)) and Path(file) == target:
                raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(file))
            return real(file, *args, **kwargs)

        return call

    before = _snapshot(workdir)
    monkeypatch.setattr(os, "access", access)
    monkeypatch.setattr(io, "open", refusing(real_open))
    monkeypatch.setattr(builtins, "open", refusing(real_open))
    monkeypatch.setattr(os, "listdir", refusing(real_listdir))
    result = runner.invoke(app, [_fill(a, workdir) for a in args])
    monkeypatch.undo()
    assert result.exit_code == 3, result.output
    assert f"error: cannot read {which} {target}: Permission denied" in result.stderr, result.stderr
    assert "unexpected" not in result.stderr and "not readable" not in result.stderr
    assert _snapshot(workdir) == before


@pytest.mark.parametrize("command", ["evaluate", "calibrate", "finetune"])
def test_an_interrupt_is_one_line_and_exit_130_in_every_command(workdir, monkeypatch, command):
    """Ctrl-C: a real SIGINT to this process in the middle of the work (the audit, the calibration, finetune's
    first training step). Every command ends the same way: the line 'interrupted', exit 130, no traceback, and
    no temporary file left behind (what was written before it is whole)."""
    import signal
    import time

    def interrupted(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(30)  # the KeyboardInterrupt arrives here
        raise AssertionError("no SIGINT arrived")

    if command == "evaluate":
        monkeypatch.setattr("macs_audit.plan.run_audit", interrupted)
        args = QUICK
    elif command == "calibrate":
        monkeypatch.setattr("macs_audit.calibrating.run_calibrate", interrupted)
        args = (*CALIBRATE, "--out", "cal")
    else:
        _resnet9("net.safetensors")(workdir)
        monkeypatch.setattr("macs_audit.finetune.loop.training_step", interrupted)
        args = (*FINETUNE_QUICK, "--data", "{data}", "--batch-size", "16")
    # Python's own Ctrl-C handler, as under a terminal: a shell starts a background job (`pytest &`, as a CI script
    # may) with SIGINT ignored, and Python then installs none.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        result = runner.invoke(app, [_fill(a, workdir) for a in args])
    finally:
        signal.signal(signal.SIGINT, previous)
    assert result.exit_code == 130, result.output
    assert result.stderr.strip().splitlines()[-1] == "interrupted", result.stderr
    assert "Traceback" not in result.output and "error" not in result.stderr
    assert not [p for p in workdir.rglob("*") if p.name.endswith(".tmp")]
