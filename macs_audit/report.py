"""The Report: typed sections with a versioned JSON form (docs/report-schema.md).

Every output format, the gate and `compare` read a Report, never the model. Values are fractions
(not percent). Bump SCHEMA_VERSION's minor number for additions and its major number for changes
that break readers.

Each section is a dataclass with a field per key the schema names. A section read from JSON keeps
keys this version does not name (a newer minor version's additions) and its key order, so a report
loaded and saved again is byte-identical. Optional keys left None are not written, except the
ones marked `null_when_absent` (the schema writes those as null).
"""

from __future__ import annotations

import dataclasses
import json
import numbers
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, TypeVar

from macs_audit.errors import InputError

SCHEMA_VERSION = "1.2"
MAX_DEPTH = 64  # of nested arrays and objects in a report or gate config (a report written by evaluate has about 6)
DEFAULT_ROBUST_VIEW = "noise+blur"  # the view robustness.robust_accuracy is measured on

S = TypeVar("S", bound="Section")


@dataclasses.dataclass(frozen=True)
class Length:
    """A field's array has exactly this many items (`Annotated[list[float], Length(2)]`: an interval)."""

    n: int


class Keys:
    """The keys the schema names in a free-form object (`Annotated[dict[str, Any], Keys(coverage=float)]`):
    each present is checked on reading like a section's field; the object stays a plain dict, and keys
    it does not name are kept unchecked."""

    def __init__(self, **types: Any):
        self.types = types


Pair = Annotated[list[float], Length(2)]  # a 95% interval [low, high]
Size = Annotated[list[int], Length(2)]  # [height, width]
# The free-form objects docs/report-schema.md describes key by key:
SetStats = Annotated[
    dict[str, Any],
    Keys(threshold=float | None, coverage=float, mean_set_size=float, worst_class_coverage=float, worst_class=int),
]
SetMeans = Annotated[dict[str, Any], Keys(coverage=float, mean_set_size=float, lowest_coverage=float, lowest_view=str)]
DetectionScores = Annotated[
    dict[str, Any], Keys(auroc=float | None, aupr=float | None, fpr95=float | None, intervals=dict[str, Pair])
]
Estimate = Annotated[
    dict[str, Any], Keys(accuracy=float | None, interval=Pair | None, threshold=float | None, offset=float | None)
]
CalibratorRow = Annotated[
    dict[str, Any],
    Keys(method=str, label=str, scores=dict[str, float | None], n_parameters=int, refused=str | None),
]
SmoothCurve = Annotated[
    dict[str, Any],
    Keys(sigma=float, confidence=list[float], accuracy=list[float | None], density=list[float]),
]


def null_when_absent() -> Any:
    """An optional field the JSON always carries, as null when it has no value."""
    return dataclasses.field(default=None, metadata={"null": True})


def added_in(version: str) -> Any:
    """An optional top-level section added by minor version `version` (see Report.to_dict)."""
    return dataclasses.field(default=None, metadata={"since": _version(version)})


def _version(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(part) for part in str(text).split("."))
    except ValueError:
        return (0, 0)


def _plain(value: Any) -> Any:
    """JSON-ready copy: sections as objects, containers copied (tuples become lists)."""
    if isinstance(value, Section):
        return value.to_dict()
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


# --------------------------------------------------------------------------------------------
# Reading: every key the schema names is checked against its field's type annotation
# --------------------------------------------------------------------------------------------


_FIELD_TYPES: dict[type, dict[str, Any]] = {}


def _field_types(cls: type) -> dict[str, Any]:
    """The resolved type of each schema field of a Section or of Report (annotations are strings here)."""
    if cls not in _FIELD_TYPES:
        hints = typing.get_type_hints(cls, include_extras=True)
        _FIELD_TYPES[cls] = {
            f.name: hints[f.name] for f in dataclasses.fields(cls) if f.name not in ("extra_keys", "_keys")
        }
    return _FIELD_TYPES[cls]


