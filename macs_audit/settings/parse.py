"""Parsing a resolved option's value into what the core takes: a model's flags, a size, a list of corruption
names, severities, a natural-shift set. Each raises UsageError (exit 2) naming the flag, one line; the CLI, the spec
and the Python API parse through here, so a value means the same wherever it is given."""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from macs_audit.errors import UsageError
from macs_audit.views.corruptions.table import PARAMETER_SETS

if TYPE_CHECKING:
    from macs_audit.auditing import AuditOptions


def model_flags(
    arch: str | None,
    num_classes: int | None,
    input_size: str | None,
    mean: str | None,
    std: str | None,
    output_kind: str | None,
    crop_pct: float | None = None,
    interpolation: str | None = None,
) -> dict:
    """ModelConfig overrides from the command line (None = not given)."""
    return {
        "arch": arch,
        "num_classes": num_classes,
        "input_size": parse_size(input_size),
        "mean": parse_floats(mean, "--mean"),
        "std": parse_floats(std, "--std"),
        "output": output_kind,
        "crop_pct": crop_pct,
        "interpolation": interpolation,
    }


def parse_floats(text: str | None, name: str) -> list[float] | None:
    """'0.5,0.25' -> [0.5, 0.25]; every value finite (float() reads 'nan' and 'inf', which no option means)."""
    if text is None:
        return None
    try:
        values = [float(v) for v in text.replace(" ", "").split(",") if v]
    except ValueError:
        raise UsageError(f"{name} must be comma-separated numbers, got {text!r}") from None
    if not all(math.isfinite(v) for v in values):
        raise UsageError(f"{name} must be finite numbers, got {text!r}")
    return values


def parse_size(text: str | None) -> list[int] | None:
    if text is None:
        return None
    try:
        parts = [int(v) for v in text.lower().replace("x", ",").split(",") if v]
    except ValueError:
        raise UsageError(f"--input-size must be H,W or one number, got {text!r}") from None
    if len(parts) == 1:
        parts *= 2
    if len(parts) != 2:
        raise UsageError(f"--input-size must be H,W or one number, got {text!r}")
    from macs_audit.models.config import check_input_size

    check_input_size((parts[0], parts[1]), "--input-size")  # before anything of that size is allocated
    return parts


def parse_range(text: str | None, name: str, default: tuple[float, float]) -> tuple[float, float]:
    """'LO,HI' -> (LO, HI); None -> `default`."""
    values = parse_floats(text, name)
    if values is None:
        return default
    if len(values) != 2:
        raise UsageError(f"{name} must be LO,HI, got {text!r}")
    return values[0], values[1]


ALL = "all"


def parse_perturbations(text: str | None) -> tuple[str, ...]:
    from macs_audit.views.perturbation_params import EVAL_VIEWS

    if text is None or text.strip() in ("", "none"):
        return ()
    names = EVAL_VIEWS if text.strip() == ALL else tuple(t.strip() for t in text.split(",") if t.strip())
    if not names:
        raise UsageError(f"--perturbations {text!r} names no perturbation; use {', '.join(EVAL_VIEWS)}, all or none")
    unknown = [n for n in names if n not in EVAL_VIEWS]
    if unknown:
        raise UsageError(f"unknown perturbation {unknown[0]!r}; choose from {', '.join(EVAL_VIEWS)}, all or none")
    return tuple(dict.fromkeys(names))


def parse_corruptions(text: str | None) -> tuple[str, ...]:
    """'all' (or its alias 'cifar-c', an older name: it meant all 19 for every parameter set) -> the 19;
    'benchmark' -> the 15; else a comma-separated list of names."""
    from macs_audit.views.corruptions.table import BENCHMARK_CORRUPTIONS, CORRUPTIONS

    if text is None or text.strip() in ("", "none"):
        return ()
    text = text.strip()
    if text in ("cifar-c", ALL):
        return CORRUPTIONS
    if text == "benchmark":
        return BENCHMARK_CORRUPTIONS
    names = tuple(t.strip() for t in text.split(",") if t.strip())
    if not names:
        raise UsageError(f"--corruptions {text!r} names no corruption; use all, benchmark, names, or none")
    unknown = [n for n in names if n not in CORRUPTIONS]
    if unknown:
        raise UsageError(
            f"unknown corruption {unknown[0]!r}; use cifar-c, benchmark, or names from: {', '.join(CORRUPTIONS)}"
        )
    return tuple(dict.fromkeys(names))


def parse_corruption_set(text: str) -> str:
    """A parameter set's name or 'auto'."""
    text = text.strip()
    if text != "auto" and text not in PARAMETER_SETS:
        raise UsageError(f"--corruption-set must be auto or one of: {', '.join(PARAMETER_SETS)}; got {text!r}")
    return text


def parse_severities(text: str | None) -> tuple[int, ...]:
    """'1-5', '3', '1,3,5' -> sorted unique severities in 1..5 (each range's ends checked before it is expanded:
    '1-10000000000' is refused, not listed)."""
    text = (text or "1-5").replace(" ", "")
    bounds = []
    try:
        for part in text.split(","):
            lo, _, hi = part.partition("-")
            bounds.append((int(lo), int(hi or lo)))
    except ValueError:
        raise UsageError(f"--severities must look like 1-5 or 1,3,5, got {text!r}") from None
    if any(lo < 1 or hi > 5 for lo, hi in bounds):
        raise UsageError(f"severities must lie in 1-5, got {text!r}")
    out = {severity for lo, hi in bounds for severity in range(lo, hi + 1)}
    if not out:
        raise UsageError(f"severities must lie in 1-5, got {text!r}")
    return tuple(sorted(out))


def parse_shift_data(values: list[str] | None, option: str = "--shift-data") -> list[tuple[str, Path]]:
    """['imagenet-a=/data/a', ...] -> [('imagenet-a', Path('/data/a')), ...]; names unique and non-empty.
    `option`: the flag messages name (--shift-predictions takes NAME=FILE)."""
    found: dict[str, Path] = {}
    example = "NAME=DIR (e.g. imagenet-a=/data/imagenet-a)" if option == "--shift-data" else "NAME=FILE (e.g. a=a.npz)"
    for value in values or []:
        name, sep, folder = value.partition("=")
        name = name.strip()
        if not sep or not name or not folder:
            raise UsageError(f"{option} must be {example}, got {value!r}")
        if name in found:
            raise UsageError(f"{option} names {name!r} twice; give each set its own name")
        found[name] = Path(folder)
    return list(found.items())


def parse_audit_options(
    batch_size: int | None,
    calibration_split: float,
    bootstrap: int,
    seed: int,
    perturbations: str | None,
    sensitivity_samples: int,
    corruptions: str | None,
    severities: str | None,
    **more: Any,
) -> AuditOptions:
    """The AuditOptions of the audits a command runs beside evaluate's (finetune's and calibrate's before/after
    audits, export's parity audit), from their resolved values (`batch_size` None: by the model's input size,
    audit.options.default_batch_size); `more` sets the others. evaluate's are macs_audit.plan's."""
    from macs_audit.auditing import AuditOptions, check_calibration_split
    from macs_audit.auditing.options import AUTO_BATCH_SIZE

    return AuditOptions(
        batch_size=AUTO_BATCH_SIZE if batch_size is None else batch_size,
        calibration_split=check_calibration_split(calibration_split),  # the core's range, checked before the model
        bootstrap=bootstrap,
        seed=seed,
        perturbations=parse_perturbations(perturbations),
        sensitivity_samples=sensitivity_samples,
        corruptions=parse_corruptions(corruptions),
        severities=parse_severities(severities),
        **more,
    )
