"""PyTorch models: TorchScript files, and state dicts / safetensors with a timm architecture.

State dicts are read with `torch.load(..., weights_only=True)` always. A file holding a fully
pickled module runs code when loaded; it is refused unless the caller passes
`allow_unsafe_pickle=True` (the CLI's `--trust-pickled-model-code`). A file that holds no readable
pickle at all (damaged, truncated, random bytes) is a corrupt checkpoint, whatever the flag.

Training checkpoints are read as users bring them: the state dict inside a wrapper dict
(`{"state_dict": ..., "epoch": ...}` from Lightning and most training scripts), its keys under a
prefix every key shares (`model.`, `net.`, `module.` of DistributedDataParallel, `_orig_mod.` of
torch.compile, nested), which is stripped when what remains fits the architecture; the report
records what was stripped.
"""

from __future__ import annotations

import pickle
import pickletools
import re
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

from macs_audit.errors import InputError, UsageError
from macs_audit.models import config as model_config
from macs_audit.models.backend import (
    OutputAdapter,
    file_sha256,
    library_warnings,
    one_line,
    record_warnings,
    summarise_keys,
)
from macs_audit.models.features import FeatureReader, require_features
from macs_audit.models.preprocessing import resize_and_normalize

UNSAFE_FLAG = "--trust-pickled-model-code"
# Keys under which training checkpoints keep the state dict, tried in this order.
CONTAINER_KEYS = ("state_dict", "model_state_dict", "model")


def is_torchscript(path: Path) -> bool:
    if not zipfile.is_zipfile(path):
        return False
    try:
        with zipfile.ZipFile(path) as zf:
            return any(name.split("/", 1)[-1] in ("constants.pkl",) or "/code/" in name for name in zf.namelist())
    except (zipfile.BadZipFile, OSError):
        return False


def pickle_globals(path: Path) -> list[str] | None:
    """The classes and functions the pickle data of `path` names, read opcode by opcode with pickletools
    (nothing is imported or run); None when the file holds no complete pickle (damaged or random bytes).

    The pickle data is `data.pkl` of a zip checkpoint, or the pickles at the start of a legacy one."""
    try:
        if zipfile.is_zipfile(path):
            with zipfile.ZipFile(path) as zf:
                name = next((n for n in zf.namelist() if n.endswith("data.pkl")), None)
                if name is None:
                    return None
                with zf.open(name) as fh:
                    return _globals_of_pickles(fh, count=1)
        with open(path, "rb") as fh:
            # A legacy checkpoint: magic number, protocol, system info, the object, the storage keys.
            return _globals_of_pickles(fh, count=5)
    except (OSError, zipfile.BadZipFile, RuntimeError):
        return None


def _globals_of_pickles(fh: Any, count: int) -> list[str] | None:
    found: list[str] = []
    strings: list[str] = []
    for index in range(count):
        try:
            ops = list(pickletools.genops(fh))
        except Exception:  # pickletools on bytes that are no pickle: ValueError, EOFError, UnicodeDecodeError, ...
            return None if index == 0 else found  # the data after a legacy file's pickles is raw bytes
        if not ops or ops[-1][0].name != "STOP":
            return None if index == 0 else found
        for opcode, arg, _ in ops:
            if opcode.name in ("GLOBAL", "INST"):
                found.append(str(arg).replace(" ", "."))
            elif opcode.name == "STACK_GLOBAL" and len(strings) >= 2:
                found.append(f"{strings[-2]}.{strings[-1]}")
            elif isinstance(arg, str):
                strings.append(arg)
        if not fh.peek(1):  # the end of the file: a plain pickle, not a legacy checkpoint
            break
    return found


def _refused_object(path: Path, exc: Exception) -> str | None:
    """The class or function a pickled object in `path` names, where weights_only refused it (`exc`);
    None where the load failed because the file is damaged, truncated or no PyTorch file at all."""
    if path.stat().st_size == 0 or isinstance(exc, EOFError):
        return None
    text = one_line(exc)
    if not isinstance(exc, pickle.UnpicklingError) and "weights only load failed" not in text.lower():
        return None  # torch's zip reader and friends: the file is damaged
    named = pickle_globals(path)
    if not named:
        return None
    refused = re.search(r"Unsupported global: GLOBAL ([\w.]+)", text)
    return refused.group(1) if refused else next((g for g in named if not g.startswith("torch._utils")), named[0])


