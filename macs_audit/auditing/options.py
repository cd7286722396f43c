"""What an audit runs with: `AuditOptions`, its settings (numbers, names and path strings, frozen once built),
`AuditInputs`, what the caller loaded for it (data sets, a class map, labels, a baseline report), and `RunContext`,
where it runs and reports; and the decoding processes the settings give under torch.distributed."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from typing import Any

from macs_audit.data.label_space import MappedSource
from macs_audit.data.real_labels import RealLabelSets
from macs_audit.data.sources import Source
from macs_audit.distributed import SINGLE, Context
from macs_audit.metrics import conformal, slices
from macs_audit.models.config import ModelConfig
from macs_audit.progress import ProgressFn
from macs_audit.report import Report

# The default batch (no --batch-size): the largest of BATCH_SIZES whose images, at ACTIVATION_FACTOR times the size
# of their float32 input tensor (the network's activations and the preprocessing's copies), fit BATCH_MEMORY_BUDGET.
# So 500 up to 96x96 inputs (CIFAR's 32x32 included), 64 at 224x224, 16 at 518x518. A ResNet-18 at 224 px added
# 7x (onnxruntime) to 11x (torch) its input per image, and peaked at 4.0 GiB with 500 images against 1.3 GiB
# with 64 (benchmarks/RESULTS.md); 32 leaves room for models with larger activations.
BATCH_SIZES = (500, 256, 128, 64, 32, 16, 8, 4, 2, 1)
BATCH_MEMORY_BUDGET = 2 * 2**30  # bytes
ACTIVATION_FACTOR = 32
AUTO_BATCH_SIZE = 0  # AuditOptions.batch_size's default: `default_batch_size` of the audited model's input


def default_batch_size(input_size: tuple[int, int] | list[int], channels: int = 3) -> int:
    """Images per model call for a model of `input_size` (height, width) and `channels`, where --batch-size is not
    given: the largest of BATCH_SIZES with batch * channels * height * width * 4 bytes * ACTIVATION_FACTOR at most
    BATCH_MEMORY_BUDGET (1 for inputs too large for any)."""
    per_image = channels * int(input_size[0]) * int(input_size[1]) * 4 * ACTIVATION_FACTOR
    return next((size for size in BATCH_SIZES if size * per_image <= BATCH_MEMORY_BUDGET), 1)


def sized(options: AuditOptions, config: ModelConfig) -> AuditOptions:
    """`options` with the batch size the audit runs: the one given, or AUTO_BATCH_SIZE's default for the model of
    `config` (its input size and channels); the report's runtime.batch_size records it. The one setting resolved
    once the model is known: every other stays as built."""
    if options.batch_size != AUTO_BATCH_SIZE:
        return options
    return dataclasses.replace(options, batch_size=default_batch_size(config.input_size, len(config.mean)))


@dataclasses.dataclass(frozen=True)
class AuditOptions:
    """The audit's settings: numbers, names and path strings, never a loaded object (those are `AuditInputs`)."""

    batch_size: int = AUTO_BATCH_SIZE  # images per model call; AUTO_BATCH_SIZE: by the input size (`sized`)
    calibration_split: float = 0.2  # fraction of the evaluation data the temperature is fitted on; 0 disables
    calibrators: tuple[str, ...] = ()  # post-hoc methods also fitted on that part and scored on the rest
    bootstrap: int = 1000  # bootstrap resamples for the intervals; 0 disables
    seed: int = 0
    # Robustness (all off by default in the library; the CLI turns on the robust view and sensitivity).
    perturbations: tuple[str, ...] = ()  # of views.perturbation_params.EVAL_VIEWS
    sensitivity_samples: int = 0  # images (class-stratified) for L^; 0 disables
    sensitivity_directions: int = 8  # finite-difference directions (ONNX models)
    corruptions: tuple[str, ...] = ()  # of views.corruptions.table.CORRUPTIONS
    severities: tuple[int, ...] = (1, 2, 3, 4, 5)
    released_dir: str | None = None  # read released files (CIFAR-C .npy or an image tree) instead of generating
    frost_textures: str | None = None
    corruption_set: str = "auto"  # cifar, tiny-imagenet, imagenet, or auto: the one nearest the images' size
    workers: int | None = None  # ImageFolder decoding processes; None: min(8, cores / processes)
    coverage: float = conformal.DEFAULT_COVERAGE  # conformal sets' target, fitted on the calibration split
    # With a fraction F: the conformal sets are fitted on their own class-stratified F of the temperature's scored
    # part (images the temperature never saw) and scored on the rest; None shares the temperature's fit part.
    conformal_split: float | None = None
    raps: tuple[int, float] | None = None  # RAPS's (k_reg, penalty) given; None: chosen by the paper's rule
    # Torch models' precision (--precision fp32|bf16|fp16) where the audit loads the model itself (before_after:
    # finetune's and calibrate's audits); evaluate loads its model at --precision. The report records it.
    precision: str = "fp32"
    # The penultimate features (models/features.py) for the feature-space OOD scores and the representation shift:
    # "auto" where the model gives them, "on" (an error where it cannot), "off" (the library's default; the CLI's
    # is "auto").
    features: str = "off"
    feature_layer: str | None = None  # the layer whose input they are; None: the source's rule finds the last one
    # Slices (auditing/slicing.py): the images' properties read in the clean pass and sliced by, as a metadata file's
    # columns are; a numeric column's quantile bins; the images a slice needs to be scored; the tests' correction.
    image_slices: bool = True
    slice_bins: int = slices.DEFAULT_BINS
    min_slice_size: int = slices.DEFAULT_MIN_SIZE
    slice_correction: str = "holm"


@dataclasses.dataclass(frozen=True)
class AuditInputs:
    """What the caller loaded for the audit beside the model and its data: loaded objects, never settings."""

    ood_source: Source | None = None  # a second data set (labels unused) for OOD detection
    unlabeled_source: Source | None = None  # target images whose accuracy is estimated without labels
    shift_sets: tuple[MappedSource, ...] = ()  # natural-shift sets (--shift-data), scored as views (auditing/shift.py)
    # --class-map's classes -> output indices: maps the audited data's classes where it names one (auditing/classes.py)
    class_map: dict[str, int] | None = None
    class_map_name: str = "--class-map"  # what an error about the map names it by (its file)
    real_labels: RealLabelSets | None = None  # ImageNet ReaL labels of the evaluated images (--real-labels)
    corruption_baseline: Report | None = None  # for CE / relative mCE
    feature_fit_source: Source | None = None  # --feature-fit-data: what the feature OOD detectors are fitted on
    metadata: Any = None  # --metadata's table (data/metadata.MetadataTable), joined to the data by the audit


@dataclasses.dataclass(frozen=True)
class RunContext:
    """Where a run reports and how it is spread, the same for each of its steps: `progress` (macs_audit.progress),
    the torch.distributed processes (`ctx`), `on_warning`, told what the user should know as the run goes, and
    `features`, where every pass's penultimate features go when the audit reads them."""

    progress: ProgressFn | None = None
    ctx: Context = SINGLE
    on_warning: Callable[[str], None] | None = None
    features: Any = None  # the features' sink of every pass (auditing/features.py: inference.FeatureSink), if read


DEFAULT_CONTEXT = RunContext()  # one process, no progress callback, warnings unheard


def workers(options: AuditOptions, ctx: Context) -> int:
    """ImageFolder decoding processes per rank: the option's, else min(8, cores / processes)."""
    if options.workers is not None:
        return options.workers
    return min(8, max(1, (os.cpu_count() or 1) // ctx.world_size))
