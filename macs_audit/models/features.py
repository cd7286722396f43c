"""The penultimate features of a classifier: the input of its final linear layer, with that layer's weight and
bias, read in the same pass as the logits (no second inference).

`enable_features(predictor, layer=None)` turns them on for a loaded predictor and returns the `FeatureHead`
(weight (K, D), bias (K,) or None, where they were found); afterwards `predictor.predict_with_features(images)`
returns the logits `predictor.predict(images)` returns and the features (N, D) float32, on the CPU.

Where they are found, by source:
- torch modules (timm, torchvision, Hugging Face, the package's architectures, pickled modules): a forward
  pre-hook on the classifier module records its input while the ordinary forward runs, so the logits are the
  very ones `predict` computes. The classifier is the `--feature-layer` module, else the module's own
  `feature_head()` (a model whose logits are more than its last Linear: the package's ResNet-9 scales them,
  OpenCLIP's zero-shot head is the class text embeddings), else timm's `get_classifier()` (whose input is what
  `forward_head(pre_logits=True)` returns), else the first Linear of `CLASSIFIER_NAMES` (a Sequential: its last
  module; a model that is a Sequential: its last). The module must be an `nn.Linear`.
- ONNX: graph surgery. Walking back from the logits output (through a final Softmax, Identity, and Mul, Div, Add,
  Sub by constants) to the Gemm or MatMul with a constant weight that makes them; its input becomes an extra
  graph output, and the weight and bias are read from the initializers with the constant steps folded in. A
  graph `macs-audit export` wrote has its `FEATURES_OUTPUT` already: it is used as it is.
- TorchScript and torch.export programs keep no classifier module to hook: an InputError says what to do.

The first batch checks that W f + b gives the logits (`TOLERANCE`); a layer that does not is refused, since
the feature-space detectors that read the head (ViM, ReAct) would be wrong without a word.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from macs_audit.errors import InputError, UsageError
from macs_audit.models.calibration_map import CALIBRATION_METADATA_KEY

FEATURES_OUTPUT = "features"  # the ONNX output `macs-audit export` writes beside the logits
FEATURE_LAYER_OPTION = "--feature-layer"
# Module names tried, in order, where neither the model nor timm names its classifier (torchvision's ResNets,
# RegNets and GoogLeNet have `fc`; VGG, AlexNet, MobileNets, EfficientNets, ConvNeXt and DenseNet `classifier`;
# ViT `heads.head`; Swin `head`; a Hugging Face classifier, wrapped by models/huggingface.py, `inner.classifier`).
CLASSIFIER_NAMES = ("fc", "classifier", "heads.head", "head", "inner.classifier")
# How far W f + b may lie from the logits on the first batch, as a fraction of the largest logit (at least 1):
# float32 on a CPU differs by about 1e-6; TF32 matrix products on a GPU and the reduced precisions by more. A
# wrong layer, or a scale left out, is off by a large part of the logits.
TOLERANCE = {"fp32": 1e-3, "bf16": 5e-2, "fp16": 2e-2}
# ONNX steps between the classifier and the logits output that keep the logits an affine map of the features.
_ELEMENTWISE = ("Mul", "Div", "Add", "Sub")
_RESHAPES = ("Identity", "Flatten", "Reshape", "Squeeze")  # between a named features tensor and the classifier


@dataclasses.dataclass(frozen=True)
class FeatureHead:
    """The final linear layer: logits = features @ weight.T + bias."""

    weight: np.ndarray  # (K, D) float64
    bias: np.ndarray | None  # (K,) float64
    layer: str  # the layer whose input the features are: a module name (torch), a node or tensor name (ONNX)
    source: str  # how it was found, for the report

    def logits(self, features: np.ndarray) -> np.ndarray:
        """W f + b of features (N, D), float64."""
        out = np.asarray(features, dtype=np.float64) @ self.weight.T
        return out if self.bias is None else out + self.bias


class FeaturePredictor(Protocol):
    """A predictor (models/predictor.Predictor) that `enable_features` has turned features on for."""

    features: FeatureReader | None

    def predict(self, images: np.ndarray) -> np.ndarray: ...

    def predict_with_features(self, images: Any) -> tuple[np.ndarray, np.ndarray]: ...


class ModuleInput:
    """Records the input of one torch module in each forward run under `recording()`."""

    def __init__(self, module: Any, layer: str, where: str):
        self.layer, self.where = layer, where
        self._on = False
        self._taken: list = []
        self._handle = module.register_forward_pre_hook(self._record)

    def _record(self, _module: Any, args: tuple) -> None:
        if self._on and args:
            self._taken.append(args[0])

    def remove(self) -> None:
        self._handle.remove()

    @contextlib.contextmanager
    def recording(self) -> Iterator[None]:
        self._on, self._taken = True, []
        try:
            yield
        finally:
            self._on = False

    def taken(self) -> Any:
        """The module's input in the forward just recorded (a tensor), or an InputError where it did not run once."""
        taken, self._taken = self._taken, []
        if len(taken) != 1:
            raise InputError(
                f"the layer {self.layer!r} of {self.where} ran {len(taken)} times in one forward, not once: "
                f"give {FEATURE_LAYER_OPTION} NAME of the layer that maps the features to the logits"
            )
        return taken[0]


