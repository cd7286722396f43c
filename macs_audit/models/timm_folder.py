"""timm hub-format folders, as timm's own `save_for_hf` writes them (and `hf-hub:` repositories in the local
cache): config.json with `architecture`, `num_classes`, `label_names`, `model_args` and `pretrained_cfg`
(input_size, mean, std, crop_pct, interpolation), beside model.safetensors or pytorch_model.bin (read
weights_only). The pretrained_cfg is the model's own preprocessing and model_args its architecture's arguments
(ModelConfig.model_args, which a written model's sidecar carries on): flags and a sidecar still win over them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from macs_audit.errors import InputError
from macs_audit.models import config as model_config
from macs_audit.models.sources import TIMM_FOLDER, LoadSettings, read_folder_config, weights_file

CONFIG_ORIGIN = "config.json"  # where the report says the folder's values came from
TIMM_INTERPOLATIONS = {"bilinear": "bilinear", "bicubic": "bicubic", "nearest": "nearest"}


def pretrained_preprocessing(pretrained_cfg: dict[str, Any], where: Path) -> dict[str, Any]:
    """The ModelConfig keys a timm pretrained_cfg declares (input_size (C, H, W), mean, std, crop_pct,
    interpolation), each checked as it is read (a value of the wrong type is a UsageError naming
    pretrained_cfg.KEY and `where`); a crop_mode other than center is refused rather than evaluated another way."""
    origin = str(where)
    out: dict[str, Any] = {}
    if pretrained_cfg.get("input_size") is not None:
        size = pretrained_cfg["input_size"]
        out["input_size"] = list(model_config.image_size("pretrained_cfg.input_size", size, origin, channels=True))
    for key in ("mean", "std"):
        if pretrained_cfg.get(key) is not None:
            out[key] = list(model_config.channel_values(f"pretrained_cfg.{key}", pretrained_cfg[key], origin))
    if pretrained_cfg.get("crop_pct") is not None:
        out["crop_pct"] = model_config.crop_fraction("pretrained_cfg.crop_pct", pretrained_cfg["crop_pct"], origin)
    interpolation = pretrained_cfg.get("interpolation")
    if interpolation is not None:
        if not isinstance(interpolation, str):
            expected = f"one of {', '.join(TIMM_INTERPOLATIONS)}"
            raise model_config.config_error("pretrained_cfg.interpolation", interpolation, expected, origin)
        if interpolation not in TIMM_INTERPOLATIONS:
            raise InputError(f"{where}: interpolation {interpolation!r} is not one macs-audit resizes with")
        out["interpolation"] = TIMM_INTERPOLATIONS[interpolation]
    crop_mode = pretrained_cfg.get("crop_mode", "center")
    if not isinstance(crop_mode, str):
        raise model_config.config_error("pretrained_cfg.crop_mode", crop_mode, "a string ('center')", origin)
    if crop_mode != "center" and out.get("crop_pct") not in (None, 1.0):
        raise InputError(f"{where}: crop_mode {crop_mode!r} is not supported (only centre crops)")
    return out


def folder_metadata(config: dict[str, Any], where: Path) -> dict[str, Any]:
    """A timm folder's config.json as ModelConfig keys, each checked as it is read."""
    pretrained_cfg = config.get("pretrained_cfg") or {}
    if not isinstance(pretrained_cfg, dict):
        raise InputError(f"{where}: pretrained_cfg must be a JSON object")
    meta = pretrained_preprocessing(pretrained_cfg, where)
    meta["arch"] = config["architecture"]
    key = "num_classes" if config.get("num_classes") is not None else "pretrained_cfg.num_classes"
    num_classes = config.get("num_classes") if key == "num_classes" else pretrained_cfg.get("num_classes")
    if num_classes is not None:  # bounded here, before the architecture's classifier is built
        meta["num_classes"] = model_config.class_count(key, num_classes, str(where))
    model_args = config.get("model_args")
    if model_args:  # as timm's own loader builds the folder's model; the class count is num_classes'
        if not isinstance(model_args, dict):
            raise InputError(f"{where}: model_args must be a JSON object")
        meta["model_args"] = {k: v for k, v in model_args.items() if k not in ("num_classes", "pretrained_cfg")}
    labels = config.get("label_names")
    if labels is not None:
        meta["class_names"] = model_config.class_names("label_names", labels, str(where), meta.get("num_classes"))
    return meta


def load_timm_folder(folder: Path, settings: LoadSettings, weights: Path | None = None) -> Any:
    """A TorchPredictor of the timm folder `folder` (its weights, or `weights`: a state dict file given with
    --arch hf-hub:ORG/NAME, whose config then comes from the cached folder)."""
    from macs_audit.models.backend import library_warnings
    from macs_audit.models.torch import TorchPredictor, build_timm_model, read_state_dict

    config = read_folder_config(folder)
    meta = folder_metadata(config, folder / "config.json")
    shown = weights or folder  # what the report's model.path names
    weights = weights or weights_file(folder)
    if weights.name.endswith(".index.json"):
        raise InputError(f"{weights}: sharded timm weights are not supported; save them as one file")
    flags = {k: v for k, v in settings.flags.items() if k != "arch"}  # --arch hf-hub:... named the folder
    cfg = model_config.resolve(flags, settings.sidecar, meta, CONFIG_ORIGIN, folder / CONFIG_ORIGIN)
    if cfg.num_classes is None:
        raise InputError(f"{folder / 'config.json'} does not say num_classes")
    declared = meta.get("num_classes")
    if declared is not None and cfg.num_classes != declared:
        raise InputError(
            f"--num-classes {cfg.num_classes} does not match the {declared} classes of {folder / 'config.json'}"
        )
    with library_warnings(settings.debug):
        state = read_state_dict(weights)
        model, stripped = build_timm_model(str(cfg.arch), cfg.num_classes, state, **(cfg.model_args or {}))
    predictor = TorchPredictor.of_module(
        model, cfg, shown, TIMM_FOLDER, settings.device, settings.precision, hashed=weights
    )
    if stripped:
        predictor.info["checkpoint_prefix_stripped"] = stripped
    return predictor
