"""What an audit runs: `AuditOptions`, frozen once built (a caller that needs other values makes a new one with
`dataclasses.replace`), and the decoding processes they give under torch.distributed."""

from __future__ import annotations

import dataclasses
import os

from macs_audit.data.label_space import MappedSource
from macs_audit.data.real_labels import RealLabelSets
from macs_audit.data.sources import Source
from macs_audit.distributed import Context
from macs_audit.metrics import conformal
from macs_audit.report import Report


@dataclasses.dataclass(frozen=True)
class AuditOptions:
    batch_size: int = 500
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
    corruption_baseline: Report | None = None  # for CE / relative mCE
    workers: int | None = None  # ImageFolder decoding processes; None: min(8, cores / processes)
    coverage: float = conformal.DEFAULT_COVERAGE  # conformal sets' target, fitted on the calibration split
    # With a fraction F: the conformal sets are fitted on their own class-stratified F of the temperature's scored
    # part (images the temperature never saw) and scored on the rest; None shares the temperature's fit part.
    conformal_split: float | None = None
    raps: tuple[int, float] | None = None  # RAPS's (k_reg, penalty) given; None: chosen by the paper's rule
    ood_source: Source | None = None  # a second data set (labels unused) for OOD detection
    unlabeled_source: Source | None = None  # target images whose accuracy is estimated without labels
    shift_sets: tuple[MappedSource, ...] = ()  # natural-shift sets (--shift-data), scored as views (audit/shift.py)
    real_labels: RealLabelSets | None = None  # ImageNet ReaL labels of the evaluated images (--real-labels)
    # Torch models' precision (--precision fp32|bf16|fp16) where the audit loads the model itself (before_after:
    # finetune's and calibrate's audits); evaluate loads its model at --precision. The report records it.
    precision: str = "fp32"


def workers(options: AuditOptions, ctx: Context) -> int:
    """ImageFolder decoding processes per rank: the option's, else min(8, cores / processes)."""
    if options.workers is not None:
        return options.workers
    return min(8, max(1, (os.cpu_count() or 1) // ctx.world_size))