class FeatureReader:
    """What a predictor holds once features are on: the head, where the features come from (the ONNX output
    `output`, or the torch module input `recorder`), and the check of the first batch. `normalised`: the model
    ends in a (log-)softmax, so the logits are W f + b up to a constant a row."""

    def __init__(
        self,
        head: FeatureHead,
        tolerance: float,
        where: str,
        output: str | None = None,
        recorder: ModuleInput | None = None,
        normalised: bool = False,
    ):
        self.head, self.tolerance, self.where = head, tolerance, where
        self.output, self.recorder, self.normalised = output, recorder, normalised
        self.checked = False

    def remove(self) -> None:
        """Stop recording (another layer replaces this one)."""
        if self.recorder is not None:
            self.recorder.remove()

    def read(self, features: Any, logits: np.ndarray, probabilities: bool) -> np.ndarray:
        """`features` (a batch's, numpy or a tensor) as (N, D) float32 on the CPU; the first batch is checked against
        the `logits` the predictor returned (log-probabilities where the model outputs `probabilities`)."""
        if not isinstance(features, np.ndarray):  # a tensor, on the model's device, in its autocast dtype
            features = features.detach().float().cpu().numpy()
        features = np.asarray(features, dtype=np.float32).reshape(len(logits), -1)
        if not self.checked:
            normalised = self.normalised or probabilities
            check_head(self.head, features, logits, normalised, self.tolerance, self.where)
            self.checked = True
        return features


def check_head(
    head: FeatureHead, features: np.ndarray, logits: np.ndarray, normalised: bool, tolerance: float, where: str
) -> None:
    """InputError where W f + b is not the logits: off by more than `tolerance` times the largest logit (at least 1);
    where the model's output is `normalised` (probabilities, or a final softmax or log-softmax), softmax(W f + b)
    against softmax(logits), off by more than `tolerance`."""
    if features.shape[1] != head.weight.shape[1]:
        raise InputError(
            f"the input of {head.layer!r} in {where} has {features.shape[1]} values per image but its weight takes "
            f"{head.weight.shape[1]}: give {FEATURE_LAYER_OPTION} NAME of the layer that maps them to the logits"
        )
    if not np.isfinite(features).all():
        raise InputError(f"the features of {where} (the input of {head.layer!r}) hold NaN or infinite values")
    got, want = head.logits(features), logits.astype(np.float64)
    if normalised:
        got, want, scale = _softmax(got), _softmax(want), 1.0
    else:
        scale = max(1.0, float(np.abs(want).max()))
    off = float(np.abs(got - want).max())
    if off > tolerance * scale:
        what = "the probabilities" if normalised else "the logits"
        raise InputError(
            f"the logits of {where} are not a linear map of the input of {head.layer!r}: W f + b misses {what} by "
            f"{off:.3g} (allowed {tolerance * scale:.3g}); give {FEATURE_LAYER_OPTION} NAME of its final linear layer"
        )