def _damage(path: Path, exc: Exception) -> str:
    """What is wrong with a file torch could not read and that holds no pickled object."""
    if path.stat().st_size == 0:
        return "the file is empty"
    if isinstance(exc, EOFError):
        return "the file ends too early"
    if isinstance(exc, pickle.UnpicklingError) or "weights only load failed" in one_line(exc).lower():
        return "no readable pickle data: the file is damaged or is not a PyTorch file"
    return one_line(exc)


def read_state_dict(path: Path, allow_unsafe_pickle: bool = False) -> Any:
    """Return a state dict (name -> tensor), or an nn.Module if the file pickles one and that is allowed.

    A training checkpoint's wrapper dict is opened (its `state_dict`, `model_state_dict` or `model`);
    key prefixes are left for `strip_wrapper_prefix`, which needs the architecture."""
    if path.suffix.lower() == ".safetensors":
        from safetensors import SafetensorError
        from safetensors.torch import load_file

        try:
            return load_file(str(path))
        except (SafetensorError, OSError, ValueError) as exc:
            raise InputError(f"cannot read safetensors file {path}: {one_line(exc)}") from None
    try:
        obj = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises UnpicklingError, RuntimeError, EOFError, ... for bad files
        culprit = _refused_object(path, exc)
        if culprit is None:
            raise InputError(
                f"cannot read PyTorch checkpoint {path}: not a valid checkpoint ({_damage(path, exc)})"
            ) from None
        if not allow_unsafe_pickle:
            raise InputError(
                f"{path} holds a pickled Python object ({culprit}), which runs code when loaded; "
                f"save a state dict instead, or pass {UNSAFE_FLAG} if you trust its source"
            ) from None
        try:
            obj = torch.load(path, map_location="cpu", weights_only=False)
        except Exception as unsafe_exc:  # the pickle names a class that is not importable here, ...
            raise InputError(f"cannot read PyTorch checkpoint {path}: {one_line(unsafe_exc)}") from None
    if isinstance(obj, torch.nn.Module):
        return obj
    for key in CONTAINER_KEYS:  # common training-checkpoint wrappers
        if isinstance(obj, dict) and isinstance(obj.get(key), dict):
            obj = obj[key]
            break
    if not isinstance(obj, dict) or not obj or not all(isinstance(v, torch.Tensor) for v in obj.values()):
        raise InputError(f"{path} is not a state dict (expected a mapping of parameter names to tensors)")
    return obj


def strip_wrapper_prefix(state: dict, expected: set[str]) -> tuple[dict, str]:
    """Strip the prefix every key of `state` shares (`model.`, `net.`, `module.`, `_orig_mod.`, nested ones
    like `model._orig_mod.`) when the stripped keys fit the architecture's `expected` keys better than the
    keys as saved. Returns the state dict and the prefix stripped ("" for none)."""
    keys = list(state)
    best_prefix, best_overlap = "", len(expected.intersection(keys))
    prefix = ""
    while best_overlap < len(expected):
        rests = [k[len(prefix) :] for k in keys]
        heads = {rest.split(".", 1)[0] for rest in rests}
        if len(heads) != 1 or not all("." in rest for rest in rests):
            break  # not every key has the same further prefix
        prefix += heads.pop() + "."
        overlap = len(expected.intersection(k[len(prefix) :] for k in keys))
        if overlap > best_overlap:
            best_prefix, best_overlap = prefix, overlap
    if not best_prefix:
        return state, ""
    return {k[len(best_prefix) :]: v for k, v in state.items()}, best_prefix


def _create(arch: str, **kwargs: Any) -> torch.nn.Module:
    import timm

    from macs_audit.models import architectures  # noqa: F401  (registers the project's models)

    if not timm.is_model(arch):
        raise UsageError(f"unknown architecture {arch!r}; use a timm model name (see timm.list_models())")
    return timm.create_model(arch, pretrained=False, **kwargs)