def _required(field: dataclasses.Field) -> bool:
    return field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING


def _describe(hint: Any) -> str:
    """A type as the message names it, in JSON's words: `an object`, `an array of numbers`, `a string`."""
    if isinstance(hint, type) and issubclass(hint, (Section, Report, Mapping)):
        return "an object"
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is Annotated:
        lengths = [m.n for m in args[1:] if isinstance(m, Length)]
        inner = _describe(args[0])
        return inner.replace("an array of ", f"an array of {lengths[0]} ") if lengths else inner
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_describe(a) for a in args if a is not type(None))
    if origin is list:
        if args[0] is Any:
            return "an array"
        item = _describe(args[0])
        return f"an array of {'arrays' if item.startswith('an array') else item.split(' ', 1)[1] + 's'}"
    if origin is dict:
        return "an object"
    return {str: "a string", int: "an integer", float: "a number", bool: "true or false"}.get(hint, "a value")


def _shown(value: Any) -> str:
    """The value a message says it got: null, true, 5, "text" (shortened), an array, an object."""
    if value is None or isinstance(value, bool):
        return json.dumps(value)
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value if len(value) <= 40 else value[:40] + "...", ensure_ascii=False)
    return "an array" if isinstance(value, (list, tuple)) else "an object" if isinstance(value, Mapping) else "?"


def _expected(where: str, hint: Any, value: Any) -> InputError:
    return InputError(f"{where}: expected {_describe(hint)}, got {_shown(value)}")


def _read(value: Any, hint: Any, where: str) -> Any:
    """`value` checked against the type `hint` (and sections read): the one reader of every field.

    JSON's types stand for Python's: an integer is a number, true and false are not; an array is a list
    (a tuple from the audit too). Raises InputError naming the JSON path of the first value that does not fit."""
    if hint is Any:
        return value
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is Annotated:
        value = _read(value, args[0], where)
        for meta in args[1:]:
            if isinstance(meta, Length) and len(value) != meta.n:
                raise InputError(f"{where}: expected {_describe(hint)}, got an array of {len(value)}")
            if isinstance(meta, Keys):
                for key, key_hint in meta.types.items():
                    if key in value:
                        _read(value[key], key_hint, f"{where}.{key}")
        return value
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        options = [a for a in args if a is not type(None)]
        for option in options[:-1]:
            try:
                return _read(value, option, where)
            except InputError:
                continue
        try:
            return _read(value, options[-1], where)
        except InputError:
            if len(options) == 1:
                raise
            raise _expected(where, hint, value) from None
    if isinstance(hint, type) and issubclass(hint, Section):
        return hint.from_dict(value, where)
    if origin is list:
        if not isinstance(value, (list, tuple)):
            raise _expected(where, hint, value)
        return [_read(item, args[0], f"{where}[{i}]") for i, item in enumerate(value)]
    if origin is dict:
        if not isinstance(value, Mapping):
            raise _expected(where, hint, value)
        return {key: _read(item, args[1], f"{where}.{key}") for key, item in value.items()}
    fits = {
        str: lambda v: isinstance(v, str),
        int: lambda v: isinstance(v, numbers.Integral) and not isinstance(v, bool),
        float: lambda v: isinstance(v, numbers.Real) and not isinstance(v, bool),
        bool: lambda v: isinstance(v, bool),
    }[hint]
    if not fits(value):
        raise _expected(where, hint, value)
    return value


def within_depth(data: Any, limit: int) -> bool:
    """Whether arrays and objects nest at most `limit` deep (walked without recursion)."""
    stack = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        children = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
        for child in children:
            if isinstance(child, (dict, list)):
                if depth >= limit:
                    return False
                stack.append((child, depth + 1))
    return True


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is not a JSON number (an undefined value is null)")


