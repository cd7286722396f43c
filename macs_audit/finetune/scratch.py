"""A random initialisation of a model's architecture, for `finetune --from-scratch`.

The architecture's own initialisation (timm's, as sample_models/train_sample.py draws it: torch's global
generator seeded with the run's seed, then the model built), loaded into the module the run trains, so
that the rest of the run (the loop, the export, the audits) is the fine-tuning run's unchanged.
"""

from __future__ import annotations

from typing import Any

from macs_audit.errors import UsageError


def random_initialisation(
    model, arch: str | None, num_classes: int, seed: int, model_args: dict[str, Any] | None = None
) -> None:
    """Replace `model`'s parameters and buffers in place by a fresh initialisation of the timm architecture
    `arch` with `num_classes` outputs and the keyword arguments `model_args` it was built with (a timm
    folder's, e.g. zero_init_last, which changes the initialisation but not the keys), drawn from `seed`.
    UsageError when there is no timm architecture to draw from (a TorchScript or pickled module without
    --arch) or it does not match `model`'s keys."""
    import timm
    import torch

    from macs_audit.models import architectures  # noqa: F401  (registers the project's CIFAR models)

    if not arch:
        raise UsageError("--from-scratch needs the model's timm architecture: give --arch or a sidecar with arch")
    torch.manual_seed(seed)
    try:
        fresh = timm.create_model(arch, pretrained=False, num_classes=num_classes, **(model_args or {}))
    except RuntimeError as exc:  # timm: unknown model
        raise UsageError(f"--from-scratch: cannot build {arch!r}: {str(exc).splitlines()[0]}") from None
    own = model.state_dict()
    drawn = fresh.state_dict()
    if own.keys() != drawn.keys() or any(own[k].shape != drawn[k].shape for k in own):
        raise UsageError(f"--from-scratch: {arch!r} does not have the model's parameters; give the model's own --arch")
    model.load_state_dict(drawn)
