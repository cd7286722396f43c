"""torchvision classification architectures: `--arch torchvision:NAME` builds `torchvision.models.get_model(NAME,
weights=None)` (any classification builder; no weights are fetched) and loads the MODEL file's state dict into it
(weights_only, or safetensors), strictly. The class count is read off the classifier's weight when not given."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from macs_audit.errors import UsageError
from macs_audit.models import config as model_config
from macs_audit.models.sources import TORCHVISION, TORCHVISION_PREFIX, LoadSettings


def classification_builders() -> list[str]:
    import torchvision

    return sorted(torchvision.models.list_models(module=torchvision.models))


def build(name: str, num_classes: int | None = None) -> Any:
    """torchvision's classification model `name` with random weights (weights=None)."""
    import torchvision

    if name not in classification_builders():
        raise UsageError(
            f"--arch {TORCHVISION_PREFIX}{name}: not a torchvision classification model "
            "(see torchvision.models.list_models(module=torchvision.models))"
        )
    kwargs = {} if num_classes is None else {"num_classes": num_classes}
    try:
        return torchvision.models.get_model(name, weights=None, **kwargs)
    except (TypeError, ValueError) as exc:
        raise UsageError(f"cannot build {TORCHVISION_PREFIX}{name}: {exc}") from None


def classifier_outputs(name: str, state: dict) -> int | None:
    """The class count of `state` for `name`: the rows of the checkpoint's tensor at the default model's last
    2-D weight (its classifier)."""
    default = build(name).state_dict()
    last = next((k for k in reversed(list(default)) if k.endswith("weight") and default[k].ndim == 2), None)
    if last is None:
        return None
    candidates = [k for k in state if k == last or k.endswith("." + last)]
    return int(state[candidates[0]].shape[0]) if len(candidates) == 1 else None


def load_torchvision(path: Path, name: str, settings: LoadSettings) -> Any:
    from macs_audit.models.backend import library_warnings
    from macs_audit.models.torch import TorchPredictor, load_strictly, read_state_dict

    cfg = model_config.resolve({k: v for k, v in settings.flags.items() if k != "arch"}, settings.sidecar, {})
    cfg.arch = f"{TORCHVISION_PREFIX}{name}"
    cfg.sources["arch"] = "flag" if "arch" in settings.flags else "sidecar"  # --arch, or a written model's sidecar
    with library_warnings(settings.debug):
        state = read_state_dict(path)  # weights only: a pickled module is refused, whatever the flag
        if cfg.num_classes is None:
            cfg.num_classes = classifier_outputs(name, state)
        if cfg.num_classes is None:
            raise UsageError(f"cannot tell the class count of {path}: pass --num-classes")
        model = build(name, cfg.num_classes)
        stripped = load_strictly(model, state, f"{TORCHVISION_PREFIX}{name} with {cfg.num_classes} classes")
    predictor = TorchPredictor.of_module(model, cfg, path, TORCHVISION, settings.device, settings.precision)
    if stripped:
        predictor.info["checkpoint_prefix_stripped"] = stripped
    return predictor
