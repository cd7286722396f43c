"""Model configuration: preprocessing, class count and architecture, from flags, sidecar or metadata.

Precedence (first that sets a key wins): command-line flags, the sidecar JSON next to the model
(`model.onnx` -> `model.json`), ONNX metadata properties (`macs_audit.<key>`, JSON values),
then CIFAR-10 defaults.
"""

import dataclasses
import json
from pathlib import Path
from typing import Any

from macs_audit.errors import InputError, UsageError

CIFAR10_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR10_STD = (0.2470, 0.2435, 0.2616)
OUTPUT_KINDS = ("auto", "logits", "probabilities")
METADATA_PREFIX = "macs_audit."
# Keys a sidecar / metadata may set, with what they mean (documented in the README).
KEYS = {
    "arch": "timm architecture name for a state dict / safetensors checkpoint",
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
}


@dataclasses.dataclass
class ModelConfig:
    arch: str | None = None
    num_classes: int | None = None
    input_size: tuple[int, int] = (32, 32)
    mean: tuple[float, ...] = CIFAR10_MEAN
    std: tuple[float, ...] = CIFAR10_STD
    output: str = "auto"
    class_names: list[str] | None = None
    crop_pct: float | None = None
    sources: dict[str, str] = dataclasses.field(default_factory=dict)  # key -> where it came from

    def as_metadata(self) -> dict[str, Any]:
        """The keys a sidecar or ONNX metadata would carry."""
        meta = {k: getattr(self, k) for k in KEYS}
        meta["input_size"] = list(self.input_size)
        meta["mean"], meta["std"] = list(self.mean), list(self.std)
        return {k: v for k, v in meta.items() if v is not None}

    def default_normalisation(self) -> list[str]:
        """Which of mean and std were set by nobody (flag, sidecar or metadata): CIFAR-10's built-in values."""
        return [key for key in ("mean", "std") if key not in self.sources]

    def normalisation_warning(self) -> str | None:
        """Why CIFAR-10's built-in mean/std are likely wrong for this model, or None.

        The default fits a 10-class model on 32x32 images; any other model was most likely trained
        with other values (ImageNet's, CIFAR-100's), and normalising with the wrong ones costs accuracy
        silently."""
        defaulted = self.default_normalisation()
        other_classes = self.num_classes is not None and self.num_classes != 10
        other_size = tuple(self.input_size) != (32, 32)
        if not defaulted or not (other_classes or other_size):
            return None
        size = f"{self.input_size[0]}x{self.input_size[1]} input"
        if other_classes:
            model = f"a {self.num_classes}-class model" + (f" with {size}" if other_size else "")
        else:
            model = f"a model with {size}"
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


def read_sidecar(model_path: str | Path) -> dict[str, Any]:
    path = sidecar_path(model_path)
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise InputError(f"cannot read sidecar {path}: {exc}") from None
    if not isinstance(data, dict):
        raise InputError(f"sidecar {path} must hold a JSON object")
    return {k: v for k, v in data.items() if k in KEYS}


def parse_metadata(props: dict[str, str]) -> dict[str, Any]:
    """Decode `macs_audit.<key>` ONNX metadata properties (JSON-encoded values)."""
    out = {}
    for name, raw in props.items():
        if name.startswith(METADATA_PREFIX) and name[len(METADATA_PREFIX) :] in KEYS:
            try:
                out[name[len(METADATA_PREFIX) :]] = json.loads(raw)
            except ValueError:
                raise InputError(f"ONNX metadata property {name} is not valid JSON: {raw[:60]!r}") from None
    return out


def encode_metadata(meta: dict[str, Any]) -> dict[str, str]:
    return {METADATA_PREFIX + k: json.dumps(v) for k, v in meta.items() if k in KEYS}


def resolve(flags: dict[str, Any], sidecar: dict[str, Any], metadata: dict[str, Any]) -> ModelConfig:
    """Merge the three layers into a validated ModelConfig."""
    cfg = ModelConfig()
    for origin, layer in (("default", {}), ("metadata", metadata), ("sidecar", sidecar), ("flag", flags)):
        for key, value in layer.items():
            if value is None or key not in KEYS:
                continue
            setattr(cfg, key, value)
            cfg.sources[key] = origin
    return _validate(cfg)


def _validate(cfg: ModelConfig) -> ModelConfig:
    try:
        size = cfg.input_size
        if isinstance(size, int):
            size = (size, size)
        cfg.input_size = (int(size[0]), int(size[1]))
        cfg.mean = tuple(float(v) for v in cfg.mean)
        cfg.std = tuple(float(v) for v in cfg.std)
        cfg.num_classes = None if cfg.num_classes is None else int(cfg.num_classes)
        cfg.crop_pct = None if cfg.crop_pct is None else float(cfg.crop_pct)
    except (TypeError, ValueError, IndexError):
        raise UsageError("input_size must be [height, width]; mean and std lists of numbers") from None
    if cfg.crop_pct is not None and not 0 < cfg.crop_pct <= 1:
        raise UsageError(f"crop_pct must be in (0, 1], got {cfg.crop_pct}")
    if min(cfg.input_size) < 1:
        raise UsageError(f"input_size must be positive, got {list(cfg.input_size)}")
    if len(cfg.mean) != len(cfg.std) or any(s <= 0 for s in cfg.std):
        raise UsageError("mean and std need one value per channel, and std must be positive")
    if cfg.output not in OUTPUT_KINDS:
        raise UsageError(f"output must be one of {', '.join(OUTPUT_KINDS)}, got {cfg.output!r}")
    if cfg.num_classes is not None and cfg.num_classes < 2:
        raise UsageError(f"num_classes must be at least 2, got {cfg.num_classes}")
    if cfg.arch is not None and not isinstance(cfg.arch, str):
        origin = cfg.sources.get("arch", "flag")
        raise UsageError(
            f"arch must be a timm architecture name (a string), got {cfg.arch!r} from the model's {origin}"
        )
    return cfg
