"""Models the caller already holds: a `torch.nn.Module` or an `onnxruntime.InferenceSession` (the Python API's
in-memory models), as the Predictors the file loaders return (models/torch.py's TorchPredictor, models/onnx.py's
OnnxPredictor), with the same preprocessing, output checks and report facts.

A model file carries its preprocessing (a sidecar, ONNX metadata, a folder's config); a model in memory mostly
does not, and CIFAR-10's built-in values would misfit most models without a word. So `input_size`, `mean` and
`std` must be given, unless the model carries them: a timm module its `pretrained_cfg` (what timm itself
preprocesses with), an ONNX session its `macs_audit.*` metadata and its static input size. Given values win,
as flags win over a file's own. Neither kind has a file: the report's model.path and model.sha256 are null.
"""

from __future__ import annotations

import difflib
import sys
from pathlib import Path
from typing import Any

from macs_audit.devices import resolve_device
from macs_audit.errors import UsageError
from macs_audit.models import config as model_config
from macs_audit.models.predictor import Predictor

# The model flags the CLI builds (cli/options.model_flags): ModelConfig keys, None for not given.
FLAGS = ("arch", "num_classes", "input_size", "mean", "std", "output", "crop_pct", "interpolation")
REQUIRED = ("input_size", "mean", "std")  # unless the model carries them
# The report's model.format of each kind: the type the caller handed over.
TORCH_MODULE = "torch.nn.Module"
ONNX_SESSION = "onnxruntime.InferenceSession"
PRETRAINED_CFG = "pretrained_cfg"  # where a timm module's preprocessing came from, as the report's sources say


def predictor_of(
    model: Any, flags: dict[str, Any] | None = None, *, device: str = "auto", precision: str = "fp32"
) -> Predictor:
    """The Predictor of an in-memory `model` (a torch.nn.Module or an onnxruntime.InferenceSession) with the model
    flags `flags` (FLAGS keys; None values are not given).

    A torch module is moved to `device` (auto: a CUDA GPU where there is one) and put in eval mode, in place, as
    `module.to(device).eval()` does; `precision` (fp32, bf16, fp16) is its CUDA autocast. An ONNX session runs on
    its own providers: `device` may only name where they run (auto does), and `precision` must be fp32.

    Raises UsageError (one line) for another kind of object, an unknown flag, a bad value, or where input_size,
    mean or std is neither given nor carried by the model (the message names the missing keywords)."""
    given = _checked_flags(flags)
    if _is_instance(model, "onnxruntime", "InferenceSession"):
        return _onnx_predictor(model, given, device, precision)
    if _is_instance(model, "torch", "nn.Module"):
        return _torch_predictor(model, given, device, precision)
    raise UsageError(
        f"an in-memory model must be a torch.nn.Module or an onnxruntime.InferenceSession, got "
        f"{type(model).__module__}.{type(model).__qualname__}; pass a model file's path for anything else"
    )


def _is_instance(obj: Any, library: str, name: str) -> bool:
    """isinstance(obj, library.name), without importing the library: an object of it means it is imported."""
    found: Any = sys.modules.get(library)
    for part in name.split("."):
        found = getattr(found, part, None)
    return isinstance(found, type) and isinstance(obj, found)


def _checked_flags(flags: dict[str, Any] | None) -> dict[str, Any]:
    given = {key: value for key, value in (flags or {}).items() if value is not None}
    for key in given:
        if key not in FLAGS:
            close = difflib.get_close_matches(key, FLAGS, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else f"; the model settings are {', '.join(FLAGS)}"
            raise UsageError(f"unknown model setting {key!r}{hint}")
    return given


def _require_preprocessing(config: model_config.ModelConfig, kind: str) -> None:
    """UsageError naming the keywords of REQUIRED that nobody set (neither given nor carried by the model)."""
    missing = [key for key in REQUIRED if key not in config.sources]
    if missing:
        named = " and ".join([", ".join(missing[:-1]), missing[-1]] if len(missing) > 1 else missing)
        raise UsageError(
            f"the {kind} does not carry its {named}: pass "
            f"{', '.join(f'{key}=...' for key in missing)} with the values it was trained with"
        )


def _torch_predictor(module: Any, flags: dict[str, Any], device: str, precision: str) -> Predictor:
    from macs_audit.models.timm_folder import pretrained_preprocessing
    from macs_audit.models.torch import TorchPredictor

    pretrained_cfg = getattr(module, PRETRAINED_CFG, None)
    where = Path(f"{type(module).__name__}.{PRETRAINED_CFG}")  # what a message about one of its values names
    carried = pretrained_preprocessing(pretrained_cfg, where) if isinstance(pretrained_cfg, dict) else {}
    config = model_config.resolve(flags, {}, carried, metadata_origin=PRETRAINED_CFG)
    _require_preprocessing(config, "torch module")
    return TorchPredictor.of_module(module, config, None, TORCH_MODULE, resolve_device(device), precision)


def _onnx_predictor(session: Any, flags: dict[str, Any], device: str, precision: str) -> Predictor:
    from macs_audit.models.onnx import OnnxPredictor

    if precision != "fp32":
        raise UsageError(f"precision={precision!r} is for torch models: an ONNX session runs as its graph is typed")
    predictor = OnnxPredictor.of_session(session, flags, _session_device(session, device), ONNX_SESSION)
    _require_preprocessing(predictor.config, "ONNX session")
    return predictor


def _session_device(session: Any, device: str) -> str:
    """Where the session's first provider runs ("cpu" or "cuda:N"); UsageError where `device` names another."""
    provider = session.get_providers()[0]
    if provider == "CPUExecutionProvider":
        runs = "cpu"
    else:
        options = session.get_provider_options().get(provider, {})
        runs = f"cuda:{options.get('device_id', 0)}"
    if device not in ("auto", runs) and not (device == "cuda" and runs.startswith("cuda")):
        raise UsageError(
            f"device={device!r}, but the ONNX session runs on {runs} ({provider}): make the session with the "
            "providers of the device you want, or leave device='auto'"
        )
    return runs
