"""Label spaces: a data set's classes mapped to the model's outputs.

A data set may name fewer classes than the model outputs (ImageNet-A and ImageNet-R hold 200 of
ImageNet's 1,000; a team's folder of the 20 classes it cares about) or name them in another order. Its classes
are mapped to output indices, for --data and every --shift-data set alike, by the first rule that applies:

1. an explicit class map (`--class-map FILE`: JSON `{"class": index}` or CSV rows `class,index`) that names
   every one of the set's classes (a map that names only some of them is left to the rules below: a map for
   a shift set that shares a name such as "cat" with --data leaves --data to match by name; where no other
   rule matches the set either, the error names the classes the map leaves out);
2. the model's class names (its sidecar or metadata, a Hugging Face folder's id2label, a timm folder's
   label_names), where the data's classes are among them: by name;
3. WordNet ids (`n01440764`) of ImageNet-style folders, for a 1,000-output model: their place in timm's
   `imagenet_synsets.txt` (and, for ImageNet-A's or ImageNet-R's 200 classes, timm's own index list of that
   set, which names the set in the report);
4. names that are numbers (ImageNetV2's folders `0`..`999`, a shard set's `.cls` labels without its
   `classes.txt`, data/shards.py): the output of that index (not the folder's place in sorted order: `10`
   sorts before `2`);
5. the same number of classes as outputs where one side names no classes (a model without class names, or
   whose names are its output numbers `0`..`K-1`; an .npz without class names): class i is output i, by
   position.

Where both sides name their classes and the names do not match (some or all of the data's classes are not
among the model's names, and rules 3 and 4 do not apply), the map is an error that asks for --class-map: never
by position. A map that leaves a data class without an output is an error naming those classes. The files of
timm's `data/_info/` are read from the installed package without importing timm.
"""

from __future__ import annotations

import csv
import dataclasses
import importlib.util
import re
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path

import numpy as np

from macs_audit.data.sources import Source
from macs_audit.errors import InputError, UsageError
from macs_audit.files import json_value, read_small_text
from macs_audit.models.config import MAX_CLASSES, ModelConfig

WORDNET_ID = re.compile(r"n\d{8}")
IMAGENET_OUTPUTS = 1000
# timm's lists of the 200-class subsets: the set's synsets and their indices among ImageNet-1k's outputs.
KNOWN_SUBSETS = {
    "imagenet-a": ("imagenet_a_synsets.txt", "imagenet_a_indices.txt"),
    "imagenet-r": ("imagenet_r_synsets.txt", "imagenet_r_indices.txt"),
}
MAX_CLASS_MAP_BYTES = 16 * 1024 * 1024
OUTPUT_INDEX = re.compile(r"[0-9]{1,7}")  # ASCII digits: str.isdigit() also takes "²", which int() refuses
SHOWN = 5  # classes a message names before it counts the rest
# The rules of the module docstring as data.class_matching names them (WordNet ids count as names).
BY_NAME, BY_INDEX, BY_CLASS_MAP, BY_POSITION = "name", "index", "class-map", "position"


@dataclasses.dataclass(frozen=True)
class LabelSpace:
    """`outputs[c]` is the model output of data class c."""

    classes: tuple[str, ...]
    outputs: np.ndarray  # int64 (len(classes),)
    num_outputs: int
    mapped_by: str  # how the map was made, as the report states it
    by: str  # BY_NAME, BY_INDEX, BY_CLASS_MAP or BY_POSITION: the rule, as the report's data.class_matching says

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
    text = read_small_text(path, MAX_CLASS_MAP_BYTES, option="--class-map", holds="a class map")
    suffix = path.suffix.lower()
    if suffix == ".json":
        data = json_value(text, path, option="--class-map")
        if not isinstance(data, dict):
            raise UsageError(f"--class-map {path}: expected a JSON object of class -> index")
        pairs = list(data.items())
    elif suffix == ".csv":
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
        if isinstance(index, str) and OUTPUT_INDEX.fullmatch(index):
            index = int(index)
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < MAX_CLASSES:
            raise UsageError(
                f"--class-map {path}: class {name!r} maps to {str(index)[:30]!r}, not an output index "
                f"(0 to {MAX_CLASSES - 1:,})"
            )
        mapping[str(name)] = index
    if not mapping:
        raise UsageError(f"--class-map {path}: maps no class")
    return mapping


