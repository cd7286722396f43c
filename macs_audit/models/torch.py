"""PyTorch models: TorchScript files, and state dicts / safetensors with a timm architecture.

State dicts are read with `torch.load(..., weights_only=True)` always. A file holding a fully
pickled module runs code when loaded; it is refused unless the caller passes
`allow_unsafe_pickle=True` (the CLI's `--trust-pickled-model-code`).
"""

from __future__ import annotations

import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

from macs_audit.errors import InputError, UsageError
from macs_audit.models import config as model_config
from macs_audit.models.backend import OutputAdapter, file_sha256
from macs_audit.models.preprocessing import resize_and_normalize

UNSAFE_FLAG = "--trust-pickled-model-code"


def is_torchscript(path: Path) -> bool:
    if not zipfile.is_zipfile(path):
        return False
    with zipfile.ZipFile(path) as zf:
        return any(name.split("/", 1)[-1] in ("constants.pkl",) or "/code/" in name for name in zf.namelist())


def read_state_dict(path: Path, allow_unsafe_pickle: bool = False):
    """Return a state dict (name -> tensor), or an nn.Module if the file pickles one and that is allowed."""
    if path.suffix.lower() == ".safetensors":
        from safetensors import SafetensorError
        from safetensors.torch import load_file

        try:
            return load_file(str(path))
        except (SafetensorError, OSError, ValueError) as exc:
            raise InputError(f"cannot read safetensors file {path}: {exc}") from None
    try:
        obj = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises UnpicklingError, RuntimeError, ... for bad files
        if "weights_only" in str(exc) or "Weights only load failed" in str(exc):
            if not allow_unsafe_pickle:
                raise InputError(
                    f"{path} holds a pickled Python object, which runs code when loaded; "
                    f"save a state dict instead, or pass {UNSAFE_FLAG} if you trust its source"
                ) from None
            obj = torch.load(path, map_location="cpu", weights_only=False)
        else:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise InputError(f"cannot read PyTorch checkpoint {path}: {first[:200]}") from None
    if isinstance(obj, torch.nn.Module):
        return obj
    for key in ("state_dict", "model_state_dict", "model"):  # common training-checkpoint wrappers
        if isinstance(obj, dict) and isinstance(obj.get(key), dict):
            obj = obj[key]
            break
    if not isinstance(obj, dict) or not all(isinstance(v, torch.Tensor) for v in obj.values()):
        raise InputError(f"{path} is not a state dict (expected a mapping of parameter names to tensors)")
    # Checkpoints saved from DistributedDataParallel or torch.compile carry a prefix.
    for prefix in ("module.", "_orig_mod."):
        if obj and all(k.startswith(prefix) for k in obj):
            obj = {k[len(prefix) :]: v for k, v in obj.items()}
    return obj


def build_timm_model(arch: str, num_classes: int, state_dict: dict | None = None) -> torch.nn.Module:
    import timm

    from macs_audit.models import architectures  # noqa: F401  (registers the project's models)

    if not timm.is_model(arch):
        raise UsageError(f"unknown architecture {arch!r}; use a timm model name (see timm.list_models())")
    model = timm.create_model(arch, pretrained=False, num_classes=num_classes)
    if state_dict is not None:
        try:
            model.load_state_dict(state_dict, strict=True)
        except RuntimeError as exc:
            lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
            detail = lines[1] if len(lines) > 1 else lines[0]
            raise InputError(f"the checkpoint does not fit {arch} with {num_classes} classes: {detail[:200]}") from None
    return model


def infer_num_classes(arch: str, state_dict: dict) -> int | None:
    """Read the class count off the classifier weight named by timm's pretrained config."""
    import timm

    from macs_audit.models import architectures  # noqa: F401

    try:
        model: Any = timm.create_model(arch, pretrained=False)
        pretrained_cfg = model.pretrained_cfg
        classifier = pretrained_cfg.get("classifier", "fc")
    except Exception:
        classifier = "fc"
    weight = state_dict.get(f"{classifier}.weight")
    return int(weight.shape[0]) if weight is not None and weight.ndim == 2 else None