def _misfit(model: torch.nn.Module, state: dict) -> str:
    """Why `state` does not load into `model`: missing, extra and other-shape keys, counted and named."""
    expected = model.state_dict()
    missing = [k for k in expected if k not in state]
    unexpected = [k for k in state if k not in expected]
    reshaped = [k for k in expected if k in state and tuple(state[k].shape) != tuple(expected[k].shape)]
    parts = []
    if missing:
        parts.append(summarise_keys(missing, "missing"))
    if unexpected:
        parts.append(summarise_keys(unexpected, "extra"))
    if reshaped:
        first = reshaped[0]
        parts.append(
            f"{len(reshaped)} key{'s' * (len(reshaped) != 1)} of another shape ({first}: "
            f"{list(state[first].shape)} in the checkpoint, {list(expected[first].shape)} in the model"
            f"{', ...' if len(reshaped) > 1 else ''})"
        )
    hint = _prefix_hint(missing, unexpected)
    return "; ".join(parts) + (f"; {hint}" if hint else "")


def _prefix_hint(missing: list[str], unexpected: list[str]) -> str:
    """Where every missing key is in the checkpoint under one prefix that some keys lack (a Lightning module
    that also saved its loss's weights): say so, since that prefix is then not stripped."""
    if not missing or not unexpected:
        return ""
    heads = [k.split(".", 1)[0] for k in unexpected if "." in k]
    if not heads:
        return ""
    head = max(set(heads), key=heads.count)
    under = {k[len(head) + 1 :] for k in unexpected if k.startswith(head + ".")}
    others = [k for k in unexpected if not k.startswith(head + ".")]
    if not others or not under.issuperset(missing):
        return ""
    named = ", ".join(others[:3]) + (f" and {len(others) - 3} more" if len(others) > 3 else "")
    return (
        f"every missing key is there under {head + '.'!r}, which was not stripped because {named} "
        f"lack{'s' * (len(others) == 1)} it: save the model's own state dict"
    )


def build_timm_model(
    arch: str, num_classes: int, state_dict: dict | None = None, **model_args: Any
) -> tuple[torch.nn.Module, str]:
    """The timm model `arch` with `num_classes` outputs (and a timm folder's `model_args`) and the weights of
    `state_dict` (strictly), and the wrapper prefix stripped from the checkpoint's keys ("" for none)."""
    model = _create(arch, num_classes=num_classes, **model_args)
    if state_dict is None:
        return model, ""
    return model, load_strictly(model, state_dict, f"{arch} with {num_classes} classes")


def load_strictly(model: torch.nn.Module, state_dict: dict, what: str) -> str:
    """Load `state_dict` into `model` strictly (a shared wrapper prefix stripped), or an InputError naming the
    missing, extra and other-shape keys; the prefix stripped ("" for none)."""
    state, stripped = strip_wrapper_prefix(state_dict, set(model.state_dict()))
    where = f"the checkpoint (its key prefix {stripped!r} stripped)" if stripped else "the checkpoint"
    misfit = _misfit(model, state)
    if misfit:
        raise InputError(f"{where} does not fit {what}: {misfit}")
    try:
        model.load_state_dict(state, strict=True)
    except RuntimeError as exc:
        raise InputError(f"{where} does not fit {what}: {one_line(exc)}") from None
    return stripped


def infer_num_classes(arch: str, state_dict: dict, model_args: dict | None = None) -> int | None:
    """Read the class count off the classifier weight named by timm's pretrained config."""
    try:
        model: Any = _create(arch, **(model_args or {}))
    except UsageError:
        raise
    except Exception:  # an architecture that needs arguments to be built: the class count must be given
        return None
    try:
        classifier = model.pretrained_cfg.get("classifier", "fc")
    except AttributeError:
        classifier = "fc"
    if not isinstance(classifier, str):  # a model with two heads names both; the first is the classifier
        classifier = classifier[0]
    state, _ = strip_wrapper_prefix(state_dict, set(model.state_dict()))
    name = f"{classifier}.weight"
    # Under a prefix not every key shares, the classifier is still found when one key ends with its name.
    candidates = [name] if name in state else [k for k in state if k.endswith("." + name)]
    weight = state[candidates[0]] if len(candidates) == 1 else None
    return int(weight.shape[0]) if weight is not None and weight.ndim == 2 else None


