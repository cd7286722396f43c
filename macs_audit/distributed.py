"""torch.distributed support: launched by torchrun, one process per device (or per CPU slot).

Evaluation shards every view by whole batches (batch b goes to rank b % world_size), so random
views, whose seeds depend on a batch's start position, give the same bytes as in one process.
After a view, the accumulators' fixed-size sums are all-reduced and the per-sample state that
equal-mass ECE and the bootstrap need is all-gathered and put back in data-set order, so every
rank holds the single-process result (counts identical, float sums equal to rounding).
Rank 0 alone writes outputs.
"""

from __future__ import annotations

import dataclasses
import os

import numpy as np

from macs_audit.devices import cuda_available

SUM_FIELDS_INT = ("count", "correct", "margin_below", "bin_count", "class_bin_count")
SUM_FIELDS_FLOAT = (
    "nll_sum",
    "brier_sum",
    "margin_sum",
    "logit_norm_sum",
    "max_logit_sum",
    "bin_conf_sum",
    "bin_correct_sum",
    "class_bin_prob_sum",
    "class_bin_hit_sum",
)
SAMPLE_FIELDS = ("_confidence", "_is_correct", "_nll", "_brier", "_margin")


@dataclasses.dataclass(frozen=True)
class Context:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def active(self) -> bool:
        return self.world_size > 1

    def owns(self, batch_index: int) -> bool:
        return batch_index % self.world_size == self.rank


SINGLE = Context()


def launched_by_torchrun() -> bool:
    return int(os.environ.get("WORLD_SIZE", "1")) > 1


def init_from_env(device: str = "auto") -> Context:
    """Join the process group torchrun describes in the environment (no-op for one process).

    Backend: NCCL when this process drives a CUDA device, gloo otherwise.
    """
    if not launched_by_torchrun():
        return SINGLE
    import torch
    import torch.distributed as dist

    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    use_cuda = device != "cpu" and cuda_available()
    if not dist.is_initialized():
        if use_cuda:
            torch.cuda.set_device(local_rank)
        dist.init_process_group(backend="nccl" if use_cuda else "gloo")
    return Context(rank=dist.get_rank(), world_size=dist.get_world_size(), local_rank=local_rank)


def rank_device(ctx: Context, device: str) -> str:
    """Under torchrun, 'auto'/'cuda' means this rank's own GPU."""
    if ctx.active and device in ("auto", "cuda"):
        if cuda_available():
            return f"cuda:{ctx.local_rank}"
        return "cpu" if device == "auto" else device
    return device


def reduce_accumulator(acc, starts: list[int], ctx: Context):
    """All-reduce the sums and all-gather the per-sample arrays of `acc`, in data-set order.

    `starts[i]` is the data-set position of the batch whose per-sample arrays are acc._*[i].
    Returns `acc`, now holding the whole data set on every rank.
    """
    if not ctx.active:
        return acc
    import torch
    import torch.distributed as dist

    device = "cuda" if dist.get_backend() == "nccl" else "cpu"
    for name in SUM_FIELDS_INT + SUM_FIELDS_FLOAT:
        value = getattr(acc, name)
        dtype = torch.int64 if name in SUM_FIELDS_INT else torch.float64
        t = torch.as_tensor(np.asarray(value), dtype=dtype, device=device).clone()
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
        result = t.cpu().numpy()
        setattr(acc, name, result if np.ndim(value) else result.item())
    gathered: list = [None] * ctx.world_size
    dist.all_gather_object(gathered, (starts, [getattr(acc, f) for f in SAMPLE_FIELDS]))
    batches = sorted(
        (start, i, rank) for rank, (rank_starts, _) in enumerate(gathered) for i, start in enumerate(rank_starts)
    )
    for j, field in enumerate(SAMPLE_FIELDS):
        setattr(acc, field, [gathered[rank][1][j][i] for _, i, rank in batches])
    return acc


def gather_in_order(parts: list[np.ndarray], starts: list[int], ctx: Context) -> list[np.ndarray]:
    """All-gather per-batch arrays (e.g. logits) from every rank, in data-set order."""
    if not ctx.active:
        return parts
    import torch.distributed as dist

    gathered: list = [None] * ctx.world_size
    dist.all_gather_object(gathered, (starts, parts))
    ordered = sorted(
        (start, part)
        for rank_starts, rank_parts in gathered
        for start, part in zip(rank_starts, rank_parts, strict=True)
    )
    return [part for _, part in ordered]


def mean_over_ranks(value, ctx: Context) -> float:
    """A scalar tensor's mean over all ranks, as a Python float (the value itself in one process)."""
    if not ctx.active:
        return value.item()
    import torch.distributed as dist

    t = value.detach().double().reshape(1)
    if dist.get_backend() != "nccl":
        t = t.cpu()
    dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return float(t.item()) / ctx.world_size


def barrier(ctx: Context) -> None:
    if ctx.active:
        import torch.distributed as dist

        dist.barrier()


def shutdown(ctx: Context) -> None:
    if ctx.active:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()
