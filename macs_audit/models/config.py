"""Model configuration: preprocessing, class count and architecture, from flags, sidecar or metadata.

Precedence (first that sets a key wins): command-line flags, the sidecar JSON next to the model
(`model.onnx` -> `model.json`), the model's own description (ONNX metadata properties `macs_audit.<key>`
with JSON values; a Hugging Face folder's preprocessor_config.json; a timm folder's or architecture's
pretrained_cfg; an OpenCLIP model's preprocessing), then CIFAR-10 defaults. `ModelConfig.sources` records
where each key came from, and the CIFAR-10 default warns unless the model is known to fit it.
"""

import dataclasses
import json
import math
import numbers
import reprlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from macs_audit.errors import InputError, UsageError
from macs_audit.files import file_error, read_small_json
from macs_audit.models.preprocessing import CROP_OFFSETS, INTERPOLATIONS
from macs_audit.models.sources import MAX_JSON_BYTES, MODEL_JSON

CIFAR10_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR10_STD = (0.2470, 0.2435, 0.2616)
OUTPUT_KINDS = ("auto", "logits", "probabilities")
PRECISIONS = ("fp32", "bf16", "fp16")  # torch models: fp32, or CUDA autocast to bf16 / fp16 (--precision)
METADATA_PREFIX = "macs_audit."
# What model_args may not set: the class count is its own key, pretrained weights are never fetched.
RESERVED_MODEL_ARGS = ("num_classes", "pretrained", "pretrained_cfg", "pretrained_cfg_overlay", "checkpoint_path")
# The largest side a model input may have, in pixels. Every batch is resized to the input size before the
# model runs, so the size decides the memory of each batch: at 4096x4096 one float32 RGB image is 192 MiB,
# a batch of 500 of them 94 GiB. Image classifiers take 32 to about 1000 pixels a side; a size far beyond
# (a typo, a hostile metadata entry) fails here, before anything is allocated.
MAX_INPUT_SIDE = 4096
# The most classes a model (or a data set: a label is below it) may have. The class count sizes the model's last
# layer and every (images, classes) array, so a hostile count (10**12) would be an allocation of terabytes;
# the largest classifiers have tens of thousands (ImageNet-21k: 21,841), and a larger label is an id or a hash.
MAX_CLASSES = 1_000_000
# Keys a sidecar / metadata may set, with what they mean (documented in the README).
KEYS = {
    "arch": "timm architecture name for a state dict / safetensors checkpoint",
    "model_args": (
        "keyword arguments the timm architecture is built with (a timm folder's model_args, e.g. "
        '{"stem_type": "deep"}), so a written model reloads as the architecture it was trained as'
    ),
    "num_classes": "number of output classes",
    "input_size": "[height, width] the model expects; images are resized to it",
    "mean": "per-channel mean subtracted after scaling pixels to [0,1]",
    "std": "per-channel std divided by after subtracting the mean",
    "output": "'logits', 'probabilities', or 'auto' (detect softmax outputs)",
    "crop_pct": (
        "the fraction of the resized image the centre crop keeps (timm's crop_pct, e.g. 0.875): image-folder "
        "images are resized so their shorter side is input_size / crop_pct, then centre-cropped to input_size; "
        "absent, they are resized to input_size whole"
    ),
    "class_names": "class names, in label order",
    "crop_offset": (
        "how a crop_pct pipeline's centre crop places an odd margin: 'round' (torchvision's CenterCrop, timm, "
        "OpenCLIP) or 'floor' (transformers' image processors, which a Hugging Face folder declares); written by "
        "export so that the ONNX model crops as its source did"
    ),
    "interpolation": (
        f"how images are resized to the input size: {', '.join(INTERPOLATIONS)} (bilinear and bicubic antialiased "
        "as Pillow resizes, -no-antialias as torch resizes tensors by default); absent, bilinear for whole images "
        "and bicubic for a crop_pct pipeline"
    ),
}