@dataclasses.dataclass
class Section:
    """Base of the Report's sections; see the module docstring."""

    extra_keys: dict[str, Any] = dataclasses.field(default_factory=dict, kw_only=True)
    _keys: list[str] = dataclasses.field(default_factory=list, kw_only=True, repr=False, compare=False)

    @classmethod
    def _field_names(cls) -> list[str]:
        return [f.name for f in dataclasses.fields(cls) if f.name not in ("extra_keys", "_keys")]

    @classmethod
    def from_dict(cls: type[S], data: Mapping[str, Any], where: str = "") -> S:
        """Read a section, checking every key the schema names against its field's type (see `_read`).
        `where`: the section's JSON path in the report (`clean`, `views[3]`), which messages name."""
        where = where or cls.__name__
        if not isinstance(data, Mapping):
            raise _expected(where, cls, data)
        hints = _field_types(cls)
        kwargs: dict[str, Any] = {}
        extra: dict[str, Any] = {}
        for key, value in data.items():
            if key in hints:
                kwargs[key] = _read(value, hints[key], f"{where}.{key}")
            else:
                extra[key] = value
        missing = [f.name for f in dataclasses.fields(cls) if f.name in hints and f.name not in kwargs and _required(f)]
        if missing:
            raise InputError(f"{where}.{missing[0]}: missing (a required key)")
        section = cls(**kwargs, extra_keys=extra)
        section._keys = list(data)
        return section

    @classmethod
    def from_dict_or_none(cls: type[S], data: Mapping[str, Any] | None, where: str = "") -> S | None:
        return None if data is None else cls.from_dict(data, where)

    def to_dict(self) -> dict[str, Any]:
        fields = {f.name: f for f in dataclasses.fields(self) if f.name not in ("extra_keys", "_keys")}
        out: dict[str, Any] = {}
        for key in self._keys:  # the order it was read in
            if key in fields:
                out[key] = _plain(getattr(self, key))
            elif key in self.extra_keys:
                out[key] = _plain(self.extra_keys[key])
        for name, field in fields.items():
            value = getattr(self, name)
            if name not in out and (value is not None or field.metadata.get("null")):
                out[name] = _plain(value)
        for key, value in self.extra_keys.items():
            out.setdefault(key, _plain(value))
        return out


@dataclasses.dataclass
class Reliability(Section):
    """Per-bin data of a reliability diagram; `None` marks an empty bin."""

    edges: list[float]
    count: list[int]
    mean_confidence: list[float | None]
    accuracy: list[float | None]


@dataclasses.dataclass
class ViewResult(Section):
    """Metrics of the model on one view of the data (clean, a perturbation, a corruption at a severity)."""

    name: str
    kind: str  # "clean" | "perturbation" | "corruption"
    metrics: dict[str, float]  # metric name (macs_audit.metrics.registry) -> value
    intervals: dict[str, Pair] = dataclasses.field(default_factory=dict)  # name -> 95% [low, high]
    reliability: Reliability | None = null_when_absent()
    corruption: str | None = null_when_absent()
    severity: int | None = null_when_absent()
    family: str | None = null_when_absent()
    # Clean and perturbation views: the smoothed reliability curve at smooth ECE's bandwidth
    # (metrics.estimators.smooth_reliability): sigma, confidence, accuracy (None where too few samples), density.
    smooth_reliability: SmoothCurve | None = None
    # The clean view only: the risk-coverage curve of selective prediction (metrics.selective.curve_points).
    risk_coverage: dict[str, list[float]] | None = None
    # Perturbation and corruption views: the conformal sets' statistics on the held-out images of the view,
    # method -> {coverage, mean_set_size, worst_class_coverage, worst_class} (report.conformal has the clean ones).
    conformal: dict[str, SetStats] | None = None


