"""Batches of a source for one view: device-resident splits, worker-decoded ImageFolder images,
and the next batch prepared while the model runs on the current one."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any, Iterator

import numpy as np

from macs_audit.data.shards import ShardIndex
from macs_audit.data.sources import Source
from macs_audit.distributed import Context
from macs_audit.errors import InputError

IN_MEMORY_FORMATS = ("builtin", "npz", "cifar", "cifar-c")
DECODED_FORMATS = ("imagefolder", "shards")  # image files decoded batch by batch, in worker processes


def device_images(source: Source, device: str):
    """The whole split as one uint8 tensor on a CUDA `device`, when the source is held in memory and
    fits in a quarter of the free GPU memory; else None (batches are then read and copied one by one)."""
    if not device.startswith("cuda") or source.format not in IN_MEMORY_FORMATS:
        return None
    import torch

    free, _ = torch.cuda.mem_get_info(torch.device(device))
    if len(source) * source.images(np.arange(1)).nbytes > free // 4:
        return None
    return torch.from_numpy(np.ascontiguousarray(source.images(np.arange(len(source))))).to(device)


class _BatchReader:
    """Whole batches by index, for DataLoader worker processes (ImageFolder decoding)."""

    def __init__(self, source: Source, starts: list[int], batch_size: int):
        self.source, self.starts, self.batch_size = source, starts, batch_size

    def __len__(self) -> int:
        return len(self.starts)

    def __getitem__(self, i: int):
        start = self.starts[i]
        try:
            return start, self.source.images(np.arange(start, min(start + self.batch_size, len(self.source))))
        except InputError as exc:  # re-raised in the main process with its one-line message
            return start, exc


def _identity(item):
    return item


def _forked(loader: Any) -> Any:
    """`loader`'s iterator, its worker processes forked with every existing object frozen out of their garbage
    collection: a forked worker that collects garbage the parent left (an onnxruntime session in a reference
    cycle) runs its destructor on thread-pool locks copied mid-use and hangs there for good."""
    import gc

    gc.freeze()  # the objects alive now: the parent's to collect, never a worker's
    try:
        return iter(loader)  # forks the workers
    finally:
        gc.unfreeze()


def _batch_images(source: Source, starts: list[int], batch_size: int, resident, workers: int):
    """(start, uint8 images) of each batch: slices of the device-resident split, ImageFolder images
    decoded in `workers` processes, or plain reads."""
    if resident is not None:
        for start in starts:
            yield start, resident[start : start + batch_size]
    elif source.format in DECODED_FORMATS and workers > 0 and len(starts) > 1:
        from torch.utils.data import DataLoader

        reader: Any = _BatchReader(source, starts, batch_size)  # a map-style dataset by protocol
        loader: DataLoader = DataLoader(
            reader, batch_size=None, collate_fn=_identity, num_workers=min(workers, len(starts)), prefetch_factor=2
        )
        for start, images in _forked(loader):
            if isinstance(images, Exception):
                raise images
            yield start, images
    else:
        for start in starts:
            yield start, source.images(np.arange(start, min(start + batch_size, len(source))))


def owned_starts(source: Source, batch_size: int, ctx: Context) -> list[int]:
    """This process's batch starts (every `batch_size` positions; all of them in one process). Batch b is rank
    b % world_size's; a shard set's batch is the rank's that owns the shard of its first image (shard s: rank
    s % world_size), so that each rank reads its own shards. Either way the merge is the exact one: the sums
    all-reduced, the per-sample arrays gathered in data-set order by their starts."""
    starts = range(0, len(source), batch_size)
    index = getattr(source.fetch, "index", None)
    if ctx.active and isinstance(index, ShardIndex):
        first = np.asarray(starts) if source.indices is None else source.indices[np.asarray(starts)]
        return [s for s, shard in zip(starts, index.shard[first].tolist(), strict=True) if ctx.owns(shard)]
    return [start for b, start in enumerate(starts) if ctx.owns(b)]


def prefetched(
    source: Source,
    batch_size: int,
    view,
    ctx: Context,
    *,
    resident=None,
    pin: bool = False,
    workers: int = 0,
    overlap: bool = False,
) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
    """Yield (start, view images, labels) for this rank's batches (all of them in one process).

    With `overlap`, the next batch is prepared in a worker thread while the model runs on the
    current one: right when the model runs on a GPU. On the CPU the model's own thread pool uses
    every core, and a preparing thread beside it only preempts that pool, which slows it down more
    than preparing inline costs. With `pin`, host batches are page-locked so that the predictor's
    copy to the GPU is asynchronous."""
    starts = owned_starts(source, batch_size, ctx)
    batches = _batch_images(source, starts, batch_size, resident, workers)

    def prepare():
        start, images = next(batches)
        x = view(images, start)
        if pin and isinstance(x, np.ndarray):
            import torch

            x = torch.from_numpy(x).pin_memory()
        return start, x, source.labels[np.arange(start, min(start + batch_size, len(source)))]

    if not overlap or not starts:
        for _ in starts:
            yield prepare()
        return
    with ThreadPoolExecutor(max_workers=1) as pool:
        pending = pool.submit(prepare)
        for i in range(len(starts)):
            batch = pending.result()
            if i + 1 < len(starts):
                pending = pool.submit(prepare)
            yield batch