def _from_map(
    classes: list[str], mapping: dict[str, int], num_outputs: int, mapped_by: str, by: str, hint: str = ""
) -> LabelSpace:
    missing = [c for c in classes if c not in mapping]
    if missing:
        verb = "does" if len(missing) == 1 else "do"
        raise InputError(f"{mapped_by}: {len(missing)} of the data's classes {verb} not map: {_listing(missing)}{hint}")
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
    return LabelSpace(tuple(classes), outputs, num_outputs, mapped_by, by)


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
            return _from_map(classes, indices, num_outputs, f"{name}'s classes (timm's {index_file})", BY_NAME)
    return _from_map(
        classes,
        {s: i for i, s in enumerate(synsets)},
        num_outputs,
        "WordNet ids (timm's imagenet_synsets.txt)",
        BY_NAME,
    )


def model_names(model_classes: list[str] | None, num_outputs: int) -> list[str] | None:
    """The model's class names where they name its outputs: None for none, for a list of another length than the
    outputs, and for names that are the output numbers themselves ("0".."K-1", what a model fine-tuned on
    shards without classes.txt carries), which say nothing a position does not."""
    if not model_classes or len(model_classes) != num_outputs:
        return None
    if all(name == str(i) for i, name in enumerate(model_classes)):
        return None
    return list(model_classes)


def _by_model_names(classes: list[str], names: list[str], num_outputs: int) -> LabelSpace:
    """The data's classes by the model's names (every one of them among the names, each name once)."""
    mapped_by = "the model's class names"
    if list(classes) == names:
        return LabelSpace(tuple(classes), np.arange(num_outputs, dtype=np.int64), num_outputs, mapped_by, BY_NAME)
    twice = sorted({c for c in classes if names.count(c) > 1})
    if twice:
        raise InputError(
            f"{mapped_by} name {_listing(twice)} more than once, so the data's classes of that name match no one "
            "output; pass --class-map FILE (data class -> output index)"
        )
    index = {name: i for i, name in enumerate(names)}
    return _from_map(
        classes, index, num_outputs, mapped_by, BY_NAME, "; pass --class-map FILE (data class -> output index)"
    )


def label_space(
    classes: list[str],
    num_outputs: int,
    *,
    model_classes: list[str] | None = None,
    class_map: dict[str, int] | None = None,
    class_map_name: str = "--class-map",
    named: bool = True,
) -> LabelSpace:
    """The map of `classes` (the data's, in label order) to a model's `num_outputs` outputs (module docstring).
    `named` False: the data's class names are placeholders (an .npz without names), so only a position maps."""
    by_map = f"class map {class_map_name}"
    if class_map is not None and classes and all(c in class_map for c in classes):
        return _from_map(classes, class_map, num_outputs, by_map, BY_CLASS_MAP)
    try:
        return _by_other_rules(classes, num_outputs, model_classes, named)
    except InputError:
        if class_map is not None and any(c in class_map for c in classes):
            # The map meant this set (it names some of its classes) and nothing else matches it: say what it lacks.
            _from_map(classes, class_map, num_outputs, by_map, BY_CLASS_MAP)
        raise