@dataclasses.dataclass
class ModelInfo(Section):
    path: str | None = None
    format: str | None = None
    backend: str | None = None
    device: str | None = None
    provider: str | None = None
    sha256: str | None = None
    arch: str | None = None
    num_classes: int | None = None
    input_size: Size | None = None
    mean: list[float] | None = None
    std: list[float] | None = None
    output: str | None = None
    class_names: list[str] | None = None
    crop_pct: float | None = None  # image folders were resized and centre-cropped with it (1.2)
    config_sources: dict[str, str] | None = None
    checkpoint_prefix_stripped: str | None = None  # the wrapper prefix taken off every state-dict key
    warnings: list[str] | None = None  # what the user should know about how the model was read


@dataclasses.dataclass
class DataInfo(Section):
    source: str | None = None
    format: str | None = None
    n: int | None = None
    num_classes: int | None = None
    class_names: list[str] | None = None
    split: str | None = None
    limit: int | None = None
    limit_seed: int | None = None
    pipeline: str | None = None  # image folders: how images were sized to the model's input (1.2)


@dataclasses.dataclass
class Runtime(Section):
    device: str | None = None
    provider: str | None = None
    batch_size: int | None = None
    world_size: int | None = None
    python: str | None = None
    numpy: str | None = None
    onnxruntime: str | None = None
    torch: str | None = None


@dataclasses.dataclass
class Conventions(Section):
    """How every metric was computed: descriptions, plus the numbers the formats use."""

    softmax: str | None = None
    ece_bins: int | None = None
    ece_bin_edges: str | None = None
    adaptive_ece: str | None = None
    classwise_ece: str | None = None
    smooth_ece: str | None = None
    l2_ece: str | None = None
    debiased_l2_ece: str | None = None
    ece_sweep: str | None = None
    nll: str | None = None
    brier: str | None = None
    margin: str | None = None
    margin_target: float | None = None
    units: str | None = None
    bootstrap: str | None = None
    bootstrap_resamples: int | None = None
    bootstrap_note: str | None = None  # why the views have no intervals although resamples were asked for
    perturbations: dict[str, Any] | None = None
    robustness_ratio: str | None = None  # over which images margin and L^ are taken
    flip_radius: str | None = None  # over which images the median flip radius is taken
    selective: str | None = None  # AURC, risk at coverage, misclassification AUROC
    conformal: str | None = None
    ood: str | None = None
    label_free: str | None = None  # ATC and DoC


@dataclasses.dataclass
class Tool(Section):
    name: str | None = None
    version: str | None = None


@dataclasses.dataclass(kw_only=True)
class TemperatureScaling(Section):
    """T fitted on a held-out part of the data; `raw` and `scaled` metrics on the rest."""

    temperature: float
    fit_fraction: float | None = None
    n_fit: int | None = None
    n_eval: int | None = None
    split: str | None = None  # how the held-out part was drawn
    seed: int | None = None
    raw: dict[str, float]  # metric name (registry.TEMPERATURE_METRICS) -> value
    scaled: dict[str, float]


@dataclasses.dataclass(kw_only=True)
class Calibrators(Section):
    """Post-hoc calibrators fitted on the temperature's held-out part and scored on the rest, for information
    (calibrators/selection.py): `methods` rows hold method, label and either scores (registry names) and
    n_parameters, or `refused` (why the part was too small to fit it); the first row is the uncalibrated model."""

    select: str  # the score `selected` is best by
    selected: str
    n_fit: int
    n_eval: int
    methods: list[CalibratorRow]
    split: str | None = None
    seed: int | None = None


@dataclasses.dataclass
class MarginHistogram(Section):
    edges: list[float]
    counts: list[int]


@dataclasses.dataclass
class Sensitivity(Section):
    """The input sensitivity L^ of the logit margin, in [0,1] pixel space."""

    lipschitz: float
    lipschitz_error: float | None = None  # null for a finite-difference estimate from one image
    lipschitz_error_note: str | None = None  # why lipschitz_error is null
    method: str | None = None
    n: int | None = None
    mean_margin_subset: float | None = None
    median_flip_radius: float | None = None  # over the correctly classified images of the subset
    flip_radius_samples: int | None = None  # how many they are
    units: str | None = None


