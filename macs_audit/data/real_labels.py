"""ImageNet ReaL labels (Beyer et al. 2020, "Are we done with ImageNet?"): the multi-label re-annotation of
the 50,000 validation images, a JSON list whose entry i holds the ImageNet-1k output indices judged right for
`ILSVRC2012_val_{i+1:08d}.JPEG` (an empty list: no label judged right; such images are left out of ReaL's
scores). timm ships it as `data/_info/imagenet_real_labels.json`, read from the installed package (not
imported); `--real-labels FILE` reads another copy.

The labels are matched to an image folder's (or a shard set's) images by file name, so the folder must hold the
validation images under their own names (any suffix; shard members keyed by them), its classes the 1,000 WordNet
ids (a shard set's labels the 1,000 output indices): the model's outputs."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import numpy as np

from macs_audit.data.label_space import IMAGENET_OUTPUTS, imagenet_synsets, timm_info_file
from macs_audit.data.sources import Source
from macs_audit.errors import InputError
from macs_audit.files import file_error, read_small_json

TIMM_FILE = "imagenet_real_labels.json"
VALIDATION_IMAGES = 50_000
VALIDATION_NAME = re.compile(r"ILSVRC2012_val_(\d{8})")
MAX_BYTES = 64 * 1024 * 1024


def read_real_labels(path: str | Path | None = None) -> tuple[list[list[int]], str]:
    """The ReaL label sets, one per validation image, and where they were read from (`path`, else timm's)."""
    source = Path(path) if path is not None else timm_info_file(TIMM_FILE)
    shown = str(path) if path is not None else f"timm's {TIMM_FILE}"
    where = f"--real-labels-file {path}" if path is not None else shown
    option = "--real-labels-file" if path is not None else ""
    error = file_error(option)  # the file an option named: a usage error; timm's own: an input error
    data = read_small_json(source, MAX_BYTES, option=option, what=shown, holds="ReaL's label file")
    if not isinstance(data, list) or len(data) != VALIDATION_IMAGES:
        raise error(f"{where}: expected a list of {VALIDATION_IMAGES:,} label lists")
    for i, labels in enumerate(data):
        if not isinstance(labels, list) or not all(
            isinstance(x, int) and not isinstance(x, bool) and 0 <= x < IMAGENET_OUTPUTS for x in labels
        ):
            raise error(f"{where}: entry {i} is not a list of class indices 0-999")
    return data, shown


def real_label_sets(source: Source, labels: list[list[int]]) -> list[list[int]]:
    """Each position's ReaL labels, by the validation file number in its file name."""
    files = getattr(source.fetch, "files", None)
    index = getattr(source.fetch, "index", None)
    if source.format == "shards" and index is not None:
        files = index.names  # the members' names: webdataset keeps the validation files' stems as keys
    if source.format not in ("imagefolder", "shards") or files is None:
        raise InputError("--real-labels needs the ImageNet validation images as an image folder or shards (--data)")
    numbered = [str(i) for i in range(IMAGENET_OUTPUTS)]  # a shard set's .cls labels: the output indices
    if list(source.class_names) not in (list(imagenet_synsets()), numbered):
        raise InputError(
            f"--real-labels needs the 1,000 ImageNet classes as the data's class folders (WordNet ids) or labels; "
            f"{source.name} has {source.num_classes}"
        )
    underlying = source.indices if source.indices is not None else np.arange(len(source))
    sets = []
    for i in underlying.tolist():
        match = VALIDATION_NAME.search(Path(files[i]).name)
        number = int(match.group(1)) if match else 0
        if not 1 <= number <= VALIDATION_IMAGES:
            raise InputError(f"--real-labels: {files[i]} is not named as a validation image (ILSVRC2012_val_*)")
        sets.append(labels[number - 1])
    return sets


@dataclasses.dataclass(frozen=True)
class RealLabelSets:
    """The evaluated images' ReaL labels, in the data's order, and where they were read from."""

    sets: tuple[tuple[int, ...], ...]
    source: str


def load_real_labels(source: Source, path: str | Path | None = None) -> RealLabelSets:
    """The ReaL labels (timm's file, or `path`) of `source`'s images."""
    labels, shown = read_real_labels(path)
    return RealLabelSets(tuple(tuple(s) for s in real_label_sets(source, labels)), shown)