def _by_other_rules(classes: list[str], num_outputs: int, model_classes: list[str] | None, named: bool) -> LabelSpace:
    """Rules 2 to 5 of the module docstring (`label_space` without a class map)."""
    names = model_names(model_classes, num_outputs)
    if named:
        if names and any(c in names for c in classes):
            return _by_model_names(classes, names, num_outputs)
        if classes and all(WORDNET_ID.fullmatch(c) for c in classes):
            return _by_wordnet_ids(classes, num_outputs)
        if classes and all(OUTPUT_INDEX.fullmatch(c) for c in classes):  # ImageNetV2's folders, shards' labels
            numbered = {c: int(c) for c in classes}
            return _from_map(classes, numbered, num_outputs, "class names as output indices", BY_INDEX)
        if names:  # both sides name their classes, and no name is shared: never by position
            raise InputError(
                f"the data's classes ({_listing(classes)}) are none of the model's class names ({_listing(names)}); "
                "pass --class-map FILE (data class -> output index)"
            )
    if len(classes) == num_outputs:
        return LabelSpace(tuple(classes), np.arange(num_outputs, dtype=np.int64), num_outputs, "position", BY_POSITION)
    if not named:
        raise InputError(
            f"the data names none of its {len(classes)} classes and the model has {num_outputs} outputs, so they "
            "match by no name or position; store the class names in the file (class_names) or pass --class-map FILE"
        )
    raise InputError(  # the model names no classes (a named model's names matched, or raised, above)
        f"cannot map the data's {len(classes)} classes ({_listing(classes)}) to the model's {num_outputs} outputs, "
        f"which it does not name: name the data's classes by output index (0 to {num_outputs - 1}) or WordNet id, "
        "or pass --class-map FILE (data class -> output index)"
    )


def load_mapped_sets(
    named: list[tuple[str, Path]],
    num_outputs: int,
    config: ModelConfig,
    class_map: dict[str, int] | None = None,
    class_map_name: str = "--class-map",
) -> tuple[MappedSource, ...]:
    """Each (name, folder or shard pattern) read as an ImageFolder or WebDataset shards with the model's
    preprocessing (`config`'s, once: its input size, crop_pct, interpolation and crop_offset, as for --data) and
    its classes mapped to the model's `num_outputs` outputs (`label_space`, by the class names `config` has, with
    `class_map`, read from the file `class_map_name` by read_class_map); the map's errors name the set."""
    from macs_audit.data.loading import DataSpec, load_model_data

    found = []
    for name, path in named:
        source, _ = load_model_data(DataSpec(Path(path)), config)
        if source.format not in ("imagefolder", "shards"):
            raise UsageError(f"--shift-data {name}: {path} is no image folder or shard set ({source.format})")
        try:
            space = label_space(
                source.class_names,
                num_outputs,
                model_classes=config.class_names,
                class_map=class_map,
                class_map_name=class_map_name,
            )
        except InputError as exc:
            raise InputError(f"--shift-data {name}: {exc}") from None
        found.append(MappedSource(name, source, space))
    return tuple(found)


def check_class_map_used(
    mapping: dict[str, int],
    name: str,
    source: Source,
    data_space: Callable[[], LabelSpace],
    shift_sets: tuple[MappedSource, ...] = (),
) -> None:
    """UsageError where the class map names no class of the data (`source`, --data) nor of any shift set, and
    then (`data_space()` matching --data, whose own errors come first) where it maps none of them: a map
    applies to a set only where it names every one of its classes (`label_space`), so one that does so for no
    set would go unused in silence."""
    sets = [("--data", list(source.class_names))]
    sets += [(f"--shift-data {mapped.name}", list(mapped.source.class_names)) for mapped in shift_sets]
    partly = [(label, classes) for label, classes in sets if any(c in mapping for c in classes)]
    if not partly:
        raise UsageError(
            f"--class-map {name} names none of the classes of --data ({_listing(sets[0][1])})"
            + (" or of the --shift-data sets" if shift_sets else "")
        )
    if BY_CLASS_MAP in (*(mapped.space.by for mapped in shift_sets), data_space().by):
        return
    label, classes = partly[0]
    missing = [c for c in classes if c not in mapping]
    raise UsageError(
        f"--class-map {name} names every class of no set, so it maps none (a map applies to a set where it names "
        f"all of its classes): {label}'s {_listing(missing)} are not in it"
    )