@dataclasses.dataclass
class Robustness(Section):
    """Keys appear only if their part of the audit ran."""

    robust_accuracy: float | None = None
    robust_view: str | None = None
    sensitivity: Sensitivity | None = None
    robustness_ratio: float | None = None  # null when L^ is 0
    median_flip_radius: float | None = None


@dataclasses.dataclass
class CorruptionMeans(Section):
    """One corruption's metrics, each the mean over the severities that ran."""

    family: str
    extra: bool  # not one of the 15 benchmark corruptions
    severities: list[int]
    accuracy: float
    ece: float
    nll: float
    brier: float


@dataclasses.dataclass
class FamilyMeans(Section):
    accuracy: float
    ece: float
    corruptions: list[str]


@dataclasses.dataclass
class CorruptionSummary(Section):
    """The corruption grid summarised (macs_audit.metrics.corruption_summary)."""

    corruptions: dict[str, CorruptionMeans]
    families: dict[str, FamilyMeans]
    per_severity: dict[str, dict[str, float]]  # "1" -> {accuracy, ece}
    severities: list[int]
    clean_accuracy: float
    mean_accuracy_15: float | None = None  # only when all 15 benchmark corruptions ran
    mean_ece_15: float | None = None
    mean_accuracy_19: float | None = None  # only when all 19 ran
    mean_ece_19: float | None = None
    mce_unnormalized: float | None = None
    mean_accuracy_selected: float | None = None
    # Only with a corruption baseline report:
    baseline: dict[str, Any] | None = None
    ce: dict[str, float | None] | None = None
    relative_ce: dict[str, float | None] | None = None
    mce: float | None = None
    relative_mce: float | None = None
    baseline_corruptions: list[str] | None = None
    source: str | None = None
    frost_textures: str | None = None
    corruption_set: str | None = None  # the parameter set: cifar, tiny-imagenet or imagenet
    corruption_set_choice: str | None = None  # how it was chosen (auto, the flag, or released files)
    image_size: list[int] | None = None  # [height, width] of the images corrupted


@dataclasses.dataclass(kw_only=True)
class Conformal(Section):
    """Split conformal prediction sets (metrics/conformal.py), fitted on the temperature's held-out part.

    `methods` maps a method (lac, aps) to {threshold (null: every class), coverage, mean_set_size,
    worst_class_coverage, worst_class} on the held-out part of the clean data; every perturbation and
    corruption view holds the same sets' statistics on its images (ViewResult.conformal), and
    `corruption_mean` maps a method to their mean coverage and set size over the corruption views and the
    lowest view coverage (`lowest_coverage`, `lowest_view`)."""

    target_coverage: float
    n_calibration: int
    n_eval: int
    methods: dict[str, SetStats]
    split: str | None = None
    seed: int | None = None
    corruption_mean: dict[str, SetMeans] | None = None


@dataclasses.dataclass(kw_only=True)
class OODDetection(Section):
    """Out-of-distribution detection against a second data set (metrics/ood.py): `scores` maps a score (msp,
    max_logit, energy) to {auroc, aupr, fpr95, intervals: {auroc, aupr, fpr95: [low, high]}}."""

    source: str
    format: str | None = None
    n_in: int
    n_out: int
    scores: dict[str, DetectionScores]
    bootstrap_resamples: int | None = None
    seed: int | None = None


@dataclasses.dataclass(kw_only=True)
class Unlabeled(Section):
    """Accuracy on unlabeled data estimated without labels (metrics/label_free.py): `estimates` maps an
    estimator (atc_mc, atc_ne, doc) to {accuracy, interval, and its fitted threshold or offset}."""

    source: str
    format: str | None = None
    n: int
    source_accuracy: float  # of the labelled evaluation data the estimators were fitted on
    estimates: dict[str, Estimate]
    bootstrap_resamples: int | None = None
    seed: int | None = None