@dataclasses.dataclass
class ModelConfig:
    arch: str | None = None
    model_args: dict[str, Any] | None = None
    num_classes: int | None = None
    input_size: tuple[int, int] = (32, 32)
    mean: tuple[float, ...] = CIFAR10_MEAN
    std: tuple[float, ...] = CIFAR10_STD
    output: str = "auto"
    class_names: list[str] | None = None
    crop_pct: float | None = None
    interpolation: str | None = None
    sources: dict[str, str] = dataclasses.field(default_factory=dict)  # key -> where it came from
    # The model's own description says it is a CIFAR-10 classifier at 32x32 (a 10-output ONNX graph with a static
    # 32x32 input, one of the project's CIFAR architectures): CIFAR-10's mean/std then go without a warning.
    fits_cifar10: bool = False
    # How the centre crop of a crop_pct pipeline rounds an odd margin (models/preprocessing.CROP_OFFSETS): declared
    # by a source whose library crops otherwise (a Hugging Face folder: transformers' "floor"), then carried on.
    crop_offset: str = "round"

    def as_metadata(self, declared_only: bool = False) -> dict[str, Any]:
        """The keys a sidecar or ONNX metadata would carry. `declared_only`: only the keys someone set (a flag,
        the sidecar, the model's own description), so that a written model never presents a default as declared."""
        meta = {k: getattr(self, k) for k in KEYS}
        meta["input_size"] = list(self.input_size)
        meta["mean"], meta["std"] = list(self.mean), list(self.std)
        if declared_only:
            meta = {k: v for k, v in meta.items() if k in self.sources or k in ("num_classes", "class_names")}
        return {k: v for k, v in meta.items() if v is not None}

    def declared_sources(self) -> dict[str, str]:
        """Where each key `as_metadata(declared_only=True)` writes was set (a written model's record of them)."""
        return {k: v for k, v in self.sources.items() if k in KEYS}

    def default_normalisation(self) -> list[str]:
        """Which of mean and std were set by nobody (flag, sidecar or metadata): CIFAR-10's built-in values."""
        return [key for key in ("mean", "std") if key not in self.sources]

    def known_to_fit_cifar10(self) -> bool:
        """Whether CIFAR-10's built-in mean/std are taken to fit the model: its own description says it is a
        10-class CIFAR-10 classifier at 32x32 (`fits_cifar10`), and nothing set another class count or size."""
        other_classes = self.num_classes is not None and self.num_classes != 10
        return self.fits_cifar10 and not other_classes and tuple(self.input_size) == (32, 32)

    def normalisation_warning(self) -> str | None:
        """Why CIFAR-10's built-in mean/std are likely wrong for this model, or None.

        The default fits a 10-class model on 32x32 images; any other model was most likely trained
        with other values (ImageNet's, CIFAR-100's), and normalising with the wrong ones costs accuracy
        silently."""
        defaulted = self.default_normalisation()
        other_classes = self.num_classes is not None and self.num_classes != 10
        other_size = tuple(self.input_size) != (32, 32)
        if not defaulted or self.known_to_fit_cifar10():
            return None
        size = f"{self.input_size[0]}x{self.input_size[1]} input"
        if other_classes:
            model = f"a {self.num_classes}-class model" + (f" with {size}" if other_size else "")
        elif other_size:
            model = f"a model with {size}"
        else:  # 10 classes at 32x32 by its shape, but nothing the model carries says CIFAR-10 (#27)
            model = "a model not known to be a CIFAR-10 classifier (its own configuration does not say so)"
        builtin = {"mean": CIFAR10_MEAN, "std": CIFAR10_STD}
        return (
            f"no {' or '.join(f'--{key}' for key in defaulted)} given: normalising with CIFAR-10's "
            f"{' and '.join(f'{key} {format_values(builtin[key])}' for key in defaulted)} for {model}; "
            "pass --mean and --std (or put them in a sidecar JSON) with the values the model was trained with"
        )


def format_values(values: tuple[float, ...] | list[float]) -> str:
    """Per-channel values as the --mean/--std options take them: '0.4914,0.4822,0.4465'."""
    return ",".join(f"{float(v):g}" for v in values)


def sidecar_path(model_path: str | Path) -> Path:
    return Path(model_path).with_suffix(".json")


def _json(text: str) -> Any:
    """json.loads, with nesting too deep for Python's parser (a hostile file of 100,000 brackets) a ValueError."""
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("nested too deeply to be model settings (one JSON object of keys)") from None


def read_sidecar(model_path: str | Path) -> dict[str, Any]:
    path = sidecar_path(model_path)
    if not path.is_file():
        return {}
    return read_settings(path)


