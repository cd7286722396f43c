"""Hugging Face transformers image classifiers in a `save_pretrained` folder: config.json (model_type,
id2label), model.safetensors or pytorch_model.bin, and preprocessor_config.json (the image processor's
size, crop, resample, mean, std, rescale), read by AutoModelForImageClassification from the folder alone
(local_files_only) and never with trust_remote_code: a model whose code is not in transformers is refused.

The image processor's settings are read from its JSON here (not by running it), as the model's own
preprocessing: flags and a sidecar still win over them. The model's forward returns an output object; the
predictor sees `Logits(model)`, whose forward returns the logits tensor alone (also what ONNX export traces).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from macs_audit.errors import InputError
from macs_audit.models import config as model_config
from macs_audit.models.preprocessing import PIL_RESAMPLE
from macs_audit.models.sources import HF_TRANSFORMERS, read_folder_config, read_json_object, require, weights_file

PROCESSOR_FILE = "preprocessor_config.json"
UNIT_RESCALE = 1 / 255


def processor_preprocessing(folder: Path) -> dict[str, Any]:
    """The ModelConfig keys `folder`'s preprocessor_config.json declares ({} without one): input_size from
    size (height/width: resized whole; shortest_edge with crop_pct, or with crop_size and do_center_crop: the
    shorter side and a centre crop), interpolation from resample, mean/std from image_mean/image_std
    (0 and 1 when do_normalize is false). A rescale other than 1/255 is refused rather than guessed."""
    path = folder / PROCESSOR_FILE
    if not path.is_file():
        return {}
    spec = read_json_object(path)
    out: dict[str, Any] = {}
    if spec.get("do_rescale", True) and abs(float(spec.get("rescale_factor", UNIT_RESCALE)) - UNIT_RESCALE) > 1e-9:
        raise InputError(f"{path}: rescale_factor {spec['rescale_factor']} (only 1/255 is supported)")
    if not spec.get("do_rescale", True):
        raise InputError(f"{path}: do_rescale false (pixels in 0-255) is not supported")
    size, crop = spec.get("size"), spec.get("crop_size")
    if isinstance(size, int):
        size = {"shortest_edge": size}
    if spec.get("do_resize", True) and isinstance(size, dict):
        if "height" in size and "width" in size:
            out["input_size"] = [size["height"], size["width"]]
        elif "shortest_edge" in size:
            short = int(size["shortest_edge"])
            if spec.get("crop_pct") is not None:  # ConvNeXt's processor: shorter side short / crop_pct, crop short
                out["input_size"], out["crop_pct"] = [short, short], spec["crop_pct"]
            elif spec.get("do_center_crop") and isinstance(crop, dict) and "height" in crop:
                out["input_size"] = [crop["height"], crop["width"]]
                out["crop_pct"] = min(crop["height"], crop["width"]) / short
            else:
                raise InputError(f"{path}: a shortest_edge resize without a centre crop gives images of many sizes")
    resample = spec.get("resample")
    if resample is not None:
        if resample not in PIL_RESAMPLE:
            raise InputError(f"{path}: resample {resample} is not one macs-audit resizes with (0, 2 or 3)")
        out["interpolation"] = PIL_RESAMPLE[resample]
    if spec.get("do_normalize", True):
        for ours, theirs in (("mean", "image_mean"), ("std", "image_std")):
            if spec.get(theirs) is not None:
                out[ours] = spec[theirs]
    else:
        out["mean"], out["std"] = [0.0, 0.0, 0.0], [1.0, 1.0, 1.0]
    return out


def class_names(id2label: Any, num_labels: int) -> list[str] | None:
    """The config's id2label in label order, unless it is transformers' placeholder (LABEL_0, LABEL_1, ...)."""
    if not isinstance(id2label, dict) or len(id2label) != num_labels:
        return None
    try:
        names = [str(id2label.get(i, id2label.get(str(i)))) for i in range(num_labels)]
    except (TypeError, ValueError):
        return None
    if all(re.fullmatch(rf"LABEL_{i}", n) for i, n in enumerate(names)):
        return None
    return names


def logits_module(model: Any) -> Any:
    """`model` (a transformers image classifier) as a module whose forward returns the logits tensor alone."""
    import torch

    class Logits(torch.nn.Module):
        def __init__(self, inner: torch.nn.Module):
            super().__init__()
            self.inner = inner

        def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
            return self.inner(pixel_values=pixel_values).logits

    return Logits(model)


def load_hf_folder(
    folder: Path, flags: dict[str, Any], sidecar: dict[str, Any], device: str, precision: str, debug: bool
) -> Any:
    """A TorchPredictor of the transformers image classifier saved in `folder`."""
    from macs_audit.models.backend import library_warnings, one_line
    from macs_audit.models.torch import TorchPredictor

    weights = weights_file(folder)
    config = read_folder_config(folder)
    if config.get("auto_map"):
        raise InputError(
            f"{folder} needs its own Python code (config.json's auto_map), which macs-audit never runs "
            "(no trust_remote_code): export the model to ONNX or torch.export (.pt2) instead"
        )
    meta = processor_preprocessing(folder)
    num_labels = int(config.get("num_labels") or len(config.get("id2label") or {}) or 2)
    meta["num_classes"] = num_labels
    names = class_names(config.get("id2label"), num_labels)
    if names:
        meta["class_names"] = names
    meta["crop_offset"] = "floor"  # transformers' center_crop floors an odd margin's half (torchvision rounds it)
    cfg = model_config.resolve(flags, sidecar, meta, metadata_origin=PROCESSOR_FILE)
    for key in ("num_classes", "class_names"):  # read from config.json, not the processor's file
        if cfg.sources.get(key) == PROCESSOR_FILE:
            cfg.sources[key] = "config.json"
    if cfg.num_classes != num_labels:
        raise InputError(f"--num-classes {cfg.num_classes} does not match the {num_labels} labels of {folder}")
    transformers = require("transformers", "hf")  # after the folder's own checks, which need no transformers
    if not debug:  # transformers' own progress bars and notes while loading
        transformers.logging.set_verbosity_error()
        transformers.logging.disable_progress_bar()
    with library_warnings(debug):
        try:
            model = transformers.AutoModelForImageClassification.from_pretrained(
                str(folder), local_files_only=True, trust_remote_code=False
            )
        except Exception as exc:  # an unknown model_type, a config of another task, weights that do not fit
            raise InputError(f"cannot load the Hugging Face model in {folder}: {one_line(exc)}") from None
    wrapped = logits_module(model)
    wrapped.source_folder = str(folder)  # the image processor's JSON a written copy takes along
    return TorchPredictor.of_module(wrapped, cfg, folder, HF_TRANSFORMERS, device, precision, hashed=weights)


def save_pretrained(model: Any, folder: Path) -> None:
    """Write a `Logits` module's transformers model (fine-tuned, or with a calibration folded in) back as a
    save_pretrained folder, with the image processor's JSON of the folder it was read from. Written beside and
    renamed into place, so a failure leaves no half folder; an existing folder is replaced (the callers check
    their outputs first)."""
    import shutil
    import tempfile

    inner = getattr(model, "inner", model)
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
    try:
        inner.save_pretrained(str(staging))
        source = getattr(model, "source_folder", None)
        if source is not None and (Path(source) / PROCESSOR_FILE).is_file():
            shutil.copyfile(Path(source) / PROCESSOR_FILE, staging / PROCESSOR_FILE)
        if folder.exists():
            shutil.rmtree(folder)
        staging.rename(folder)
    finally:
        if staging.exists():
            shutil.rmtree(staging)