@dataclasses.dataclass
class Report:
    model: ModelInfo
    data: DataInfo
    runtime: Runtime
    conventions: Conventions
    seeds: dict[str, int]  # purpose -> seed
    clean: ViewResult
    temperature_scaling: TemperatureScaling | None = None
    calibrators: Calibrators | None = added_in("1.2")
    margin_histogram: MarginHistogram | None = None
    views: list[ViewResult] = dataclasses.field(default_factory=list)
    robustness: Robustness | None = None
    corruption_summary: CorruptionSummary | None = None
    conformal: Conformal | None = added_in("1.2")
    ood: OODDetection | None = added_in("1.2")
    unlabeled: Unlabeled | None = added_in("1.2")
    tool: Tool = dataclasses.field(default_factory=Tool)
    created: str = ""
    schema_version: str = SCHEMA_VERSION

    def view(self, name: str) -> ViewResult | None:
        return next((v for v in self.views if v.name == name), None)

    def views_of(self, kind: str) -> list[ViewResult]:
        return [v for v in self.views if v.kind == kind]

    def robust_view_name(self) -> str:
        if self.robustness is not None and self.robustness.robust_view:
            return self.robustness.robust_view
        return DEFAULT_ROBUST_VIEW

    def robust_view(self) -> ViewResult | None:
        """The perturbation view robust accuracy is measured on, if it ran."""
        name = self.robust_view_name()
        return next((v for v in self.views if v.name == name and v.kind == "perturbation"), None)

    def to_dict(self) -> dict[str, Any]:
        # Optional sections are written as null, never left out; but a report of an older minor version,
        # loaded and saved again, gets no null for a section added after it (and so keeps its bytes).
        version = _version(self.schema_version)
        return {
            f.name: _plain(getattr(self, f.name))
            for f in dataclasses.fields(self)
            if getattr(self, f.name) is not None or version >= f.metadata.get("since", (0, 0))
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, allow_nan=False) + "\n"

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Report:
        """Read a report of this major schema version, every key the schema names checked against its type
        (InputError naming the JSON path of the first that does not fit); top-level keys it does not name
        (a `gate`) are ignored."""
        if not isinstance(data, dict) or "schema_version" not in data:
            raise InputError("not a macs-audit report (no schema_version)")
        version = data["schema_version"]
        if not isinstance(version, str):
            raise _expected("schema_version", str, version)
        if version.split(".")[0] != SCHEMA_VERSION.split(".")[0]:
            raise InputError(f"report schema {version} is not supported (this version reads {SCHEMA_VERSION})")
        kwargs: dict[str, Any] = {}
        for field in dataclasses.fields(cls):
            if field.name in data:
                kwargs[field.name] = _read(data[field.name], _field_types(cls)[field.name], field.name)
            elif _required(field):
                raise InputError(f"{field.name}: missing (a required key)")
        return cls(**kwargs)

    @classmethod
    def from_json(cls, text: str) -> Report:
        """Parse and read a report (see from_dict). Strict JSON: no NaN or Infinity, at most MAX_DEPTH levels."""
        try:
            data = json.loads(text, parse_constant=_no_constant)
        except RecursionError:
            raise InputError(f"not a macs-audit report: nested more than {MAX_DEPTH} levels deep") from None
        except ValueError as exc:
            raise InputError(f"not valid JSON: {exc}") from None
        if not within_depth(data, MAX_DEPTH):
            raise InputError(f"not a macs-audit report: nested more than {MAX_DEPTH} levels deep")
        return cls.from_dict(data)


def load_report(path: str | Path) -> Report:
    path = Path(path)
    if not path.is_file():
        raise InputError(f"report not found: {path}")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"{path} is not a macs-audit report: not UTF-8 text (byte {exc.start})") from None
    except OSError as exc:
        raise InputError(f"cannot read report {path}: {exc.strerror}") from None
    try:
        return Report.from_json(text)
    except InputError as exc:
        raise InputError(f"{path}: {exc}") from None
