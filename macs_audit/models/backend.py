"""What every backend shares: checking and converting the model's outputs, the file hash the report records,
one-line error causes, and keeping the libraries' own warnings off the user's terminal."""

from __future__ import annotations

import contextlib
import hashlib
import re
import warnings
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from macs_audit.errors import InputError
from macs_audit.scores import PROBABILITY_FLOOR, SUM_TOLERANCE

# How long a library's message may grow inside one of our one-line errors before its middle is elided.
CAUSE_CHARS = 400


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def one_line(text: object, limit: int = CAUSE_CHARS) -> str:
    """A library's (possibly multi-line) message as one line that keeps its cause.

    Lines are joined and whitespace and terminal escapes collapsed; a message longer than `limit`
    keeps its beginning and its end (where libraries put the path or key that failed), eliding the middle."""
    if isinstance(text, BaseException):
        text = str(text).strip() or type(text).__name__
    flat = re.sub(r"\x1b\[[0-9;]*m", "", str(text))
    flat = " ".join(flat.split())
    if len(flat) <= limit:
        return flat
    head = limit * 2 // 5
    tail = limit - head - 5
    return f"{flat[:head].rstrip()} ... {flat[-tail:].lstrip()}"


def summarise_keys(keys: Iterable[str], what: str, shown: int = 3) -> str:
    """'62 extra keys (model.conv1.weight, model.bn1.weight, model.bn1.bias, ...)'."""
    keys = list(keys)
    listed = ", ".join(keys[:shown]) + (", ..." if len(keys) > shown else "")
    return f"{len(keys)} {what} key{'s' * (len(keys) != 1)} ({listed})"


@contextlib.contextmanager
def library_warnings(debug: bool) -> Iterator[None]:
    """Around a library call (torch.load, torch.jit.load, timm, torch.onnx.export): its warnings
    (deprecations, weights-only notes) are not the user's business and stay off stderr, unless
    `debug`, which shows every one of them."""
    with warnings.catch_warnings():
        warnings.simplefilter("always" if debug else "ignore")
        yield


def record_warnings(info: dict[str, Any], config: Any) -> None:
    """Keep info["warnings"] (what the report's model section lists) in step with what is known of the
    model (`config`, a ModelConfig): set while there is something to warn about, absent otherwise."""
    found = [w for w in (config.normalisation_warning(),) if w]
    if found:
        info["warnings"] = found
    else:
        info.pop("warnings", None)


class OutputAdapter:
    """Checks model outputs and converts probabilities to log-probabilities.

    output='auto' inspects the first batch: rows that are non-negative and sum to 1 are taken as
    probabilities (and recorded as detected), anything else as logits.
    """

    def __init__(self, declared: str, num_classes: int | None):
        self.kind = None if declared == "auto" else declared
        self.detected = False
        self.num_classes = num_classes

    def __call__(self, out: np.ndarray) -> np.ndarray:
        out = np.asarray(out)
        if out.ndim != 2:
            raise InputError(f"the model returned an output of shape {out.shape}; expected (batch, classes)")
        if self.num_classes is not None and out.shape[1] != self.num_classes:
            raise InputError(
                f"the model returned {out.shape[1]} outputs per image but {self.num_classes} classes were declared"
            )
        if not np.isfinite(out).all():
            raise InputError("the model produced NaN or infinite outputs")
        if self.kind is None:
            looks_like_probs = out.min() >= 0 and np.allclose(out.sum(axis=1), 1.0, atol=SUM_TOLERANCE)
            self.kind = "probabilities" if looks_like_probs else "logits"
            self.detected = True
        if self.kind == "probabilities":
            if out.min() < 0 or not np.allclose(out.sum(axis=1), 1.0, atol=SUM_TOLERANCE):
                raise InputError("the model was declared to output probabilities but its rows do not sum to 1")
            return np.log(np.clip(out.astype(np.float64), PROBABILITY_FLOOR, None)).astype(np.float32)
        return out.astype(np.float32, copy=False)

    def describe(self) -> str:
        if self.kind is None:
            return "unknown (nothing evaluated)"
        return f"{self.kind} ({'detected' if self.detected else 'declared'})"