class TorchPredictor:
    backend = "torch"

    def __init__(
        self, path: Path, flags: dict[str, Any], sidecar: dict[str, Any], device: str, allow_unsafe_pickle: bool = False
    ):
        self.torch_device = torch.device(device)
        self.device = str(self.torch_device)
        cfg = model_config.resolve(flags, sidecar, {})
        if is_torchscript(path):
            fmt = "torchscript"
            try:
                model = torch.jit.load(str(path), map_location="cpu")
            except Exception as exc:
                raise InputError(f"cannot load TorchScript model {path}: {str(exc).splitlines()[0][:200]}") from None
        else:
            state = read_state_dict(path, allow_unsafe_pickle)
            if isinstance(state, torch.nn.Module):
                fmt, model = "pickled-module", state
            else:
                fmt = "safetensors" if path.suffix.lower() == ".safetensors" else "state-dict"
                if not cfg.arch:
                    raise UsageError(
                        f"{path} holds only weights: pass --arch <timm model name> "
                        '(or put "arch" in a sidecar JSON next to it)'
                    )
                if cfg.num_classes is None:
                    cfg.num_classes = infer_num_classes(cfg.arch, state)
                if cfg.num_classes is None:
                    raise UsageError(f"cannot tell the class count of {path}: pass --num-classes")
                model = build_timm_model(cfg.arch, cfg.num_classes, state)
        self.config = cfg
        self.model = model.to(self.torch_device).eval()
        self.output = OutputAdapter(cfg.output, cfg.num_classes)
        self.mean = torch.tensor(cfg.mean, device=self.torch_device).view(1, -1, 1, 1)
        self.std = torch.tensor(cfg.std, device=self.torch_device).view(1, -1, 1, 1)
        self.autocast = self.torch_device.type == "cuda"
        # bf16 where the GPU has it (Ampere and later), else fp16; the logits are upcast either way.
        self.amp_dtype = torch.bfloat16 if not self.autocast or torch.cuda.is_bf16_supported() else torch.float16
        self.info = {
            "path": str(path),
            "format": fmt,
            "backend": self.backend,
            "device": self.device,
            "provider": f"torch {torch.__version__} ({'CUDA' if self.torch_device.type == 'cuda' else 'CPU'})",
            "sha256": file_sha256(path),
        }

    @property
    def num_classes(self) -> int | None:
        return self.config.num_classes

    def forward(self, images: torch.Tensor, amp: bool | None = None) -> torch.Tensor:
        """Differentiable logits of float images in [0,1] (N, C, H, W) on the model's device.
        bf16 autocast on CUDA unless `amp=False` (an outer autocast(enabled=False) does not reach in)."""
        x = resize_and_normalize(images, self.config.input_size, self.mean, self.std)
        with torch.autocast(
            self.torch_device.type, dtype=self.amp_dtype, enabled=self.autocast if amp is None else amp
        ):
            out = self.model(x)
        return out.float()  # upcast before any metric

    @torch.no_grad()
    def predict(self, images) -> np.ndarray:
        """Logits of float [0,1] NCHW images: a numpy array, or a tensor (pinned host memory or already
        on the model's device, as the audit's CUDA paths hand it over)."""
        x = images if torch.is_tensor(images) else torch.from_numpy(np.asarray(images, dtype=np.float32))
        x = x.to(self.torch_device, dtype=torch.float32, non_blocking=True)  # asynchronous from pinned memory
        try:
            out = self.forward(x)
        except InputError:
            raise
        except RuntimeError as exc:
            raise InputError(
                f"the model failed on a batch of shape {tuple(x.shape)}: {str(exc).splitlines()[0][:200]}"
            ) from None
        logits = self.output(out.cpu().numpy())
        if self.config.num_classes is None:
            self.config.num_classes = self.output.num_classes = logits.shape[1]
        return logits
