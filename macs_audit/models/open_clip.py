"""OpenCLIP zero-shot classifiers: `--arch open_clip:NAME` builds OpenCLIP's model NAME with random weights
(`create_model(NAME, pretrained=None)`: nothing is downloaded), loads the MODEL file's weights into it
(weights_only, or safetensors), strictly, and makes a classifier of it with `--class-prompts FILE`.

FILE is JSON: {"classes": ["tench", ...], "templates": ["a photo of a {}.", ...]} (templates default to
"a photo of a {}."). Each class's prompts are encoded by the text tower, each embedding L2-normalised, their
mean normalised again (the zero-shot head of CLIP and open_clip's own zero-shot evaluation); the logits are
the model's logit scale (exp of its learnt log scale) times the cosine of the normalised image embedding with
each class's. Temperature scaling and every calibrator then apply to these logits as to any model's.
The preprocessing is the model's own (its visual preprocess_cfg: size, mean, std, interpolation, resize mode).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from macs_audit.errors import InputError, UsageError
from macs_audit.models import config as model_config
from macs_audit.models.sources import OPEN_CLIP, OPEN_CLIP_PREFIX, LoadSettings, read_json_object, require

ORIGIN = "open_clip config"
DEFAULT_TEMPLATES = ("a photo of a {}.",)


def read_class_prompts(path: Path | None) -> tuple[list[str], list[str]]:
    """(classes, templates) of a --class-prompts file, or a UsageError saying what it lacks
    (a file an option names: its faults are usage errors, macs_audit.files)."""
    if path is None:
        raise UsageError(f"--arch {OPEN_CLIP_PREFIX}NAME needs --class-prompts FILE (the class names and templates)")
    data = read_json_object(path, named="--class-prompts", holds='{"classes": [...], "templates": [...]}')
    classes = data.get("classes")
    if isinstance(classes, list) and len(classes) > model_config.MAX_CLASSES:  # each is run through the text tower
        count, most = f"{len(classes):,}", f"{model_config.MAX_CLASSES:,}"
        raise UsageError(f"--class-prompts {path} names {count} classes, more than the {most} a model may have")
    if not isinstance(classes, list) or len(classes) < 2 or not all(isinstance(c, str) and c for c in classes):
        raise UsageError(f'--class-prompts {path} needs "classes": a list of at least 2 class names')
    if len(set(classes)) != len(classes):
        raise UsageError(f"--class-prompts {path}: class names repeat")
    templates = data.get("templates", list(DEFAULT_TEMPLATES))
    if not isinstance(templates, list) or not templates or not all(isinstance(t, str) for t in templates):
        raise UsageError(f'--class-prompts {path}: "templates" must be a list of strings, each with {{}} for the class')
    for template in templates:
        if template.count("{") != 1 or template.count("}") != 1 or "{}" not in template:
            raise UsageError(
                f"--class-prompts {path}: template {model_config.shown(template)} must hold {{}} once, where the "
                "class name goes, and no other brace"
            )
    return classes, templates


def fill(template: str, name: str) -> str:
    """`template` with the class name in place of its one {} (checked by read_class_prompts). Not str.format,
    which reads a template's other fields ({0}, {.attr}) as indices and attributes of the name to look up."""
    before, _, after = template.partition("{}")
    return before + name + after


def preprocess_metadata(preprocess_cfg: dict[str, Any]) -> dict[str, Any]:
    """OpenCLIP's preprocess_cfg as ModelConfig keys: 'shortest' is a shorter-side resize and a full centre crop
    (crop_pct 1), 'squash' a resize of the whole image."""
    size = preprocess_cfg.get("size", 224)
    size = [size, size] if isinstance(size, int) else list(size)
    meta: dict[str, Any] = {"input_size": size}
    meta["mean"], meta["std"] = list(preprocess_cfg["mean"]), list(preprocess_cfg["std"])
    interpolation = preprocess_cfg.get("interpolation", "bicubic")
    if interpolation in ("bilinear", "bicubic", "nearest"):
        meta["interpolation"] = interpolation
    mode = preprocess_cfg.get("resize_mode", "shortest")
    if mode == "shortest":
        meta["crop_pct"] = 1.0
    elif mode != "squash":
        raise InputError(f"OpenCLIP resize_mode {mode!r} (padding) is not supported")
    return meta


