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

from macs_audit.errors import InputError, UsageError
from macs_audit.models import config as model_config
from macs_audit.models.preprocessing import PIL_RESAMPLE
from macs_audit.models.sources import (
    HF_TRANSFORMERS,
    LoadSettings,
    read_folder_config,
    read_json_object,
    require,
    weights_file,
)

PROCESSOR_FILE = "preprocessor_config.json"
UNIT_RESCALE = 1 / 255


def processor_preprocessing(folder: Path) -> dict[str, Any]:
    """The ModelConfig keys `folder`'s preprocessor_config.json declares ({} without one): input_size from
    size (height/width: resized whole; shortest_edge with crop_pct, or with crop_size and do_center_crop: the
    shorter side and a centre crop), interpolation from resample, mean/std from image_mean/image_std
    (0 and 1 when do_normalize is false). Each value is checked as it is read (one of the wrong type is a
    UsageError naming the key and the file); a rescale other than 1/255 is refused rather than guessed."""
    path = folder / PROCESSOR_FILE
    if not path.is_file():
        return {}
    processor = _ProcessorFile(path, read_json_object(path))
    processor.check_rescale()
    return {**processor.sizing(), **processor.interpolation(), **processor.normalisation()}


class _ProcessorFile:
    """A preprocessor_config.json read key by key, each value checked where it is read (its errors name the file)."""

    def __init__(self, path: Path, spec: dict[str, Any]):
        self.path, self.spec, self.origin = path, spec, str(path)

    def switch(self, key: str, default: bool) -> bool:
        return model_config.switch(key, self.spec.get(key, default), self.origin)

    def side(self, key: str, value: Any) -> int:
        return model_config.whole_number(key, value, self.origin, low=1, high=model_config.MAX_INPUT_SIDE)

    def check_rescale(self) -> None:
        """Pixels rescaled to [0, 1] by 1/255, the one rescale macs-audit's images have."""
        if not self.switch("do_rescale", True):
            raise InputError(f"{self.path}: do_rescale false (pixels in 0-255) is not supported")
        rescale = model_config.finite_number(
            "rescale_factor", self.spec.get("rescale_factor", UNIT_RESCALE), self.origin
        )
        if abs(rescale - UNIT_RESCALE) > 1e-9:
            raise InputError(f"{self.path}: rescale_factor {rescale} (only 1/255 is supported)")

    def sizing(self) -> dict[str, Any]:
        """input_size, and crop_pct where the resize is of the shorter side and a centre crop follows."""
        size = self.spec.get("size")
        if not self.switch("do_resize", True) or size is None:
            return {}
        if isinstance(size, dict) and ("height" in size or "width" in size):
            return {"input_size": [self.side(f"size.{key}", size.get(key)) for key in ("height", "width")]}
        if isinstance(size, dict) and "shortest_edge" not in size:
            expected = "{height, width}, {shortest_edge} or one number"
            raise model_config.config_error("size", size, expected, self.origin)
        # one number is the shorter side too
        short = (
            self.side("size.shortest_edge", size["shortest_edge"])
            if isinstance(size, dict)
            else self.side("size", size)
        )
        if self.spec.get("crop_pct") is not None:  # ConvNeXt's processor: shorter side short / crop_pct, crop short
            crop_pct = model_config.crop_fraction("crop_pct", self.spec["crop_pct"], self.origin)
            return {"input_size": [short, short], "crop_pct": crop_pct}
        crop = self.spec.get("crop_size")
        if not self.switch("do_center_crop", False) or crop is None:
            raise InputError(f"{self.path}: a shortest_edge resize without a centre crop gives images of many sizes")
        if isinstance(crop, dict):
            height, width = (self.side(f"crop_size.{key}", crop.get(key)) for key in ("height", "width"))
        else:  # one number: a square
            height = width = self.side("crop_size", crop)
        return {"input_size": [height, width], "crop_pct": min(height, width) / short}

    def interpolation(self) -> dict[str, Any]:
        """interpolation, from PIL's resample code."""
        resample = self.spec.get("resample")
        if resample is None:
            return {}
        if isinstance(resample, bool) or not isinstance(resample, int):
            expected = "one of 0, 2 or 3 (PIL's nearest, bilinear, bicubic)"
            raise model_config.config_error("resample", resample, expected, self.origin)
        if resample not in PIL_RESAMPLE:
            raise InputError(f"{self.path}: resample {resample} is not one macs-audit resizes with (0, 2 or 3)")
        return {"interpolation": PIL_RESAMPLE[resample]}

    def normalisation(self) -> dict[str, Any]:
        """mean and std, from image_mean and image_std; 0 and 1 without normalisation."""
        if not self.switch("do_normalize", True):
            return {"mean": [0.0, 0.0, 0.0], "std": [1.0, 1.0, 1.0]}
        return {
            ours: list(model_config.channel_values(theirs, self.spec[theirs], self.origin))
            for ours, theirs in (("mean", "image_mean"), ("std", "image_std"))
            if self.spec.get(theirs) is not None
        }