def _softmax(z: np.ndarray) -> np.ndarray:
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def enable_features(predictor: Any, layer: str | None = None) -> FeatureHead:
    """Turn on feature output for a loaded predictor (ONNX or torch) and return its final layer's FeatureHead.
    `layer` names the layer whose input the features are (a module name for torch, a node or tensor name for
    ONNX) where the automatic search fails. InputError (one line) for a model with no such layer, a layer that is
    not a linear map of the features, TorchScript and torch.export programs."""
    backend = getattr(predictor, "backend", None)
    if backend == "onnxruntime":
        reader = _enable_onnx(predictor, layer)
    elif backend == "torch":
        reader = _enable_torch(predictor, layer)
    else:
        raise InputError(f"features are read from ONNX and torch models; this predictor is {type(predictor).__name__}")
    previous = getattr(predictor, "features", None)
    if previous is not None:
        previous.remove()
    predictor.features = reader
    return reader.head


def require_features(predictor: Any) -> FeatureReader:
    """The predictor's FeatureReader, or a UsageError where enable_features has not run."""
    reader = getattr(predictor, "features", None)
    if reader is None:
        raise UsageError("features are off: call macs_audit.models.features.enable_features(predictor) first")
    return reader


# torch ----------------------------------------------------------------------------------------------------------


def _name(predictor: Any) -> str:
    return predictor.info.get("path") or f"{type(getattr(predictor, 'model', predictor)).__name__} (in memory)"


def _enable_torch(predictor: Any, layer: str | None) -> FeatureReader:
    fmt, where = predictor.info.get("format"), _name(predictor)
    if fmt == "torchscript":
        raise InputError(
            f"{where} is TorchScript, whose layers cannot be hooked for features: save the module's state dict and "
            "evaluate it with --arch, or `macs-audit export` that checkpoint to ONNX (it writes a `features` output, "
            "which evaluate reads)"
        )
    if fmt == "torch-export":
        raise InputError(
            f"{where} is a torch.export program, which keeps no classifier module to read features from: evaluate "
            "the module it was exported from (its state dict with --arch), or `macs-audit export` that checkpoint to "
            "ONNX (it writes a `features` output, which evaluate reads)"
        )
    name, module, head = torch_head(predictor.model, layer, where)
    tolerance = TOLERANCE.get(getattr(predictor, "precision", "fp32"), TOLERANCE["fp32"])
    return FeatureReader(head, tolerance, where, recorder=ModuleInput(module, name, where))


def torch_head(model: Any, layer: str | None = None, where: str | None = None) -> tuple[str, Any, FeatureHead]:
    """(name, module, head) of `model`'s final linear layer: `layer` (a module name), else the module's own
    `feature_head()`, else timm's `get_classifier()`, else the first Linear of CLASSIFIER_NAMES (a Sequential: its
    last module; the model itself where it is a Sequential). The features are the named module's input.
    InputError (one line) where none is found or the layer is not an nn.Linear."""
    import torch

    where = where or f"{type(model).__name__}"
    own = model.feature_head() if callable(getattr(model, "feature_head", None)) else None
    if own is not None and layer in (None, own[0]):
        name, weight, bias = own
        source = f"{type(model).__name__}.feature_head(): the input of {name!r}"
        return name, model.get_submodule(name), _head(weight, bias, name, source)
    if layer is not None:
        try:
            module = model.get_submodule(layer)
        except AttributeError:
            linears = [n for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)][-3:]
            known = f" (its last Linear layers: {', '.join(linears)})" if linears else ""
            raise InputError(f"{FEATURE_LAYER_OPTION} {layer}: {where} has no module of that name{known}") from None
        return layer, module, _linear_head(module, layer, f"forward hook on the input of {layer!r}", where)
    if callable(getattr(model, "get_classifier", None)):
        classifier = model.get_classifier()
        name = next((n for n, m in model.named_modules() if m is classifier), None)
        if name is None or not isinstance(classifier, torch.nn.Linear):
            what = "no module of the model" if name is None else f"a {type(classifier).__name__}"
            raise InputError(
                f"timm's get_classifier() of {where} is {what}, not one Linear layer: give "
                f"{FEATURE_LAYER_OPTION} NAME of the module whose input are the features"
            )
        source = f"timm get_classifier() {name!r}: its input, as forward_head(pre_logits=True) returns it"
        return name, classifier, _linear_head(classifier, name, source, where)
    for candidate in ("", *CLASSIFIER_NAMES):  # "": the model itself, where it is a Sequential
        try:
            module = model.get_submodule(candidate)
        except AttributeError:
            continue
        name = candidate
        while isinstance(module, torch.nn.Sequential) and len(module):
            name, module = f"{name}.{len(module) - 1}".lstrip("."), module[-1]
        if isinstance(module, torch.nn.Linear):
            return name, module, _linear_head(module, name, f"forward hook on the input of {name!r}", where)
    looked = "timm's get_classifier(), a feature_head(), or a Linear module named " + ", ".join(CLASSIFIER_NAMES)
    raise InputError(
        f"cannot find the final linear layer of {where} (looked for {looked}, or last in the model or in such a "
        f"Sequential): give {FEATURE_LAYER_OPTION} NAME of the module whose input are the features"
    )


