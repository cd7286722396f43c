"""ONNX models through onnxruntime. Never needs a torch model."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from macs_audit.errors import InputError, UsageError
from macs_audit.models import config as model_config
from macs_audit.models.backend import OutputAdapter, file_sha256, one_line, record_warnings
from macs_audit.models.features import FeatureReader, require_features
from macs_audit.models.preprocessing import resize_and_normalize

# `--provider` names and onnxruntime's: the GPU providers fall back to the ones after them for the operators
# they lack, as onnxruntime does, and to nothing else.
PROVIDERS = {"cpu": "CPUExecutionProvider", "cuda": "CUDAExecutionProvider", "tensorrt": "TensorrtExecutionProvider"}
GPU_PROVIDERS = ("cuda", "tensorrt")


def check_provider(provider: str | None) -> str | None:
    """`provider` as a PROVIDERS key (onnxruntime's name accepted too); None: chosen by the device."""
    if provider is None:
        return None
    by_name = {name.lower(): key for key, name in PROVIDERS.items()}
    key = provider.lower() if provider.lower() in PROVIDERS else by_name.get(provider.lower())
    if key is None:
        raise UsageError(f"unknown provider {provider!r}; choose from {', '.join(PROVIDERS)}")
    return key


def providers_for(device: str, provider: str | None = None) -> list:
    """The providers an InferenceSession is asked for: `provider` (a PROVIDERS key) when given, else CUDA on a
    CUDA device and the CPU otherwise; a GPU provider needs the device of a GPU and an onnxruntime that has it."""
    provider = check_provider(provider) or ("cuda" if device.startswith("cuda") else "cpu")
    if provider == "cpu":
        return ["CPUExecutionProvider"]
    if not device.startswith("cuda"):
        raise UsageError(f"--provider {provider} runs on a GPU: use --device cuda[:N] (this device is {device})")
    import onnxruntime as ort

    available = ort.get_available_providers()
    if PROVIDERS[provider] not in available:
        raise InputError(f"this onnxruntime has no {PROVIDERS[provider]} (it has {', '.join(available)})")
    if hasattr(ort, "preload_dlls"):  # CUDA/cuDNN from the torch wheels (onnxruntime-gpu >= 1.21)
        ort.preload_dlls()
    options = {"device_id": int(device.split(":")[1]) if ":" in device else 0}
    chain = [(PROVIDERS[provider], options)]
    if provider == "tensorrt":
        chain.append((PROVIDERS["cuda"], options))
    return [*chain, "CPUExecutionProvider"]


def external_data(path: Path) -> list[str]:
    """The files beside an ONNX model that hold its weights (ONNX "external data", as `torch.onnx.export`
    writes for large models: MODEL.onnx.data), as the model names them (relative to its folder); [] when it
    names none or cannot be parsed."""
    try:
        import onnx

        proto = onnx.load(str(path), load_external_data=False)
    except Exception:  # a damaged file: onnxruntime's message says so
        return []
    locations: list[str] = []

    def tensors(graph: Any) -> Any:
        yield from graph.initializer
        for node in graph.node:
            for attribute in node.attribute:
                if attribute.HasField("t"):
                    yield attribute.t
                yield from attribute.tensors
                if attribute.HasField("g"):
                    yield from tensors(attribute.g)
                for subgraph in attribute.graphs:
                    yield from tensors(subgraph)

    for tensor in tensors(proto.graph):
        if tensor.data_location == onnx.TensorProto.EXTERNAL:
            location = next((e.value for e in tensor.external_data if e.key == "location"), None)
            if location and location not in locations:
                locations.append(location)
    return locations


def missing_external_data(path: Path) -> list[str]:
    """The model's external data files (`external_data`) that are not beside it."""
    return [loc for loc in external_data(path) if not (path.parent / loc).is_file()]


def _load_error(path: Path, exc: Exception) -> InputError:
    missing = missing_external_data(path)
    if missing:
        files = ", ".join(missing)
        return InputError(
            f"cannot load ONNX model {path}: its weights are stored in {files} beside it, and "
            f"{'that file is' if len(missing) == 1 else 'those files are'} missing; keep {missing[0]} "
            f"next to {path.name} in the same folder (copy or move them together)"
        )
    return InputError(f"cannot load ONNX model {path}: {one_line(exc)}")


class OnnxPredictor:
    backend = "onnxruntime"

    def __init__(
        self, path: Path, flags: dict[str, Any], sidecar: dict[str, Any], device: str, provider: str | None = None
    ):
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.log_severity_level = 3  # errors only; we report failures ourselves
        # Idle worker threads sleep instead of spinning: between runs the audit's own numpy and torch work needs
        # the cores (on 2 cores the default audit ran 3% faster in wall time and used 6% less CPU).
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        threads = os.environ.get("OMP_NUM_THREADS", "")
        if threads.isdigit() and int(threads) > 0:  # onnxruntime ignores it; torchrun sets 1 per process
            options.intra_op_num_threads = int(threads)
        providers = providers_for(device, provider)
        try:
            session = ort.InferenceSession(str(path), sess_options=options, providers=providers)
        except Exception as exc:  # onnxruntime raises its own exception types for bad files
            raise _load_error(path, exc) from None
        asked = providers[0][0] if isinstance(providers[0], tuple) else providers[0]
        if session.get_providers()[0] != asked:
            raise InputError(
                f"onnxruntime could not use {asked} for {path} (got {session.get_providers()[0]}); "
                "check the CUDA 13 / cuDNN 9 (and TensorRT) libraries or use --device cpu"
            )
        self._setup(session, path, flags, sidecar, device)

    @classmethod
    def of_session(cls, session: Any, flags: dict[str, Any], device: str, fmt: str) -> OnnxPredictor:
        """A predictor of a session the caller made (the Python API's in-memory models), on its own providers
        (`device`: where they run): no file, so no path or sha256 in the report; `fmt` the report's format."""
        predictor = cls.__new__(cls)
        predictor._setup(session, None, flags, {}, device, fmt)
        return predictor

    def _setup(
        self,
        session: Any,
        path: Path | None,
        flags: dict[str, Any],
        sidecar: dict[str, Any],
        device: str,
        fmt: str = "onnx",
    ) -> None:
        self.session = session
        where = "the ONNX session" if path is None else str(path)  # what a message names
        provider = session.get_providers()[0]
        metadata = model_config.parse_metadata(session.get_modelmeta().custom_metadata_map)
        inputs = session.get_inputs()
        if len(inputs) != 1:
            raise InputError(f"{where}: expected a model with one image input, found {len(inputs)} inputs")
        self.input_name = inputs[0].name
        shape = inputs[0].shape
        if len(shape) != 4:
            raise InputError(f"{where}: expected an (N, C, H, W) image input, found shape {shape}")
        # A static batch dimension (torch.onnx.export's default is the example's batch, often 1): the images
        # are run in chunks of that size, the last one padded, and the report says so.
        self.static_batch = shape[0] if isinstance(shape[0], int) and shape[0] > 0 else None
        # A static spatial size in the graph is the truth unless a flag or sidecar contradicts it.
        static_hw = tuple(shape[2:]) if all(isinstance(d, int) for d in shape[2:]) else None
        if static_hw and "input_size" not in metadata:
            metadata["input_size"] = list(static_hw)
        self.output_name = session.get_outputs()[0].name  # the logits; models/features.py may add an output
        self.features: FeatureReader | None = None  # set by models/features.py's enable_features
        out_shape = session.get_outputs()[0].shape
        if len(out_shape) == 2 and isinstance(out_shape[1], int) and "num_classes" not in metadata:
            metadata["num_classes"] = out_shape[1]
        self.config = model_config.resolve(flags, sidecar, metadata)
        # A graph whose own shapes are CIFAR-10's (a static 32x32 input, 10 outputs) is taken to be a CIFAR-10
        # classifier: its defaulted mean/std go without a warning. Any other model without them is warned (#27).
        self.config.fits_cifar10 = static_hw == (32, 32) and out_shape[-1] == 10
        if static_hw and static_hw != self.config.input_size:
            raise InputError(
                f"{where}: the model's input is {static_hw[0]}x{static_hw[1]} but the input size "
                f"is set to {self.config.input_size[0]}x{self.config.input_size[1]}"
            )
        if isinstance(out_shape[-1], int) and self.config.num_classes not in (None, out_shape[-1]):
            raise InputError(
                f"{where}: the model has {out_shape[-1]} outputs but --num-classes is {self.config.num_classes}"
            )
        self.output = OutputAdapter(self.config.output, self.config.num_classes)
        self.device = "cpu" if provider == "CPUExecutionProvider" else device  # where it runs, and so its views
        self.info: dict[str, Any] = {
            "path": None if path is None else str(path),
            "format": fmt,
            "backend": self.backend,
            "device": self.device,
            "provider": provider,
            "sha256": None if path is None else file_sha256(path),
        }
        self._record_warnings()

    def _record_warnings(self) -> None:
        record_warnings(self.info, self.config)
        if self.static_batch is not None:
            self.info.setdefault("warnings", []).append(
                f"the ONNX input has a static batch of {self.static_batch}: run {self.static_batch} image"
                f"{'s' * (self.static_batch != 1)} at a time, whatever --batch-size says (re-export with a "
                "dynamic batch, `macs-audit export`, for speed)"
            )

    @property
    def num_classes(self) -> int | None:
        return self.config.num_classes

    def predict(self, images: np.ndarray) -> np.ndarray:
        return self._predict(images, [])[0]

    def predict_with_features(self, images: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The logits `predict` returns and, from the same run, the features (N, D) float32 that
        models/features.py's enable_features turned on."""
        reader = require_features(self)
        logits, features = self._predict(images, [reader.output])
        return logits, reader.read(features, logits, self.output.kind == "probabilities")

    def _predict(self, images: np.ndarray, extra: list) -> list[np.ndarray]:
        """The logits of `images` and the graph's `extra` outputs of the same run."""
        cfg = self.config
        x = resize_and_normalize(
            np.asarray(images, dtype=np.float32), cfg.input_size, cfg.mean, cfg.std, cfg.interpolation
        )
        try:
            out, *others = self._run(x, [self.output_name, *extra])
        except Exception as exc:
            raise InputError(f"onnxruntime failed on a batch of shape {x.shape}: {one_line(exc)}") from None
        logits = self.output(out)
        if self.config.num_classes is None:
            self.config.num_classes = self.output.num_classes = logits.shape[1]
            self._record_warnings()  # the class count is known now
        return [logits, *others]

    def _run(self, x: np.ndarray, names: list[str]) -> list[np.ndarray]:
        """The graph's outputs `names` for the batch `x`, in chunks of the static batch size where the graph has one."""
        size = self.static_batch
        if size is None or len(x) == size:
            return self.session.run(names, {self.input_name: x})
        outputs = []
        for start in range(0, len(x), size):
            chunk = x[start : start + size]
            short = size - len(chunk)
            if short:  # the last chunk: padded with copies of its last image, their outputs dropped
                chunk = np.concatenate([chunk, np.repeat(chunk[-1:], short, axis=0)])
            outputs.append([out[: size - short] for out in self.session.run(names, {self.input_name: chunk})])
        return [np.concatenate(parts) for parts in zip(*outputs, strict=True)]
