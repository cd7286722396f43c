"""Options and parsers shared by the commands: one definition, one help text each."""

from __future__ import annotations

import typer

from macs_audit.errors import UsageError

# Model options shared by evaluate, finetune, calibrate and export (one definition, one help text).
ARCH_OPTION = typer.Option(None, "--arch", help="timm architecture of a state dict / safetensors checkpoint.")
NUM_CLASSES_OPTION = typer.Option(None, "--num-classes", help="Number of classes of the checkpoint.")
INPUT_SIZE_OPTION = typer.Option(None, "--input-size", help="Model input size H,W (or one number).")
MEAN_OPTION = typer.Option(None, "--mean", help="Per-channel mean, e.g. 0.4914,0.4822,0.4465.")
STD_OPTION = typer.Option(None, "--std", help="Per-channel std, e.g. 0.2470,0.2435,0.2616.")
MODEL_OUTPUT_OPTION = typer.Option(None, "--model-output", help="What the model returns: auto, logits or probabilities.")
TRUST_PICKLED_OPTION = typer.Option(False, "--trust-pickled-model-code",
                                    help="Allow loading a fully pickled torch module. This RUNS CODE from the file: "
                                         "only for files you trust.")


def parse_floats(text: str | None, name: str) -> list[float] | None:
    if text is None:
        return None
    from macs_audit.errors import UsageError

    try:
        return [float(v) for v in text.replace(" ", "").split(",") if v]
    except ValueError:
        raise UsageError(f"{name} must be comma-separated numbers, got {text!r}") from None


def parse_size(text: str | None) -> list[int] | None:
    if text is None:
        return None
    from macs_audit.errors import UsageError

    try:
        parts = [int(v) for v in text.lower().replace("x", ",").split(",") if v]
    except ValueError:
        raise UsageError(f"--input-size must be H,W or one number, got {text!r}") from None
    if len(parts) == 1:
        parts *= 2
    if len(parts) != 2:
        raise UsageError(f"--input-size must be H,W or one number, got {text!r}")
    return parts


ALL = "all"


def parse_perturbations(text: str | None) -> tuple[str, ...]:
    from macs_audit.views.perturbations import EVAL_VIEWS

    if text is None or text.strip() in ("", "none"):
        return ()
    names = EVAL_VIEWS if text.strip() == ALL else tuple(t.strip() for t in text.split(",") if t.strip())
    unknown = [n for n in names if n not in EVAL_VIEWS]
    if unknown:
        raise UsageError(f"unknown perturbation {unknown[0]!r}; choose from {', '.join(EVAL_VIEWS)}, all or none")
    return tuple(dict.fromkeys(names))


def parse_corruptions(text: str | None) -> tuple[str, ...]:
    """'cifar-c' or 'all' -> the 19; 'benchmark' -> the 15; else a comma-separated list of names."""
    from macs_audit.views.corruptions import BENCHMARK_CORRUPTIONS, CORRUPTIONS

    if text is None or text.strip() in ("", "none"):
        return ()
    text = text.strip()
    if text in ("cifar-c", ALL):
        return CORRUPTIONS
    if text == "benchmark":
        return BENCHMARK_CORRUPTIONS
    names = tuple(t.strip() for t in text.split(",") if t.strip())
    unknown = [n for n in names if n not in CORRUPTIONS]
    if unknown:
        raise UsageError(f"unknown corruption {unknown[0]!r}; use cifar-c, benchmark, or names from: {', '.join(CORRUPTIONS)}")
    return tuple(dict.fromkeys(names))


def parse_severities(text: str | None) -> tuple[int, ...]:
    """'1-5', '3', '1,3,5' -> sorted unique severities in 1..5."""
    text = (text or "1-5").replace(" ", "")
    out: set[int] = set()
    try:
        for part in text.split(","):
            lo, _, hi = part.partition("-")
            out.update(range(int(lo), int(hi or lo) + 1))
    except ValueError:
        raise UsageError(f"--severities must look like 1-5 or 1,3,5, got {text!r}") from None
    if not out or min(out) < 1 or max(out) > 5:
        raise UsageError(f"severities must lie in 1-5, got {text!r}")
    return tuple(sorted(out))