def read_settings(path: Path, option: str = "") -> dict[str, Any]:
    """The KEYS a sidecar-shaped JSON file sets (other keys, such as a written model's `training`, ignored):
    the sidecar next to the model, or the file `option` names ("--reference-config"; its faults are usage
    errors, macs_audit.files)."""
    data = read_small_json(path, MAX_JSON_BYTES, option=option, what="sidecar", holds=MODEL_JSON)
    if not isinstance(data, dict):
        raise file_error(option)(f"{option or 'sidecar'} {path} must hold a JSON object")
    return {k: v for k, v in data.items() if k in KEYS}


def read_reference_config(path: Path) -> dict[str, Any]:
    """The settings `evaluate --reference-config FILE` gives the reference model: a sidecar JSON, checked as
    one (a bad value names the key and --reference-config), the values normalised as the config holds them."""
    settings = read_settings(path, REFERENCE_CONFIG)
    if not settings:
        raise UsageError(
            f"{REFERENCE_CONFIG} {path} sets no model setting: give the reference's as a sidecar does "
            '(e.g. {"mean": [...], "std": [...]})'
        )
    cfg = resolve({}, {}, settings, metadata_origin=REFERENCE_CONFIG)
    return {key: getattr(cfg, key) for key in settings}


def parse_metadata(props: dict[str, str]) -> dict[str, Any]:
    """Decode `macs_audit.<key>` ONNX metadata properties (JSON-encoded values)."""
    out = {}
    for name, raw in props.items():
        if name.startswith(METADATA_PREFIX) and name[len(METADATA_PREFIX) :] in KEYS:
            try:
                out[name[len(METADATA_PREFIX) :]] = _json(raw)
            except ValueError:
                raise InputError(f"ONNX metadata property {name} is not valid JSON: {raw[:60]!r}") from None
    return out


def encode_metadata(meta: dict[str, Any]) -> dict[str, str]:
    return {METADATA_PREFIX + k: json.dumps(v) for k, v in meta.items() if k in KEYS}


def resolve(
    flags: dict[str, Any],
    sidecar: dict[str, Any],
    metadata: dict[str, Any],
    metadata_origin: str = "metadata",
    metadata_file: Path | None = None,
) -> ModelConfig:
    """Merge the three layers into a validated ModelConfig. `metadata` is the model's own description, and
    `metadata_origin` where it was read ("metadata": ONNX properties; "preprocessor_config.json", ...);
    `metadata_file`, the file it was read from, is what a message about one of its values names."""
    cfg = ModelConfig()
    for origin, layer in (("default", {}), (metadata_origin, metadata), ("sidecar", sidecar), ("flag", flags)):
        for key, value in layer.items():
            if value is None or key not in KEYS:
                continue
            setattr(cfg, key, value)
            cfg.sources[key] = origin
    return _validate(cfg, {metadata_origin: str(metadata_file)} if metadata_file is not None else {})


REFERENCE_CONFIG = "--reference-config"  # evaluate's file of the reference model's settings (a sidecar JSON)
ORIGINS = {
    "flag": "--{key}",
    "sidecar": "the model's sidecar",
    "metadata": "the model's ONNX metadata",
    REFERENCE_CONFIG: REFERENCE_CONFIG,
}


def _origin(cfg: ModelConfig, key: str, files: dict[str, str]) -> str:
    """Where `key` of `cfg` was set, as a message names it: --input-size, the model's sidecar, a folder's
    config.json by its path (`files`: origin -> the file read), ..."""
    source = cfg.sources.get(key, "")
    if source in files:
        return files[source]
    if source and source not in ORIGINS:
        return f"the model's {source}"
    return ORIGINS.get(source, "the defaults").format(key=key.replace("_", "-"))


def _validate(cfg: ModelConfig, files: dict[str, str]) -> ModelConfig:
    """Check and normalise every key, one at a time: a bad value is a UsageError that names the key, the value
    and where it was set (a flag, the sidecar, the ONNX metadata or the model folder's file)."""

    def where(key: str) -> str:
        return _origin(cfg, key, files)

    _check_values(cfg, where)
    _check_choices(cfg, where)
    _check_architecture(cfg, where)
    return cfg


def _fail(cfg: ModelConfig, key: str, expected: str, where: Callable[[str], str]) -> UsageError:
    return config_error(key, getattr(cfg, key), expected, where(key))


