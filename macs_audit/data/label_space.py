"""Label spaces: a data set's classes mapped to the model's outputs.

A data set may name fewer classes than the model outputs (ImageNet-A and ImageNet-R hold 200 of
ImageNet's 1,000) or name them in another order. Its classes are mapped to output indices, in this order:

1. an explicit class map (`--class-map FILE`: JSON `{"class": index}` or CSV rows `class,index`);
2. the model's class names (its sidecar or metadata), where every data class is one of them;
3. WordNet ids (`n01440764`) of ImageNet-style folders, for a 1,000-output model: their place in timm's
   `imagenet_synsets.txt` (and, for ImageNet-A's or ImageNet-R's 200 classes, timm's own index list of that
   set, which names the set in the report);
4. names that are numbers (ImageNetV2's folders `0`..`999`, a shard set's `.cls` labels without its
   `classes.txt`, data/shards.py): the output of that
   index (not the folder's place in sorted order: `10` sorts before `2`);
5. the same number of classes as outputs, no names to go by: class i is output i (the audit's rule for --data).

A map that leaves a data class without an output is an error naming those classes. The files of timm's
`data/_info/` are read from the installed package without importing timm.
"""

from __future__ import annotations

import csv
import dataclasses
import importlib.util
import json
import re
from functools import lru_cache
from pathlib import Path

import numpy as np

from macs_audit.data.sources import Source
from macs_audit.errors import InputError, UsageError

WORDNET_ID = re.compile(r"n\d{8}")
IMAGENET_OUTPUTS = 1000
# timm's lists of the 200-class subsets: the set's synsets and their indices among ImageNet-1k's outputs.
KNOWN_SUBSETS = {
    "imagenet-a": ("imagenet_a_synsets.txt", "imagenet_a_indices.txt"),
    "imagenet-r": ("imagenet_r_synsets.txt", "imagenet_r_indices.txt"),
}
MAX_CLASS_MAP_BYTES = 16 * 1024 * 1024
SHOWN = 5  # classes a message names before it counts the rest


@dataclasses.dataclass(frozen=True)
class LabelSpace:
    """`outputs[c]` is the model output of data class c."""

    classes: tuple[str, ...]
    outputs: np.ndarray  # int64 (len(classes),)
    num_outputs: int
    mapped_by: str  # how the map was made, as the report states it

    @property
    def is_subset(self) -> bool:
        return len(self.classes) < self.num_outputs

    @property
    def is_identity(self) -> bool:
        return len(self.classes) == self.num_outputs and bool(np.all(self.outputs == np.arange(self.num_outputs)))

    def model_labels(self, labels: np.ndarray) -> np.ndarray:
        """The data's labels as the model's output indices (the unrestricted convention's labels)."""
        return self.outputs[np.asarray(labels, dtype=np.int64)]

    def restrict(self, logits: np.ndarray) -> np.ndarray:
        """The logits of the data's classes only, in the data's class order (the restricted convention)."""
        return logits[:, self.outputs]

    def describe(self) -> dict:
        return {"mapped_by": self.mapped_by, "num_classes": len(self.classes), "num_outputs": self.num_outputs}


@dataclasses.dataclass(frozen=True)
class MappedSource:
    """A named evaluation set (`--shift-data NAME=DIR`) and its classes' map to the model's outputs."""

    name: str
    source: Source
    space: LabelSpace

    def in_model_labels(self) -> Source:
        """The source with its labels as model output indices (what the unrestricted convention scores)."""
        return dataclasses.replace(self.source, labels=self.space.model_labels(self.source.labels))


def _listing(names: list[str]) -> str:
    shown = ", ".join(names[:SHOWN])
    return shown + (f" and {len(names) - SHOWN} more" if len(names) > SHOWN else "")


def timm_info_file(name: str) -> Path:
    """A file of the installed timm's `data/_info/` (found without importing timm)."""
    spec = importlib.util.find_spec("timm")
    if spec is None or not spec.submodule_search_locations:
        raise InputError(f"mapping classes by WordNet id reads timm's {name}: install timm (pip install timm)")
    path = Path(list(spec.submodule_search_locations)[0]) / "data" / "_info" / name
    if not path.is_file():
        raise InputError(f"the installed timm has no data/_info/{name}; upgrade timm")
    return path


@lru_cache(maxsize=None)
def timm_lines(name: str) -> tuple[str, ...]:
    """The non-empty lines of one of timm's `data/_info/` lists."""
    return tuple(line.strip() for line in timm_info_file(name).read_text().splitlines() if line.strip())


def imagenet_synsets() -> tuple[str, ...]:
    """ImageNet-1k's WordNet ids in the order of its 1,000 outputs (timm's imagenet_synsets.txt)."""
    return timm_lines("imagenet_synsets.txt")