def label_names(id2label: Any, origin: str) -> list[str] | None:
    """config.json's id2label (None without one) as its class names in label order: a JSON object of each class
    index, "0" to "K-1", to its name. Anything else is a UsageError naming id2label and `origin`."""
    if id2label is None:
        return None
    if not isinstance(id2label, dict):
        expected = 'a JSON object of each class index ("0", "1", ...) to its name'
        raise model_config.config_error("id2label", id2label, expected, origin)
    count = len(id2label)
    if not 2 <= count <= model_config.MAX_CLASSES:
        raise UsageError(f"id2label must name 2 to {model_config.MAX_CLASSES:,} classes, got {count:,} from {origin}")
    names: dict[int, str] = {}
    for key, name in id2label.items():
        if not re.fullmatch(r"[0-9]+", key) or int(key) >= count:
            expected = f"the class indices 0 to {count - 1}"
            raise model_config.config_error("id2label's keys", key, expected, origin)
        if not isinstance(name, str):
            raise model_config.config_error(f"id2label[{key!r}]", name, "a class name (a string)", origin)
        names[int(key)] = name
    if len(names) != count:  # "1" and "01": one index twice, another missing
        raise UsageError(f"id2label must name each class index 0 to {count - 1} once, from {origin}")
    return [names[i] for i in range(count)]


def class_names(names: list[str] | None) -> list[str] | None:
    """`names` (id2label's), unless they are transformers' placeholder (LABEL_0, LABEL_1, ...)."""
    if not names or all(re.fullmatch(rf"LABEL_{i}", n) for i, n in enumerate(names)):
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


def load_hf_folder(folder: Path, settings: LoadSettings) -> Any:
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
    origin = str(folder / "config.json")
    # The class count is bounded here, before transformers builds a classifier (and an id2label) of that size.
    num_labels = config.get("num_labels")
    if num_labels is not None:
        num_labels = model_config.class_count("num_labels", num_labels, origin)
    labels = label_names(config.get("id2label"), origin)
    if labels is not None and num_labels is not None and num_labels != len(labels):
        expected = f"the number of classes id2label names ({len(labels)})"
        raise model_config.config_error("num_labels", num_labels, expected, origin)
    num_labels = num_labels or (len(labels) if labels else 2)  # neither: transformers' default of 2 labels
    meta["num_classes"] = num_labels
    names = class_names(labels)
    if names:
        meta["class_names"] = names
    meta["crop_offset"] = "floor"  # transformers' center_crop floors an odd margin's half (torchvision rounds it)
    cfg = model_config.resolve(settings.flags, settings.sidecar, meta, PROCESSOR_FILE, folder / PROCESSOR_FILE)
    for key in ("num_classes", "class_names"):  # read from config.json, not the processor's file
        if cfg.sources.get(key) == PROCESSOR_FILE:
            cfg.sources[key] = "config.json"
    if cfg.num_classes != num_labels:
        raise InputError(f"--num-classes {cfg.num_classes} does not match the {num_labels} labels of {folder}")
    transformers = require("transformers", "hf")  # after the folder's own checks, which need no transformers
    if not settings.debug:  # transformers' own progress bars and notes while loading
        transformers.logging.set_verbosity_error()
        transformers.logging.disable_progress_bar()
    with library_warnings(settings.debug):
        try:
            model = transformers.AutoModelForImageClassification.from_pretrained(
                str(folder), local_files_only=True, trust_remote_code=False
            )
        except Exception as exc:  # an unknown model_type, a config of another task, weights that do not fit
            raise InputError(f"cannot load the Hugging Face model in {folder}: {one_line(exc)}") from None
    wrapped = logits_module(model)
    wrapped.source_folder = str(folder)  # the image processor's JSON a written copy takes along
    return TorchPredictor.of_module(
        wrapped, cfg, folder, HF_TRANSFORMERS, settings.device, settings.precision, hashed=weights
    )


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
