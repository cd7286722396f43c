"""Progress stages: what the core tells its `progress(stage, done, total, terms=None)` callback.

A stage is described by data, not by its name: what it is called and what its counts count. The core
reports `done = 0` when a stage begins and `done = total` when it ends (a view also after every batch),
so that the time between the two is the stage's own. A stage that is one piece of work (fitting a
temperature, rendering a report) has total 1 and no unit. Plain strings are still accepted as stages
of images (the corruption writers); the CLI's Progress reads either.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, Protocol


class ProgressFn(Protocol):
    """The one progress callback of the core (the CLI's cli/progress.Progress is one): `stage` a Stage (or a
    string: a stage of images), `done` of `total` counted, `terms` a training step's loss terms."""

    def __call__(self, stage: Stage | str, done: int, total: int, terms: dict[str, float] | None = None, /) -> None: ...


@dataclasses.dataclass(frozen=True)
class Stage:
    name: str  # what the log line says: "clean", "clean: bootstrap intervals", "temperature scaling"
    unit: str = "images"  # what done and total count: images, resamples, methods; "" for a single step

    def __str__(self) -> str:
        return self.name

    def prefixed(self, prefix: str) -> Stage:
        """The same stage under a longer name (finetune's 'audit before: clean')."""
        return dataclasses.replace(self, name=prefix + self.name)


def step(progress: ProgressFn | None, stage: Stage, total: int = 1) -> Callable[[], None]:
    """Report `stage` begun (0 of `total`) and return the call that reports it done; no-ops without a callback."""
    if progress is None:
        return lambda: None
    progress(stage, 0, total)
    return lambda: progress(stage, total, total)


def as_stage(description: Any) -> Stage:
    """A Stage from what a progress call passed: a Stage as it is, a string as a stage of images."""
    if isinstance(description, Stage):
        return description
    return Stage(str(description))
