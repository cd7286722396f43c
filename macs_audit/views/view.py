"""The View: what the model is scored on (clean images, a perturbation, a corruption at a severity).

A view turns a uint8 batch (N, H, W, C) at data-set position `start` into float32 [0, 1] (N, C, H, W)
images: numpy in, numpy out; a torch tensor (the device-resident split on a GPU) stays a tensor on its
device. Random views draw from a generator seeded by (seed, view, severity, start), so a batch gets the
same bytes however the data set is split across batches of the same size or across processes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from macs_audit.pixels import to_unit_float
from macs_audit.seeding import derive_seed

Transform = Callable[[Any, int], Any]


@dataclasses.dataclass(frozen=True)
class View:
    name: str
    kind: str  # "clean" | "perturbation" | "corruption"
    transform: Transform
    corruption: str | None = None
    severity: int | None = None

    def __call__(self, images: Any, start: int) -> Any:
        return self.transform(images, start)


def _unit_float(images: Any, start: int) -> Any:
    return to_unit_float(images)


CLEAN = View("clean", "clean", _unit_float)


def view_device(device: str) -> str:
    """Views run where the model runs: on its CUDA device for a model on the GPU, else on the CPU."""
    return device if device.startswith("cuda") else "cpu"


def perturbation(name: str, seed: int, device: str) -> View:
    """One of the fixed-strength perturbation views (views.perturbation_params.EVAL_VIEWS)."""

    def transform(images: Any, start: int) -> Any:
        import torch

        from macs_audit.views.perturbations import evaluation_view

        on_device = torch.is_tensor(images)
        x = to_unit_float((images if on_device else torch.from_numpy(images)).to(device))
        gen = torch.Generator(device=device).manual_seed(derive_seed("perturbation", seed, name, start))
        out = evaluation_view(name, x, gen)
        return out if on_device else out.cpu().numpy()

    return View(name, "perturbation", transform)


def corruption(
    name: str, severity: int, seed: int, device: str, frost_textures: str | None, corruption_set: str = "cifar"
) -> View:
    """A corruption at a severity with a parameter set's values, generated batch by batch (seeded by
    the batch's position)."""

    def transform(images: Any, start: int) -> Any:
        import torch

        from macs_audit.views.corruptions.apply import corrupt_batch

        out = corrupt_batch(images, start, name, severity, seed, device, frost_textures, corruption_set)
        return to_unit_float(out if torch.is_tensor(images) else out.cpu().numpy())

    return View(f"{name}@{severity}", "corruption", transform, corruption=name, severity=severity)


def read_corruption(name: str, severity: int) -> View:
    """A corruption read from released files: the source already holds the corrupted images."""
    return dataclasses.replace(CLEAN, name=f"{name}@{severity}", kind="corruption", corruption=name, severity=severity)
