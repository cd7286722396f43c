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


def all_reduce_sums(values: list[np.ndarray], ctx: Context) -> list[np.ndarray]:
    """Each numpy value (int64 or float64, any shape) summed over all ranks, element by element, in its dtype."""
    if not ctx.active:
        return values
    import torch
    import torch.distributed as dist

    device = "cuda" if dist.get_backend() == "nccl" else "cpu"
    out = []
    for value in values:
        t = torch.as_tensor(value, device=device).clone()
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
        out.append(t.cpu().numpy())
    return out


def gather_in_order(parts: list, starts: list[int], ctx: Context) -> list:
    """All-gather per-batch values (arrays such as logits, or tuples of them) from every rank, in data-set order
    (`starts[i]` is the data-set position of parts[i]; positions differ across ranks)."""
    if not ctx.active:
        return parts
    import torch.distributed as dist

    gathered: list = [None] * ctx.world_size
    dist.all_gather_object(gathered, (starts, parts))
    pairs = [pair for rank_starts, rank_parts in gathered for pair in zip(rank_starts, rank_parts, strict=True)]
    return [part for _, part in sorted(pairs, key=lambda pair: pair[0])]


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