def _linear_head(module: Any, name: str, source: str, where: str) -> FeatureHead:
    import torch

    if not isinstance(module, torch.nn.Linear):
        raise InputError(
            f"{FEATURE_LAYER_OPTION} {name}: that module of {where} is a {type(module).__name__}, not a Linear layer, "
            "so the logits are not a linear map of its input; name the final Linear layer"
        )
    return _head(module.weight, module.bias, name, source)


def _head(weight: Any, bias: Any, layer: str, source: str) -> FeatureHead:
    def array(t: Any) -> np.ndarray | None:
        return None if t is None else t.detach().cpu().double().numpy()

    return FeatureHead(array(weight), array(bias), layer, source)  # type: ignore[arg-type]


def features_module(model: Any, layer: str) -> Any:
    """A module whose forward returns (logits, features) of `model`, the features the input of its module `layer`
    flattened to (N, D): what `macs-audit export` traces, so the ONNX file carries FEATURES_OUTPUT."""
    import torch

    class WithFeatures(torch.nn.Module):
        def __init__(self, inner: torch.nn.Module):
            super().__init__()
            self.inner = inner
            self.recorder = ModuleInput(inner.get_submodule(layer), layer, type(inner).__name__)

        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            with self.recorder.recording():
                logits = self.inner(x)
            return logits, self.recorder.taken().flatten(1)

    return WithFeatures(model).eval()


# ONNX -----------------------------------------------------------------------------------------------------------


def _enable_onnx(predictor: Any, layer: str | None) -> FeatureReader:
    import onnx

    path = predictor.info.get("path")
    if path is None:
        raise InputError(
            "features of an in-memory ONNX session need its graph, which onnxruntime does not give back: pass the "
            "model file's path instead"
        )
    try:
        proto = onnx.load(str(path), load_external_data=False)
    except Exception as exc:
        raise InputError(f"cannot read the ONNX graph of {path} for features: {exc}") from None
    found = onnx_head(proto, layer, Path(path).parent, str(path))
    if found.added:
        predictor.session = _session_with_output(predictor.session, proto, Path(path))
    tolerance = TOLERANCE[found.precision]
    return FeatureReader(found.head, tolerance, str(path), output=found.output, normalised=found.normalised)


def _session_with_output(session: Any, proto: Any, path: Path) -> Any:
    """A session of the modified `proto` with the options and providers of `session`."""
    import onnxruntime as ort

    options = session.get_session_options()
    if _has_external_data(proto):  # built from bytes: say where the weights' files are
        options.add_session_config_entry("session.model_external_initializers_file_folder_path", str(path.parent))
    providers, provider_options = session.get_providers(), session.get_provider_options()
    try:
        return ort.InferenceSession(
            proto.SerializeToString(),
            sess_options=options,
            providers=providers,
            provider_options=[provider_options.get(p, {}) for p in providers],
        )
    except Exception as exc:
        raise InputError(f"cannot run {path} with its features output: {exc}") from None


