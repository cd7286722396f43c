"""What a model argument is, told by the path itself and the --arch prefix, before any heavy library loads.

- a file `.onnx`: onnxruntime; `.pt2`: a torch.export program; any other torch suffix: TorchScript, a pickled
  module, or a state dict (with a timm `--arch`, or `--arch torchvision:NAME`, `--arch open_clip:NAME`, or
  `--arch hf-hub:ORG/NAME` for a timm hub architecture whose config is in the local Hugging Face cache);
- a folder with `config.json`: a timm `save_for_hf` folder (its config names an `architecture`) or a Hugging
  Face transformers `save_pretrained` folder (its config names a `model_type`);
- `hf-hub:ORG/NAME` as the model itself: that repository's folder in the local Hugging Face cache, read as
  the folder it is. Nothing is ever downloaded: a repository not in the cache is an error that says so.

The libraries a source needs beyond the base install are optional extras (`require` names the extra).
"""

from __future__ import annotations

import dataclasses
import importlib
from pathlib import Path
from types import ModuleType
from typing import Any

from macs_audit.errors import InputError, UsageError
from macs_audit.files import file_error, read_small_json

TORCHVISION_PREFIX, OPEN_CLIP_PREFIX, HF_HUB_PREFIX = "torchvision:", "open_clip:", "hf-hub:"
# The kinds of model source, as the report's model.format names them.
HF_TRANSFORMERS, TIMM_FOLDER, TORCH_EXPORT = "hf-transformers", "timm-folder", "torch-export"
TORCHVISION, OPEN_CLIP = "torchvision", "open-clip"
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")  # what save_pretrained and save_for_hf write
SHARDED_INDEX = "model.safetensors.index.json"
# The largest JSON file a model comes with that is read (config.json, preprocessor_config.json, a sidecar,
# --class-prompts): read whole into memory, it is bounded first. An id2label of a million classes is about 30 MB.
MAX_JSON_BYTES = 64 * 2**20
MODEL_JSON = "a model's JSON file"  # what a file over that limit is not, in the message


@dataclasses.dataclass(frozen=True)
class ModelSource:
    kind: str  # "file" (ONNX and the torch files load_predictor has always read), or one of the kinds above
    path: Path  # the file or folder read
    name: str | None = None  # torchvision builder or OpenCLIP model name (from --arch)
    config_folder: Path | None = None  # --arch hf-hub: the cached folder whose config.json gives the architecture


@dataclasses.dataclass(frozen=True)
class LoadSettings:
    """What every source's loader takes beside the source: the command line's ModelConfig keys (`flags`) and the
    sidecar's, the device, the CUDA autocast precision, and whether the libraries' own warnings show (--debug)."""

    flags: dict[str, Any]
    sidecar: dict[str, Any]
    device: str
    precision: str
    debug: bool


def require(module: str, extra: str) -> ModuleType:
    """Import `module`, or an InputError naming the optional extra that installs it."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise InputError(
            f"this model needs {module}, which is not installed: pip install 'macs-audit[{extra}]'"
        ) from None


def read_json_object(path: Path, named: str = "", holds: str = "") -> dict[str, Any]:
    """The JSON object a model's file holds (read up to MAX_JSON_BYTES, macs_audit.files), or an error naming
    the file (`named`, the option that named it, before its path: a usage error; else an input error) and
    saying what it should hold (`holds`, after "a JSON object")."""
    data = read_small_json(Path(path), MAX_JSON_BYTES, option=named, holds=MODEL_JSON)
    if not isinstance(data, dict):
        shown = f"{named} {path}" if named else str(path)
        raise file_error(named)(f"{shown} must hold a JSON object{f' {holds}' if holds else ''}")
    return data


def read_folder_config(folder: Path) -> dict[str, Any]:
    """A model folder's config.json as a dict, or an InputError saying what is wrong with it."""
    return read_json_object(folder / "config.json", holds="(a model's configuration)")


def folder_kind(folder: Path) -> str:
    """HF_TRANSFORMERS or TIMM_FOLDER, by what the folder's config.json says; an InputError for a folder that
    is neither (no config.json, a config.json of something else)."""
    if not (folder / "config.json").is_file():
        raise InputError(
            f"{folder} is a folder without config.json: a model folder is a Hugging Face save_pretrained or timm "
            "save_for_hf folder (config.json beside model.safetensors)"
        )
    config = read_folder_config(folder)
    if isinstance(config.get("architecture"), str):
        return TIMM_FOLDER
    if isinstance(config.get("model_type"), str):
        return HF_TRANSFORMERS
    raise InputError(
        f"{folder / 'config.json'} is not a model's configuration: it names neither a timm architecture "
        "('architecture') nor a Hugging Face model_type"
    )


def weights_file(folder: Path) -> Path:
    """The weights save_pretrained / save_for_hf wrote in `folder`, or an InputError naming what is missing."""
    for name in (*WEIGHT_FILES, SHARDED_INDEX):
        if (folder / name).is_file():
            return folder / name
    raise InputError(
        f"{folder} has a config.json but no weights: expected {' or '.join(WEIGHT_FILES)} beside it "
        "(copy the whole folder save_pretrained or save_for_hf wrote)"
    )


def cached_hub_folder(name: str) -> Path:
    """The local Hugging Face cache's snapshot of `ORG/NAME` (offline; never a download)."""
    repo = name.removeprefix(HF_HUB_PREFIX)
    if repo.count("/") != 1 or not all(repo.split("/")):
        raise UsageError(f"{HF_HUB_PREFIX}{repo} must name a repository as {HF_HUB_PREFIX}ORG/NAME")
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HFValidationError

    try:
        folder = snapshot_download(repo, local_files_only=True)
    except HFValidationError as exc:
        raise UsageError(f"{HF_HUB_PREFIX}{repo}: not a valid repository name ({exc})") from None
    except Exception:  # LocalEntryNotFoundError and friends: nothing cached for it
        raise InputError(
            f"{HF_HUB_PREFIX}{repo} is not in the local Hugging Face cache (HF_HOME / HF_HUB_CACHE), and models are "
            "never downloaded: download it first (huggingface-cli download " + repo + "), or pass its folder"
        ) from None
    return Path(folder)


def resolve_source(model: str | Path, arch: str | None) -> ModelSource:
    """What `model` (the command's MODEL argument) and `arch` (--arch) name; raises for a path that is not there."""
    text = str(model)
    if text.startswith(HF_HUB_PREFIX) and not Path(text).exists():
        folder = cached_hub_folder(text)
        return ModelSource(folder_kind(folder), folder)
    path = Path(model)
    if path.is_dir():
        if arch:
            raise UsageError(f"{path} is a model folder, which names its own architecture: drop --arch {arch}")
        return ModelSource(folder_kind(path), path)
    if path.suffix.lower() == ".pt2" and path.is_file():
        return ModelSource(TORCH_EXPORT, path)
    if arch and path.is_file():
        for prefix, kind in ((TORCHVISION_PREFIX, TORCHVISION), (OPEN_CLIP_PREFIX, OPEN_CLIP)):
            if arch.startswith(prefix):
                name = arch[len(prefix) :].strip()
                if not name:
                    raise UsageError(f"--arch {arch} names no model: use {prefix}NAME")
                return ModelSource(kind, path, name=name)
        if arch.startswith(HF_HUB_PREFIX):
            folder = cached_hub_folder(arch)
            if folder_kind(folder) != TIMM_FOLDER:
                raise InputError(f"--arch {arch}: the cached repository is not a timm model (its config.json)")
            return ModelSource(TIMM_FOLDER, path, config_folder=folder)
    return ModelSource("file", path)