# The project's architectures trained on CIFAR-10 at 32x32 (models/architectures.py): CIFAR-10's mean/std fit them.
CIFAR10_ARCHS = ("macs_resnet9_c10", "macs_resnet9_wide_c10")


def autocast_dtype(precision: str, device: torch.device) -> torch.dtype | None:
    """The autocast dtype of `precision` on `device` (None: fp32, no autocast). Reduced precision is for CUDA:
    on a CPU, or bf16 on a GPU without it, a UsageError (an audit in another precision than asked is not the
    same audit)."""
    if precision not in model_config.PRECISIONS:
        raise UsageError(f"--precision must be one of {', '.join(model_config.PRECISIONS)}, got {precision!r}")
    if precision == "fp32":
        return None
    if device.type != "cuda":
        raise UsageError(f"--precision {precision} runs torch models under CUDA autocast; on {device} use fp32")
    if precision == "bf16" and not torch.cuda.is_bf16_supported():
        raise UsageError(f"--precision bf16: {device} has no bfloat16; use fp16 or fp32")
    return torch.bfloat16 if precision == "bf16" else torch.float16


def check_torch_precision(precision: str, device: str) -> None:
    """`autocast_dtype`'s UsageError for a precision `device` ("auto", "cpu", "cuda:N") cannot audit at."""
    from macs_audit.devices import resolve_device

    autocast_dtype(precision, torch.device(resolve_device(device)))