def _has_external_data(proto: Any) -> bool:
    import onnx

    return any(t.data_location == onnx.TensorProto.EXTERNAL for t in proto.graph.initializer)


class _Graph:
    """An ONNX graph's producers, consumers and constants (initializers and Constant nodes)."""

    def __init__(self, graph: Any, folder: Path):
        from onnx import numpy_helper

        self.producer = {out: node for node in graph.node for out in node.output}
        self.nodes = {node.name: node for node in graph.node if node.name}
        self.tensors = {t.name: t for t in graph.initializer}
        self.folder, self.numpy_helper = folder, numpy_helper

    def constant(self, name: str) -> np.ndarray | None:
        """The value of tensor `name` where it is constant, else None."""
        if name in self.tensors:
            return self.numpy_helper.to_array(self.tensors[name], base_dir=str(self.folder))
        node = self.producer.get(name)
        if node is not None and node.op_type == "Constant":
            import onnx

            for attribute in node.attribute:
                if attribute.name == "value":
                    return self.numpy_helper.to_array(attribute.t)
                if attribute.name in ("value_float", "value_floats"):
                    return np.asarray(onnx.helper.get_attribute_value(attribute), dtype=np.float32)
        return None

    @staticmethod
    def attribute(node: Any, name: str, default: Any) -> Any:
        import onnx

        found = [a for a in node.attribute if a.name == name]
        return onnx.helper.get_attribute_value(found[0]) if found else default


@dataclasses.dataclass(frozen=True)
class OnnxHead:
    """What `onnx_head` found: the head, the graph output that carries the features (and whether it was added to
    the graph), whether a softmax or log-softmax ends the graph, and the precision of its weight."""

    head: FeatureHead
    output: str
    added: bool
    normalised: bool
    precision: str  # a TOLERANCE key


def onnx_head(
    proto: Any, layer: str | None = None, folder: Path = Path("."), where: str = "the ONNX model"
) -> OnnxHead:
    """The final linear layer of the ONNX model `proto`, found by walking back from its logits (its first output)
    through a final Softmax or LogSoftmax, reshapes, casts and elementwise steps by constants to the Gemm or MatMul
    with a constant weight that makes them; every step is folded into the head. The features are that node's
    input, or where a target is named (the tensor or the input of the node `layer`; else FEATURES_OUTPUT where the
    graph has it, as `macs-audit export` writes it) the target, reached through further such steps and layers.
    A classifier's input that is not an output yet is added to `proto`'s outputs. `folder` holds the model's
    external data. InputError (one line) where the walk fails."""
    graph = _Graph(proto.graph, folder)
    outputs = [o.name for o in proto.graph.output]
    target = layer if layer is not None else (FEATURES_OUTPUT if FEATURES_OUTPUT in outputs[1:] else None)
    named = graph.nodes.get(layer) if layer is not None else None
    if named is not None:  # a node's name: its input is the features
        if named.op_type not in ("Gemm", "MatMul"):
            raise InputError(
                f"{FEATURE_LAYER_OPTION} {layer}: that node of {where} is a {named.op_type}, not a Gemm or MatMul, so "
                "the logits are not a linear map of its input; name the final Gemm or MatMul"
            )
        target = named.input[0]
    elif layer is not None and layer not in graph.producer and layer not in {i.name for i in proto.graph.input}:
        raise InputError(f"{FEATURE_LAYER_OPTION} {layer}: {where} has no node or tensor of that name")
    calibration = next((p.value for p in proto.metadata_props if p.key == CALIBRATION_METADATA_KEY), "{}")
    try:
        calibrated = json.loads(calibration).get("method") == "matrix"
    except (ValueError, AttributeError):  # a record not macs-audit's
        calibrated = False
    walk = _Walk(graph, outputs[0], where)
    walk.run(target, calibrated)
    if named is not None and named not in walk.layers:
        raise InputError(
            f"{FEATURE_LAYER_OPTION} {layer}: the logits of {where} are not a linear map of that node's input; name "
            "the final Gemm or MatMul"
        )
    classifier = walk.layers[-1]
    features = walk.name
    weight, bias = walk.affine()
    source = f"ONNX: the input of {_described(classifier)}"
    if features != classifier.input[0]:
        source += f", up to a reshape or factor ({features!r})"
    if len(walk.layers) > 1:
        source += f", and {len(walk.layers) - 1} linear layer(s) after it"
    head = FeatureHead(weight, bias if np.any(bias) else None, layer or features, source)
    if features in outputs:
        return OnnxHead(head, features, False, walk.normalised, walk.precision)
    import onnx

    proto.graph.output.append(onnx.helper.make_empty_tensor_value_info(features))
    return OnnxHead(head, features, True, walk.normalised, walk.precision)


