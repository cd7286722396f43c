"""The robustness half of the audit: perturbation and corruption views, and their summaries.

A view turns a uint8 batch (N, H, W, C) at data-set position `start` into float [0,1] NCHW images.
Random views draw from a generator seeded by (seed, view, severity, start), so a batch gets the
same bytes however the data set is split across batches of the same size or across processes.
"""

from __future__ import annotations

import numpy as np

from macs_audit.models.predictor import to_unit_float
from macs_audit.seeding import derive_seed


def clean_view(images, start: int):
    if isinstance(images, np.ndarray):
        return to_unit_float(images)
    return images.permute(0, 3, 1, 2).float().mul_(float(np.float32(1 / 255)))  # the device-resident split


def view_device(predictor) -> str:
    """Views run where the model runs: CUDA for a model on the GPU, else the CPU."""
    device = str(predictor.info.get("device", "cpu"))
    return device if device.startswith("cuda") else "cpu"


def perturbation_view(name: str, seed: int, device: str):
    import torch

    from macs_audit.views.perturbations import evaluation_view

    def view(images, start: int):
        # A uint8 tensor (the device-resident split) stays on the device; numpy goes back to numpy.
        on_device = torch.is_tensor(images)
        x = (images if on_device else torch.from_numpy(images)).to(device).permute(0, 3, 1, 2).float().div_(255)
        gen = torch.Generator(device=device).manual_seed(derive_seed("perturbation", seed, name, start))
        out = evaluation_view(name, x, gen)
        return out if on_device else out.cpu().numpy()

    return view


def corruption_view(name: str, severity: int, seed: int, device: str, frost_textures: str | None):
    import torch

    from macs_audit.models.predictor import to_unit_float
    from macs_audit.views.corruptions import batch_seed, corrupt

    def view(images, start: int):
        on_device = torch.is_tensor(images)
        x = (images if on_device else torch.from_numpy(images)).to(device)
        out = corrupt(x, name, severity, seed=batch_seed(seed, name, severity, start), frost_textures=frost_textures)
        if on_device:
            return out.permute(0, 3, 1, 2).float().mul_(float(np.float32(1 / 255)))
        return to_unit_float(out.cpu().numpy())

    return view