def _check_values(cfg: ModelConfig, where: Callable[[str], str]) -> None:
    """The input size, mean and std, class count and names, and crop fraction, normalised in place."""
    cfg.input_size = image_size("input_size", cfg.input_size, where("input_size"))
    for key in ("mean", "std"):
        setattr(cfg, key, channel_values(key, getattr(cfg, key), where(key)))
    if len(cfg.mean) != len(cfg.std) or any(s <= 0 for s in cfg.std):
        raise UsageError("mean and std need one value per channel, and std must be positive")
    if cfg.num_classes is not None:
        cfg.num_classes = class_count("num_classes", cfg.num_classes, where("num_classes"))
    if cfg.class_names is not None:  # their count against the model's is the loader's to check, with its message
        cfg.class_names = class_names("class_names", cfg.class_names, where("class_names"), None)
    if cfg.crop_pct is not None:
        cfg.crop_pct = crop_fraction("crop_pct", cfg.crop_pct, where("crop_pct"))


def _check_choices(cfg: ModelConfig, where: Callable[[str], str]) -> None:
    """The interpolation, crop offset and output kind, each one of its known names."""
    if cfg.interpolation is not None and cfg.interpolation not in INTERPOLATIONS:
        raise _fail(cfg, "interpolation", f"one of {', '.join(INTERPOLATIONS)}", where)
    if cfg.crop_offset not in CROP_OFFSETS:
        raise _fail(cfg, "crop_offset", f"one of {', '.join(CROP_OFFSETS)}", where)
    if cfg.output not in OUTPUT_KINDS:
        raise UsageError(f"output must be one of {', '.join(OUTPUT_KINDS)}, got {shown(cfg.output)}")


def _check_architecture(cfg: ModelConfig, where: Callable[[str], str]) -> None:
    """model_args, a JSON object of keyword arguments without the reserved ones, and arch, a name."""
    if cfg.model_args is not None:
        if not isinstance(cfg.model_args, dict) or not all(isinstance(k, str) for k in cfg.model_args):
            raise _fail(cfg, "model_args", "a JSON object of the architecture's keyword arguments", where)
        reserved = sorted(set(cfg.model_args) & set(RESERVED_MODEL_ARGS))
        if reserved:
            raise _fail(cfg, "model_args", f"free of {', '.join(reserved)} (set num_classes as its own key)", where)
    if cfg.arch is not None and not isinstance(cfg.arch, str):
        origin = cfg.sources.get("arch", "flag")
        raise UsageError(
            f"arch must be a timm architecture name (a string), got {shown(cfg.arch)} from the model's {origin}"
        )


def check_input_size(size: tuple[int, int], origin: str) -> tuple[int, int]:
    """`size` (height, width), unless a side is larger than MAX_INPUT_SIDE: a UsageError naming `origin`."""
    if max(size) > MAX_INPUT_SIDE:
        raise UsageError(
            f"input_size {size[0]}x{size[1]} from {origin} is larger than {MAX_INPUT_SIDE}x{MAX_INPUT_SIDE}, "
            "the largest model input accepted; give the size the model was trained at"
        )
    return size


# The checks of one configuration value, wherever it is read (a flag, a sidecar, ONNX metadata, a model folder's
# config.json or preprocessor_config.json): each returns the value normalised, or raises the UsageError
# `config_error` words, which names the key as the file spells it and where it was read.

# A value as a message quotes it: a hostile one may be a list of millions, or nested a thousand deep.
_SHOWN = reprlib.Repr()
_SHOWN.maxstring, _SHOWN.maxother, _SHOWN.maxlong, _SHOWN.maxlevel = 40, 40, 40, 3


def shown(value: Any) -> str:
    """`value`'s repr, cut short: what a message quotes of a configuration value."""
    return _SHOWN.repr(value)


def config_error(key: str, value: Any, expected: str, origin: str) -> UsageError:
    """The one message for a configuration value that does not fit: '{key} must be {expected}, got {value}
    from {origin}'."""
    return UsageError(f"{key} must be {expected}, got {shown(value)} from {origin}")


def whole_number(key: str, value: Any, origin: str, low: int | None = None, high: int | None = None) -> int:
    """`value` as an int (JSON may carry 32 as 32.0 or "32"), from `low` to `high`."""
    number = _whole(value)
    if number is None:
        raise config_error(key, value, "a whole number", origin)
    if low is not None and number < low:
        raise UsageError(f"{key} must be at least {low}, got {shown(value)} from {origin}")
    if high is not None and number > high:
        raise UsageError(f"{key} must be at most {high:,}, got {shown(value)} from {origin}")
    return number