def zero_shot_module(model: Any, classifier: Any) -> Any:
    import torch

    class ZeroShot(torch.nn.Module):
        """logit_scale.exp() * cos(image embedding, class embedding): CLIP's zero-shot logits."""

        def __init__(self, clip: Any, weights: torch.Tensor):
            super().__init__()
            self.clip = clip
            self.register_buffer("class_embeddings", weights)
            self.image_embedding = torch.nn.Identity()  # its input, the normalised embedding, are the features

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            features = self.image_embedding(torch.nn.functional.normalize(self.clip.encode_image(x), dim=-1))
            return self.clip.logit_scale.exp() * features @ self.get_buffer("class_embeddings").T

        def feature_head(self) -> tuple[str, torch.Tensor, None]:
            """The features' layer and the map to the logits (models/features.py): the normalised image embedding,
            and the class embeddings times the logit scale."""
            return "image_embedding", self.clip.logit_scale.exp() * self.get_buffer("class_embeddings"), None

    return ZeroShot(model, classifier)


def class_embeddings(model: Any, tokenizer: Any, classes: list[str], templates: list[str]) -> Any:
    """(K, D): each class's prompts' normalised text embeddings, averaged and normalised again."""
    import torch

    rows = []
    with torch.no_grad():
        for name in classes:
            tokens = tokenizer([fill(t, name) for t in templates])
            text = torch.nn.functional.normalize(model.encode_text(tokens), dim=-1)
            rows.append(torch.nn.functional.normalize(text.mean(dim=0), dim=-1))
    return torch.stack(rows)


def load_open_clip(path: Path, name: str, settings: LoadSettings, class_prompts: Path | None) -> Any:
    from macs_audit.models.backend import library_warnings, one_line
    from macs_audit.models.torch import TorchPredictor, load_strictly, read_state_dict

    classes, templates = read_class_prompts(class_prompts)
    open_clip = require("open_clip", "clip")
    if name not in open_clip.list_models():
        raise UsageError(f"--arch {OPEN_CLIP_PREFIX}{name}: not an OpenCLIP model (see open_clip.list_models())")
    with library_warnings(settings.debug):
        import logging

        logging.getLogger().disabled, was = True, logging.getLogger().disabled  # "No pretrained weights loaded"
        try:
            model = open_clip.create_model(name, pretrained=None)
        finally:
            logging.getLogger().disabled = was
        state = read_state_dict(path)
        load_strictly(model, state, f"{OPEN_CLIP_PREFIX}{name}")
        try:
            tokenizer = open_clip.get_tokenizer(name)
        except Exception as exc:  # a Hugging Face tokenizer that is not in the local cache
            raise InputError(f"cannot load the tokenizer of {OPEN_CLIP_PREFIX}{name}: {one_line(exc)}") from None
        model.eval()
        weights = class_embeddings(model, tokenizer, classes, templates)
    meta = preprocess_metadata(dict(model.visual.preprocess_cfg))
    meta["num_classes"], meta["class_names"] = len(classes), classes
    flags = {k: v for k, v in settings.flags.items() if k != "arch"}
    cfg = model_config.resolve(flags, settings.sidecar, meta, metadata_origin=ORIGIN)
    cfg.arch = f"{OPEN_CLIP_PREFIX}{name}"
    cfg.sources["arch"] = "flag" if "arch" in settings.flags else "sidecar"  # --arch, or a written model's sidecar
    for key in ("num_classes", "class_names"):
        if cfg.sources.get(key) == ORIGIN:
            cfg.sources[key] = "--class-prompts"
    if cfg.num_classes != len(classes):
        count = len(classes)
        raise UsageError(f"--num-classes {cfg.num_classes} does not match the {count} classes of {class_prompts}")
    module = zero_shot_module(model, weights)
    return TorchPredictor.of_module(module, cfg, path, OPEN_CLIP, settings.device, settings.precision)
