"""The Predictor interface and `load_predictor`, which picks a backend by file type.

A Predictor takes float32 images in [0,1], (N, C, H, W), and returns float32 logits (N, K).
It owns its preprocessing (resize to the model's input size, mean/std) and turns declared or
detected probability outputs into log-probabilities, which softmax maps back to the same
probabilities, so every metric downstream can treat the output as logits.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

import numpy as np

from macs_audit.devices import resolve_device
from macs_audit.errors import InputError, UsageError
from macs_audit.models import config as model_config
from macs_audit.models.backend import OutputAdapter
from macs_audit.models.config import ModelConfig

ONNX_SUFFIXES = {".onnx"}
TORCH_SUFFIXES = {".pt", ".pth", ".bin", ".ckpt", ".safetensors", ".torchscript", ".jit"}


class Predictor(Protocol):
    backend: str  # "onnxruntime" | "torch" (torch predictors also have a differentiable `forward`)
    device: str  # "cpu" | "cuda:N": where the model runs, and so where the views run
    config: ModelConfig
    output: OutputAdapter
    # path, format, backend, device, provider, sha256, and where they apply checkpoint_prefix_stripped and
    # warnings: what the report's model section records
    info: dict[str, Any]

    @property
    def num_classes(self) -> int | None: ...

    def predict(self, images: np.ndarray) -> np.ndarray: ...


def load_predictor(
    path: str | Path,
    flags: dict[str, Any] | None = None,
    device: str = "auto",
    allow_unsafe_pickle: bool = False,
    debug: bool = False,
    precision: str = "fp32",
    class_prompts: Path | None = None,
    provider: str | None = None,
) -> Predictor:
    """Open a model with the right backend, by what `path` is (models/sources.py: a file by its suffix, a model
    folder by its config.json, `hf-hub:ORG/NAME` from the local cache) and the --arch prefix (torchvision:,
    open_clip:, hf-hub:). `flags` are command-line overrides of ModelConfig keys; `precision` (fp32, bf16,
    fp16) the CUDA autocast of torch models; `class_prompts` an OpenCLIP model's classes and templates;
    `provider` the onnxruntime execution provider of an ONNX model (models.onnx.PROVIDERS; None: by the device).

    The libraries' own warnings while loading (torch's deprecations and weights-only notes) are kept
    off stderr unless `debug` (the CLI's --debug). What the user should know about the model (CIFAR-10's
    normalisation applied to a model it does not fit) is in `info["warnings"]`, which the report keeps."""
    from macs_audit.models.sources import resolve_source

    if precision not in model_config.PRECISIONS:
        raise UsageError(f"--precision must be one of {', '.join(model_config.PRECISIONS)}, got {precision!r}")
    flags = {k: v for k, v in (flags or {}).items() if v is not None}
    if provider is not None and Path(path).suffix.lower() not in ONNX_SUFFIXES:
        raise UsageError(f"--provider {provider} is for ONNX models (onnxruntime); {path} runs on torch's device")
    arch = flags.get("arch")
    if arch is None and Path(path).is_file():  # a written model's sidecar names its architecture (torchvision:...)
        arch = model_config.read_sidecar(path).get("arch")
    source = resolve_source(path, arch if isinstance(arch, str) else None)
    if source.kind != "file":
        return _load_source(source, flags, resolve_device(device), debug, precision, class_prompts, allow_unsafe_pickle)
    path = Path(path)
    if not path.is_file():
        raise InputError(f"model not found: {path}")
    try:  # an unreadable file (no read permission) fails here with the OS's reason, not in a backend's words
        with open(path, "rb"):
            pass
    except OSError as exc:
        raise InputError(f"cannot read model {path}: {exc.strerror or exc}") from None
    sidecar = model_config.read_sidecar(path)
    device = resolve_device(device)
    suffix = path.suffix.lower()
    if suffix in ONNX_SUFFIXES:
        from macs_audit.models.onnx import OnnxPredictor

        if precision != "fp32":
            raise UsageError(f"--precision {precision} is for torch models: an ONNX model runs as its graph is typed")
        return OnnxPredictor(path, flags, sidecar, device, provider)
    if suffix in TORCH_SUFFIXES:
        from macs_audit.models.torch import TorchPredictor

        return TorchPredictor(path, flags, sidecar, device, allow_unsafe_pickle, debug=debug, precision=precision)
    raise UsageError(
        f"unknown model type {path.suffix!r}; expected .onnx, .pt2, .safetensors, .pt or .pth, or a model folder"
    )


def _load_source(
    source: Any,
    flags: dict[str, Any],
    device: str,
    debug: bool,
    precision: str,
    class_prompts: Path | None,
    allow_unsafe_pickle: bool = False,
) -> Predictor:
    """A predictor of a source other than a plain model file (models/sources.py's kinds), its library
    imported here only; `allow_unsafe_pickle` lets a torch.export program run the code it holds."""
    from macs_audit.models import sources

    settings = sources.LoadSettings(flags, model_config.read_sidecar(source.path), device, precision, debug)
    if source.kind == sources.HF_TRANSFORMERS:
        from macs_audit.models.huggingface import load_hf_folder

        return load_hf_folder(source.path, settings)
    if source.kind == sources.TIMM_FOLDER:
        from macs_audit.models.timm_folder import load_timm_folder

        if source.config_folder is not None:  # --arch hf-hub:ORG/NAME with a weights file
            return load_timm_folder(source.config_folder, settings, source.path)
        return load_timm_folder(source.path, settings)
    if source.kind == sources.TORCH_EXPORT:
        from macs_audit.models.exported_program import load_exported_program

        return load_exported_program(source.path, settings, allow_unsafe_pickle)
    if source.kind == sources.TORCHVISION:
        from macs_audit.models.torchvision_arch import load_torchvision

        return load_torchvision(source.path, source.name, settings)
    from macs_audit.models.open_clip import load_open_clip

    return load_open_clip(source.path, source.name, settings, class_prompts)


def check_prompts_read(class_prompts: Path | None, *predictors: Any) -> None:
    """UsageError where --class-prompts was given but none of `predictors` (None: not loaded) is an OpenCLIP
    zero-shot model, the one kind that reads it: an option never goes unused without a word."""
    from macs_audit.models.sources import OPEN_CLIP

    loaded = [p for p in predictors if p is not None]
    if class_prompts is not None and not any(p.info.get("format") == OPEN_CLIP for p in loaded):
        raise UsageError(
            f"--class-prompts {class_prompts} is read only by an OpenCLIP zero-shot model (--arch open_clip:NAME); "
            f"{loaded[0].info['path']} ({loaded[0].info['format']}) has its own classes: drop the option"
        )


def load_torch_predictor(
    model: Path, flags: dict, device: str, trust_pickled: bool, debug: bool = False, class_prompts: Path | None = None
) -> Any:
    """A PyTorch model to train or export (a TorchPredictor); an ONNX file gets an error naming the checkpoint route."""
    if model.suffix.lower() in ONNX_SUFFIXES:
        raise UsageError(
            f"{model} is an ONNX model, which cannot be fine-tuned: fine-tune the PyTorch checkpoint it was "
            "exported from (.safetensors/.pt with --arch or a sidecar JSON), or fix it with "
            "`macs-audit calibrate`"
        )
    return load_predictor(
        model, flags, device=device, allow_unsafe_pickle=trust_pickled, debug=debug, class_prompts=class_prompts
    )