def _described(node: Any) -> str:
    """'Gemm node 'fc'', or 'the Gemm node of 'z'' for a node without a name."""
    return f"{node.op_type} node {node.name!r}" if node.name else f"the {node.op_type} node of {node.output[0]!r}"


class _Walk:
    """A walk back from the logits output of an ONNX graph that keeps the logits an affine map of the tensor it has
    reached (`name`): logits = A x + c, A a scalar or a diagonal (a vector) until the first linear layer and a
    (K, M) matrix after it."""

    LOOKED = "a Gemm or MatMul with a constant weight, through a final Softmax and Mul, Div, Add, Sub by constants"

    def __init__(self, graph: _Graph, logits: str, where: str):
        self.graph, self.logits, self.where = graph, logits, where
        self.name = logits
        self.a: Any = np.float64(1.0)
        self.c: Any = np.float64(0.0)
        self.layers: list = []  # the Gemm and MatMul nodes passed, the last the classifier
        self.normalised = False  # a final softmax or log-softmax: the logits are A x + c up to a constant a row
        self.precision = "fp32"

    def run(self, target: str | None, calibrated: bool) -> None:
        """Walk to the first linear layer's input (without a target; where `calibrated` by macs-audit calibrate's
        matrix scaling, past its K x K layer to the model's own), or to `target`."""
        last = True
        while self.name != target:
            node = self.graph.producer.get(self.name)
            if node is None:
                break
            op = node.op_type
            if op == "Identity" or op in _RESHAPES or (op == "Cast" and self._float_cast(node)):
                self.name = node.input[0]
                continue
            if op in ("Softmax", "LogSoftmax") and last:
                self.normalised, self.name = True, node.input[0]
            elif op == "LogSoftmax" and self.normalised and self._keeps_row_constants():
                self.name = node.input[0]  # x minus a constant a row, which the final softmax drops
            elif op in ("Gemm", "MatMul") and self.graph.constant(node.input[1]) is not None:
                weight, bias = self._layer(node)
                self._compose(weight, bias)
                self.layers.append(node)
                self.name = node.input[0]
                calibration = calibrated and len(self.layers) == 1 and weight.shape[0] == weight.shape[1]
                if target is None and not calibration:
                    return
            elif not self._constant_step(node):
                break
            last = False
        if self.name == target and self.layers:
            return
        node = self.graph.producer.get(self.name)
        stopped = f"reached {_described(node)}" if node is not None else "reached the graph's input"
        if target is None:
            raise InputError(
                f"cannot find the final linear layer of {self.where}: walking back from output {self.logits!r} for "
                f"{self.LOOKED}, {stopped}; give {FEATURE_LAYER_OPTION} NAME (a node or tensor whose values map "
                "linearly to the logits)"
            )
        raise InputError(
            f"the logits of {self.where} are not a linear map of {target!r}: walking back from output "
            f"{self.logits!r} through linear steps, {stopped}; give {FEATURE_LAYER_OPTION} NAME of the final Gemm "
            "or MatMul"
        )

    def _keeps_row_constants(self) -> bool:
        """Whether the map so far takes a constant added to every value of a row to a constant a row."""
        ones = self.a @ np.ones(self.a.shape[1]) if np.ndim(self.a) == 2 else np.broadcast_to(self.a, (1,))
        return bool(np.allclose(ones, ones[0]))

    def _float_cast(self, node: Any) -> bool:
        import onnx

        to = self.graph.attribute(node, "to", 0)
        return to in (onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE, onnx.TensorProto.FLOAT16)

    def _compose(self, weight: np.ndarray, bias: Any) -> None:
        """Take the linear layer x -> weight x + bias (weight (M, D)) into the map."""
        if np.ndim(self.a) == 2:
            self.c = self.c + self.a @ np.broadcast_to(bias, weight.shape[:1])
            self.a = self.a @ weight
        else:
            self.c = self.c + self.a * bias
            self.a = np.reshape(self.a, (-1, 1)) * weight

    def _constant_step(self, node: Any) -> bool:
        """Take `node` into the map where it is x op c or c op x, op one of Mul, Div, Add, Sub, with c a constant
        scalar or a row vector, affine in x (not c / x); False otherwise."""
        if node.op_type not in _ELEMENTWISE or len(node.input) != 2:
            return False
        values = [self.graph.constant(i) for i in node.input]
        side = 0 if values[1] is not None else 1 if values[0] is not None else None
        if side is None or (node.op_type == "Div" and side == 1):
            return False
        k = np.asarray(values[1 - side], dtype=np.float64)
        if k.size != 1 and not (k.ndim <= 2 and k.shape[-1] == k.size):
            return False
        k = k.reshape(-1)
        matrix = np.ndim(self.a) == 2
        if node.op_type == "Mul":
            self.a = self.a * k
        elif node.op_type == "Div":
            self.a = self.a / k
        else:
            moved = self.a @ np.broadcast_to(k, self.a.shape[1:]) if matrix else self.a * k
            if node.op_type == "Add" or side == 0:
                self.c = self.c + moved if node.op_type == "Add" else self.c - moved
            else:  # c - x
                self.c, self.a = self.c + moved, -self.a
        self.name = node.input[side]
        return True

    def _layer(self, node: Any) -> tuple[np.ndarray, Any]:
        """(weight (M, D), bias (M,) or 0) of a Gemm or MatMul with a constant weight."""
        b = self.graph.constant(node.input[1])
        assert b is not None  # checked by the caller
        if b.dtype == np.float16:
            self.precision = "fp16"
        if b.ndim != 2:
            raise InputError(
                f"{self.where}: the weight of {_described(node)} is not a matrix: give {FEATURE_LAYER_OPTION} NAME"
            )
        weight = b.astype(np.float64)
        bias: Any = np.float64(0.0)
        if node.op_type == "MatMul":
            return weight.T, bias
        if self.graph.attribute(node, "transA", 0):
            raise InputError(
                f"{self.where}: {_described(node)} transposes its input (transA): give {FEATURE_LAYER_OPTION} NAME"
            )
        weight = (weight if self.graph.attribute(node, "transB", 0) else weight.T) * self.graph.attribute(
            node, "alpha", 1.0
        )
        if len(node.input) > 2 and node.input[2]:
            c = self.graph.constant(node.input[2])
            if c is None:
                raise InputError(
                    f"{self.where}: the bias of {_described(node)} is not a constant: give {FEATURE_LAYER_OPTION} NAME"
                )
            bias = self.graph.attribute(node, "beta", 1.0) * c.astype(np.float64).reshape(-1)
        return weight, bias

    def affine(self) -> tuple[np.ndarray, np.ndarray]:
        """(weight (K, D), bias (K,)) of the logits as a map of the tensor reached, float64."""
        if np.ndim(self.a) != 2:  # no linear layer passed: run() raised
            raise InputError(f"cannot find the final linear layer of {self.where}")
        classes = self.a.shape[0]
        return self.a, np.broadcast_to(self.c, (classes,)).astype(np.float64)
