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
from macs_audit.models.sources import TIMM_FOLDER, read_folder_config, weights_file

CONFIG_ORIGIN = "config.json"  # where the report says the folder's values came from
TIMM_INTERPOLATIONS = {"bilinear": "bilinear", "bicubic": "bicubic", "nearest": "nearest"}


def pretrained_preprocessing(pretrained_cfg: dict[str, Any], where: Path) -> dict[str, Any]:
    """The ModelConfig keys a timm pretrained_cfg declares (input_size (C, H, W), mean, std, crop_pct,
    interpolation); a crop_mode other than center is refused rather than evaluated another way."""
    out: dict[str, Any] = {}
    size = pretrained_cfg.get("input_size")
    if isinstance(size, list) and len(size) == 3:
        out["input_size"] = size[1:]
    for key in ("mean", "std", "crop_pct"):
        if pretrained_cfg.get(key) is not None:
            out[key] = pretrained_cfg[key]
    interpolation = pretrained_cfg.get("interpolation")
    if interpolation is not None:
        if interpolation not in TIMM_INTERPOLATIONS:
            raise InputError(f"{where}: interpolation {interpolation!r} is not one macs-audit resizes with")
        out["interpolation"] = TIMM_INTERPOLATIONS[interpolation]
    crop_mode = pretrained_cfg.get("crop_mode", "center")
    if crop_mode != "center" and out.get("crop_pct") not in (None, 1.0):
        raise InputError(f"{where}: crop_mode {crop_mode!r} is not supported (only centre crops)")
    return out


def folder_metadata(config: dict[str, Any], where: Path) -> dict[str, Any]:
    """A timm folder's config.json as ModelConfig keys."""
    pretrained_cfg = config.get("pretrained_cfg") or {}
    if not isinstance(pretrained_cfg, dict):
        raise InputError(f"{where}: pretrained_cfg must be a JSON object")
    meta = pretrained_preprocessing(pretrained_cfg, where)
    meta["arch"] = config["architecture"]
    num_classes = config.get("num_classes", pretrained_cfg.get("num_classes"))
    if num_classes is not None:
        meta["num_classes"] = num_classes
    model_args = config.get("model_args")
    if model_args:  # as timm's own loader builds the folder's model; the class count is num_classes'
        if not isinstance(model_args, dict):
            raise InputError(f"{where}: model_args must be a JSON object")
        meta["model_args"] = {k: v for k, v in model_args.items() if k not in ("num_classes", "pretrained_cfg")}
    labels = config.get("label_names")
    if isinstance(labels, list) and labels and all(isinstance(v, str) for v in labels):
        meta["class_names"] = labels
    return meta


def load_timm_folder(
    folder: Path,
    flags: dict[str, Any],
    sidecar: dict[str, Any],
    device: str,
    precision: str,
    debug: bool,
    weights: Path | None = None,
) -> Any:
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
    flags = {k: v for k, v in flags.items() if k != "arch"}  # --arch hf-hub:... named the folder, not a timm name
    cfg = model_config.resolve(flags, sidecar, meta, metadata_origin=CONFIG_ORIGIN)
    if cfg.num_classes is None:
        raise InputError(f"{folder / 'config.json'} does not say num_classes")
    declared = meta.get("num_classes")
    if declared is not None and cfg.num_classes != declared:
        raise InputError(
            f"--num-classes {cfg.num_classes} does not match the {declared} classes of {folder / 'config.json'}"
        )
    with library_warnings(debug):
        state = read_state_dict(weights)
        model, stripped = build_timm_model(str(cfg.arch), cfg.num_classes, state, **(cfg.model_args or {}))
    predictor = TorchPredictor.of_module(model, cfg, shown, TIMM_FOLDER, device, precision, hashed=weights)
    if stripped:
        predictor.info["checkpoint_prefix_stripped"] = stripped
    return predictor