class TorchPredictor:
    backend = "torch"

    def __init__(
        self,
        path: Path,
        flags: dict[str, Any],
        sidecar: dict[str, Any],
        device: str,
        allow_unsafe_pickle: bool = False,
        debug: bool = False,
        precision: str = "fp32",
    ):
        cfg = model_config.resolve(flags, sidecar, {})
        stripped = ""
        with library_warnings(debug):  # torch.jit.load's deprecation, weights-only notes: --debug shows them
            if is_torchscript(path):
                fmt = "torchscript"
                try:
                    model = torch.jit.load(str(path), map_location="cpu")
                except Exception as exc:
                    raise InputError(f"cannot load TorchScript model {path}: {one_line(exc)}") from None
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
                        cfg.num_classes = infer_num_classes(cfg.arch, state, cfg.model_args)
                    if cfg.num_classes is None:
                        raise UsageError(f"cannot tell the class count of {path}: pass --num-classes")
                    model, stripped = build_timm_model(cfg.arch, cfg.num_classes, state, **(cfg.model_args or {}))
                    cfg.fits_cifar10 = cfg.arch in CIFAR10_ARCHS
        self._setup(model, cfg, path, fmt, device, precision)
        if stripped:
            self.info["checkpoint_prefix_stripped"] = stripped

    @classmethod
    def of_module(
        cls,
        model: torch.nn.Module,
        cfg: model_config.ModelConfig,
        path: Path | None,
        fmt: str,
        device: str,
        precision: str = "fp32",
        hashed: Path | None = None,
    ) -> TorchPredictor:
        """A predictor of a module another source built (Hugging Face, timm folders, torchvision, torch.export,
        OpenCLIP, the Python API's in-memory modules): the same preprocessing, precision, output checks and report
        facts. `hashed`: the file whose sha256 the report records (the weights of a folder), default `path`; a
        module of no file (`path` None) has neither in the report."""
        predictor = cls.__new__(cls)
        predictor._setup(model, cfg, path, fmt, device, precision, hashed)
        return predictor

    def _setup(
        self,
        model: torch.nn.Module,
        cfg: model_config.ModelConfig,
        path: Path | None,
        fmt: str,
        device: str,
        precision: str,
        hashed: Path | None = None,
    ) -> None:
        self.torch_device = torch.device(device)
        self.device = str(self.torch_device)
        amp_dtype = autocast_dtype(precision, self.torch_device)
        self.precision = precision
        self.config = cfg
        self.model = model.to(self.torch_device).eval()
        self.output = OutputAdapter(cfg.output, cfg.num_classes)
        self._normalised: tuple = ()  # the (mean, std) of the tensors `normalisation` made
        self.features: FeatureReader | None = None  # set by models/features.py's enable_features
        # fp32 unless --precision asks for CUDA autocast (bf16 or fp16); the logits are upcast either way.
        self.autocast = amp_dtype is not None
        self.amp_dtype = amp_dtype or torch.bfloat16
        file = hashed or path
        self.info: dict[str, Any] = {
            "path": None if path is None else str(path),
            "format": fmt,
            "backend": self.backend,
            "device": self.device,
            "provider": f"torch {torch.__version__} ({'CUDA' if self.torch_device.type == 'cuda' else 'CPU'})",
            "sha256": None if file is None else file_sha256(file),
            "precision": precision,
        }
        record_warnings(self.info, cfg)

    @property
    def num_classes(self) -> int | None:
        return self.config.num_classes

    def _name(self) -> str:
        """How a message names the model: its file, or its class for a module of no file."""
        return self.info["path"] or f"{type(self.model).__name__} (in memory)"

    def normalisation(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The config's mean and std as (1, C, 1, 1) tensors on the model's device, made again when the config's
        change (a parity pair's side that declares none takes the other's after loading: auditing/parity.py)."""
        cfg = self.config
        if self._normalised != (cfg.mean, cfg.std):
            self.mean = torch.tensor(cfg.mean, device=self.torch_device).view(1, -1, 1, 1)
            self.std = torch.tensor(cfg.std, device=self.torch_device).view(1, -1, 1, 1)
            self._normalised = (cfg.mean, cfg.std)
        return self.mean, self.std

    def forward(self, images: torch.Tensor, amp: bool | None = None) -> torch.Tensor:
        """Differentiable logits of float images in [0,1] (N, C, H, W) on the model's device. Under autocast
        where --precision asked for it, unless `amp=False` (an outer autocast(enabled=False) does not reach in)."""
        mean, std = self.normalisation()
        x = resize_and_normalize(images, self.config.input_size, mean, std, self.config.interpolation)
        with torch.autocast(
            self.torch_device.type, dtype=self.amp_dtype, enabled=self.autocast if amp is None else amp
        ):
            out = self.model(x)
        if not torch.is_tensor(out):
            raise InputError(
                f"the model {self._name()} returned {_describe_output(out)}, not a tensor: its forward must return "
                "one tensor of logits (or probabilities) of shape (batch, classes); save a module that "
                "returns that tensor alone"
            )
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
        except Exception as exc:  # the model's own code raised (RuntimeError, TorchScript's jit.Error, ...)
            raise InputError(
                f"the model {self._name()} failed on a batch of shape {tuple(x.shape)}: {_model_error(exc)}"
            ) from None
        logits = self.output(out.cpu().numpy())
        if self.config.num_classes is None:
            self.config.num_classes = self.output.num_classes = logits.shape[1]
            record_warnings(self.info, self.config)  # the class count is known now
        return logits

    def predict_with_features(self, images) -> tuple[np.ndarray, np.ndarray]:
        """The logits `predict` returns and, recorded in the same forward, the features (N, D) float32 on the CPU
        that models/features.py's enable_features turned on."""
        reader = require_features(self)
        assert reader.recorder is not None  # a torch predictor's features are a module's input
        with reader.recorder.recording():
            logits = self.predict(images)
        return logits, reader.read(reader.recorder.taken(), logits, self.output.kind == "probabilities")


def _describe_output(out: Any) -> str:
    """What a model returned instead of a tensor, for the message: 'a tuple of 2 (Tensor, Tensor)', 'a dict with
    keys 'logits'', 'None'."""
    if out is None:
        return "None"
    if isinstance(out, (tuple, list)):
        kinds = ", ".join(type(v).__name__ for v in out[:3]) + (", ..." if len(out) > 3 else "")
        return f"a {type(out).__name__} of {len(out)} ({kinds})"
    if isinstance(out, dict):
        keys = ", ".join(repr(k) for k in list(out)[:3]) + (", ..." if len(out) > 3 else "")
        return f"a dict with keys {keys}"
    return f"a {type(out).__name__}"


def _model_error(exc: Exception) -> str:
    """The cause of an exception the model raised, in one line. TorchScript wraps it in the interpreter's
    tracebacks (serialized and original code); its last line is the model's own error."""
    text = str(exc)
    if "Traceback of TorchScript" in text:
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        return one_line(lines[-1].removeprefix("builtins."))
    return one_line(exc)