def read_class_map(path: str | Path) -> dict[str, int]:
    """A class map file: JSON `{"class": index, ...}` or CSV rows `class,index` (a header row is skipped)."""
    path = Path(path)
    if not path.is_file():
        raise UsageError(f"--class-map {path}: not found (a JSON or CSV file of class -> model output index)")
    if path.stat().st_size > MAX_CLASS_MAP_BYTES:
        raise UsageError(f"--class-map {path}: larger than {MAX_CLASS_MAP_BYTES // 2**20} MiB; not a class map")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"--class-map {path}: cannot be read as UTF-8 text ({exc})") from None
    if path.suffix.lower() == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise UsageError(f"--class-map {path}: not valid JSON ({exc})") from None
        if not isinstance(data, dict):
            raise UsageError(f"--class-map {path}: expected a JSON object of class -> index")
        pairs = list(data.items())
    elif path.suffix.lower() == ".csv":
        rows = [row for row in csv.reader(text.splitlines()) if row and any(cell.strip() for cell in row)]
        if rows and len(rows[0]) >= 2 and not rows[0][1].strip().lstrip("-").isdigit():
            rows = rows[1:]  # a header
        if any(len(row) != 2 for row in rows):
            raise UsageError(f"--class-map {path}: every CSV row must be class,index")
        pairs = [(row[0].strip(), row[1].strip()) for row in rows]
    else:
        raise UsageError(f"--class-map {path}: expected a .json or .csv file")
    mapping: dict[str, int] = {}
    for name, index in pairs:
        if isinstance(index, str) and index.lstrip("-").isdigit():
            index = int(index)
        if isinstance(index, bool) or not isinstance(index, int):
            raise UsageError(f"--class-map {path}: class {name!r} maps to {index!r}, not an output index")
        mapping[str(name)] = index
    if not mapping:
        raise UsageError(f"--class-map {path}: maps no class")
    return mapping


def _from_map(classes: list[str], mapping: dict[str, int], num_outputs: int, mapped_by: str) -> LabelSpace:
    missing = [c for c in classes if c not in mapping]
    if missing:
        raise InputError(f"{mapped_by}: {len(missing)} of the data's classes do not map: {_listing(missing)}")
    outputs = np.asarray([mapping[c] for c in classes], dtype=np.int64)
    outside = [c for c, o in zip(classes, outputs, strict=True) if not 0 <= o < num_outputs]
    if outside:
        raise InputError(
            f"{mapped_by}: {len(outside)} classes map outside the model's {num_outputs} outputs: {_listing(outside)}"
        )
    _, first, counts = np.unique(outputs, return_index=True, return_counts=True)
    shared = [classes[i] for i, n in zip(first, counts, strict=True) if n > 1]
    if shared:
        raise InputError(f"{mapped_by}: several data classes map to one output, as {_listing(shared)} do")
    return LabelSpace(tuple(classes), outputs, num_outputs, mapped_by)


def _by_wordnet_ids(classes: list[str], num_outputs: int) -> LabelSpace:
    if num_outputs != IMAGENET_OUTPUTS:
        raise InputError(
            f"the data's classes are WordNet ids but the model has {num_outputs} outputs, not ImageNet's "
            f"{IMAGENET_OUTPUTS}; pass --class-map FILE"
        )
    synsets = imagenet_synsets()
    for name, (synset_file, index_file) in KNOWN_SUBSETS.items():
        if sorted(classes) == sorted(timm_lines(synset_file)):
            indices = dict(zip(timm_lines(synset_file), map(int, timm_lines(index_file)), strict=True))
            return _from_map(classes, indices, num_outputs, f"{name}'s classes (timm's {index_file})")
    return _from_map(
        classes, {s: i for i, s in enumerate(synsets)}, num_outputs, "WordNet ids (timm's imagenet_synsets.txt)"
    )


def label_space(
    classes: list[str],
    num_outputs: int,
    *,
    model_classes: list[str] | None = None,
    class_map: dict[str, int] | None = None,
    class_map_name: str = "--class-map",
) -> LabelSpace:
    """The map of `classes` (the data's, in label order) to a model's `num_outputs` outputs (module docstring)."""
    if class_map is not None:
        return _from_map(classes, class_map, num_outputs, f"class map {class_map_name}")
    if model_classes:
        known = set(model_classes)
        if any(c in known for c in classes):
            index = {name: i for i, name in enumerate(model_classes)}
            return _from_map(classes, index, num_outputs, "the model's class names")
    if classes and all(WORDNET_ID.fullmatch(c) for c in classes):
        return _by_wordnet_ids(classes, num_outputs)
    if classes and all(c.isdigit() for c in classes):  # ImageNetV2's folders, a shard set's labels: the output
        numbered = {c: int(c) for c in classes}
        return _from_map(classes, numbered, num_outputs, "class names as output indices")
    if len(classes) == num_outputs:
        return LabelSpace(tuple(classes), np.arange(num_outputs, dtype=np.int64), num_outputs, "position")
    raise InputError(
        f"cannot map the data's {len(classes)} classes ({_listing(classes)}) to the model's {num_outputs} outputs: "
        "name them by WordNet id or by the model's class names, or pass --class-map FILE"
    )


def load_mapped_sets(
    named: list[tuple[str, Path]],
    num_outputs: int,
    *,
    image_size: tuple[int, int] | None,
    crop_pct: float | None = None,
    interpolation: str | None = None,
    crop_offset: str = "round",
    model_classes: list[str] | None = None,
    class_map: Path | None = None,
) -> tuple[MappedSource, ...]:
    """Each (name, folder or shard pattern) read as an ImageFolder or WebDataset shards with the model's
    preprocessing (`fit_image`, once: its size, crop_pct, interpolation and crop_offset, as for --data) and its
    classes mapped to the model's `num_outputs` outputs (`label_space`); the map's errors name the set."""
    from macs_audit.data.loading import DataSpec, load_data

    mapping = read_class_map(class_map) if class_map is not None else None
    found = []
    for name, path in named:
        source, _ = load_data(DataSpec(Path(path)), image_size, crop_pct, interpolation, crop_offset=crop_offset)
        if source.format not in ("imagefolder", "shards"):
            raise UsageError(f"--shift-data {name}: {path} is no image folder or shard set ({source.format})")
        try:
            space = label_space(
                source.class_names,
                num_outputs,
                model_classes=model_classes,
                class_map=mapping,
                class_map_name=str(class_map),
            )
        except InputError as exc:
            raise InputError(f"--shift-data {name}: {exc}") from None
        found.append(MappedSource(name, source, space))
    return tuple(found)