def class_count(key: str, value: Any, origin: str) -> int:
    """A model's number of classes: a whole number from 2 to MAX_CLASSES, checked before anything of that size
    (a classifier layer, an array of outputs) is allocated."""
    number = whole_number(key, value, origin, low=2)
    if number > MAX_CLASSES:
        raise UsageError(
            f"{key} must be at most {MAX_CLASSES:,} (the most classes a model may have), got {shown(value)} "
            f"from {origin}"
        )
    return number


def class_names(key: str, value: Any, origin: str, count: int | None) -> list[str]:
    """Class names in label order: a list of strings, one per class when the class count (`count`) is known."""
    one_each = f", one for each of the {count} classes" if count is not None else ""
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise config_error(key, value, f"a list of class names{one_each}", origin)
    if len(value) > MAX_CLASSES or (count is not None and len(value) != count):
        raise UsageError(f"{key} must be a list of class names{one_each}, got {len(value):,} names from {origin}")
    return list(value)


def finite_number(key: str, value: Any, origin: str) -> float:
    """`value` as a finite float (JSON accepts NaN and Infinity, which mean no setting)."""
    try:
        return _finite(value)
    except (TypeError, ValueError, OverflowError):
        raise config_error(key, value, "a finite number", origin) from None


def crop_fraction(key: str, value: Any, origin: str) -> float:
    """A centre crop's share of the resized image (timm's crop_pct): a number in (0, 1]."""
    try:
        number = _finite(value)
    except (TypeError, ValueError, OverflowError):
        raise config_error(key, value, "a number in (0, 1]", origin) from None
    if not 0 < number <= 1:
        raise config_error(key, value, "in (0, 1]", origin)
    return number


def channel_values(key: str, value: Any, origin: str) -> tuple[float, ...]:
    """Per-channel values (mean, std): a non-empty list of finite numbers."""
    try:
        if not isinstance(value, (list, tuple)) or not value:
            raise TypeError(value)
        return tuple(_finite(v) for v in value)
    except (TypeError, ValueError, OverflowError):
        raise config_error(key, value, "a list of finite numbers, one per channel", origin) from None


def image_size(key: str, value: Any, origin: str, channels: bool = False) -> tuple[int, int]:
    """(height, width) of `value`: [height, width] or one number (timm's [channels, height, width] where
    `channels`), each side a whole number from 1 to MAX_INPUT_SIDE."""
    sides: list[Any] = []
    if channels:
        if isinstance(value, (list, tuple)) and len(value) == 3 and _whole(value[0]) is not None:
            sides = list(value[1:])
    elif isinstance(value, (list, tuple)) and len(value) == 2:
        sides = list(value)
    elif _whole(value) is not None:
        sides = [value, value]
    whole = [_whole(v) for v in sides]
    if len(whole) != 2 or whole[0] is None or whole[1] is None:
        expected = "[channels, height, width]" if channels else "[height, width] (or one number)"
        raise config_error(key, value, f"{expected} in whole numbers" if channels else expected, origin)
    size = (whole[0], whole[1])
    if min(size) < 1:
        raise UsageError(f"{key} must be positive, got {list(size)} from {origin}")
    return check_input_size(size, origin)


def switch(key: str, value: Any, origin: str) -> bool:
    """A JSON true or false (null reads as false, as the library that wrote it reads it)."""
    if value is not None and not isinstance(value, bool):
        raise config_error(key, value, "true or false", origin)
    return bool(value)


def _whole(value: Any) -> int | None:
    """`value` as an int, for an integer or a float or string that is one (JSON and flags may carry 32 as 32.0 or
    "32"); None for anything else (a bool, a fraction, NaN, infinity, a list)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, numbers.Integral):
        return int(value)
    if not isinstance(value, (numbers.Real, str)):
        return None
    try:
        number = float(value)
    except (ValueError, OverflowError):
        return None
    return int(number) if math.isfinite(number) and number == int(number) else None


def _finite(value: Any) -> float:
    """float(value), for a number that is finite (JSON accepts NaN and Infinity); ValueError otherwise."""
    if isinstance(value, (bool, str, bytes)):
        raise TypeError(value)
    number = float(value)
    if not math.isfinite(number):
        raise ValueError(value)
    return number
