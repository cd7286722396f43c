"""Every file and folder a run reads, listed from its options before anything is loaded: the inputs that no
output may replace (macs_audit.outputs compares each output with them, through links).

- a model (`model_inputs`): its file or folder and its sidecar; an ONNX model's external data files; for
  `hf-hub:ORG/NAME` (as MODEL, or as --arch of a weights file) the local Hugging Face cache's folder of that
  repository, whose snapshot holds links into its blobs;
- data (`data_inputs`): its file or folder (an image folder, CIFAR batches, a released -C folder); a shard
  pattern's files and the classes.txt beside its first shard; the built-in test set's file;
- any other file a command reads (class prompts, a class map, ReaL labels, a baseline report, a gate
  config): the file itself.

`run_inputs` puts them together for a command. Nothing here loads a model or reads data: a model or data set
that cannot be found lists what it names, and its loader says what is wrong later.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Iterable
from pathlib import Path

from macs_audit.errors import MacsAuditError, UsageError

PathLike = str | os.PathLike


@dataclasses.dataclass(frozen=True)
class ShardPattern:
    """The shards a pattern names (`shards-{000000..000099}.tar`; data/shards.py expands it, each range
    zero-padded to its first bound's width): an outputs.FilePattern."""

    spec: str

    def matches(self, path: Path) -> bool:
        """Whether `path` (absolute, links resolved) is one of the names, told without expanding the pattern."""
        from macs_audit.data.shards import BRACES

        first = BRACES.search(self.spec)
        folder = os.path.dirname(self.spec[: first.start()] if first else self.spec)  # before any range
        spec = os.path.join(os.path.realpath(folder or "."), self.spec[len(folder) :].lstrip(os.sep))
        parts = BRACES.split(spec)  # literal, lo, hi, literal, lo, hi, ..., literal
        regex = "".join(re.escape(p) if i % 3 == 0 else r"(\d+)" if i % 3 == 1 else "" for i, p in enumerate(parts))
        match = re.fullmatch(regex, os.fspath(path))
        if match is None:
            return False
        for digits, lo, hi in zip(match.groups(), parts[1::3], parts[2::3], strict=True):
            if not int(lo) <= int(digits) <= int(hi) or digits != f"{int(digits):0{len(lo)}d}":
                return False
        return True

    def files(self) -> list[Path]:
        """Every name (data.shards.expand, which bounds their number); [] where the loader refuses the pattern."""
        from macs_audit.data.shards import expand

        try:
            return expand(self.spec)
        except UsageError:  # nothing of it is read
            return []


Input = Path | ShardPattern


def model_inputs(model: PathLike | None, arch: str | None = None) -> list[Input]:
    """What loading `model` (a command's MODEL, --reference, ...) with --arch `arch` reads."""
    from macs_audit.models.config import sidecar_path
    from macs_audit.models.sources import HF_HUB_PREFIX, cached_hub_folder

    if model is None:
        return []
    path = Path(model)
    items: list[Input] = [path, sidecar_path(path)]
    for name in (os.fspath(model), arch):
        if (
            not isinstance(name, str)
            or not name.startswith(HF_HUB_PREFIX)
            or name == os.fspath(model)
            and path.exists()
        ):
            continue
        try:
            snapshot = cached_hub_folder(name)
        except MacsAuditError:  # not in the cache: loading says so, and there is nothing of it to replace
            continue
        # ORG--NAME/snapshots/REVISION holds links into ORG--NAME/blobs: the repository's folder holds both.
        items += [snapshot, snapshot.parent.parent if snapshot.parent.name == "snapshots" else snapshot]
    if path.suffix.lower() == ".onnx" and path.is_file():
        from macs_audit.models.onnx import external_data

        items += [path.parent / location for location in external_data(path)]
    return items


def writes_folder(model: PathLike, arch: str | None = None) -> bool:
    """Whether a model written from `model` is a folder (a Hugging Face model: save_pretrained), which the
    commands that write one replace as a whole; False where the source cannot be told (its loader says why)."""
    from macs_audit.models.sources import HF_TRANSFORMERS, resolve_source

    try:
        return resolve_source(Path(model), arch).kind == HF_TRANSFORMERS
    except MacsAuditError:
        return False


def data_inputs(data: PathLike | None) -> list[Input]:
    """What reading the data set `data` (--data and the other data options; None: the built-in set) reads."""
    from importlib import resources

    from macs_audit.data.shards import BRACES, CLASSES_FILE, is_shard_spec

    if data is None:
        return [Path(str(resources.files("macs_audit").joinpath("assets/cifar10_test.npz")))]
    text = os.fspath(data)
    if is_shard_spec(text):
        first = Path(BRACES.sub(lambda m: m.group(1), text))  # the first shard: classes.txt is beside it
        return [ShardPattern(text) if BRACES.search(text) else Path(text), first.parent / CLASSES_FILE]
    return [Path(text)]


def run_inputs(
    *,
    models: Iterable[tuple[PathLike | None, str | None]] = (),
    data: Iterable[PathLike | None] = (),
    files: Iterable[PathLike | None] = (),
) -> tuple[Input, ...]:
    """A command's inputs: each model (with its --arch), each data set (None: the built-in set, as DataSpec
    reads it; leave out an optional data option not given), each other file read (None: not given)."""
    items: list[Input] = []
    for model, arch in models:
        items += model_inputs(model, arch)
    for path in data:
        items += data_inputs(path)
    items += [Path(path) for path in files if path is not None]
    return tuple(items)
