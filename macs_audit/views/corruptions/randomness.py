"""Random numbers inside a corruption, all drawn from the ``torch.Generator`` of its ``corrupt`` call.

Noise corruptions need only 16 random bits per element (an index into a 2^16-entry quantile
table), which on the CPU come from numpy's SFC64 seeded by one draw of the generator: per bit it
is about 2.4x faster than torch's mt19937 there, which was the noise corruptions' largest cost.
"""

from __future__ import annotations

import math

import numpy as np
import torch

TABLE_BITS = 16  # random bits per element: the noise tables have 2^16 cells


class Buffers:
    """Temporaries reused by every piece of a piecewise loop: a fresh multi-megabyte buffer
    per piece costs page faults on CPU (up to 2x on the noise corruptions)."""

    def __init__(self, device):
        self.device, self._store = device, {}

    def get(self, name: str, count: int, dtype: torch.dtype) -> torch.Tensor:
        buffer = self._store.get(name)
        if buffer is None or buffer.numel() < count:
            buffer = self._store[name] = torch.empty(count, dtype=dtype, device=self.device)
        return buffer[:count]


class RandomWords:
    """Random 16-bit words (int16) from a corruption's generator, four from each 64-bit draw.

    On the CPU they come from numpy's SFC64, seeded by one draw of ``gen``; elsewhere from
    ``gen`` on its device. The table cell of a word w is u = w + 2^15 (0..65535), uniform;
    users read it in the cheapest equivalent way."""

    def __init__(self, gen: torch.Generator, device):
        self.gen, self.device = gen, torch.device(device)
        self._sfc64 = None
        if self.device.type == "cpu":
            seed = torch.empty(1, dtype=torch.int64).random_(0, None, generator=gen)
            self._sfc64 = np.random.SFC64(int(seed))

    def draw(self, count: int, buffers: Buffers | None = None) -> torch.Tensor:
        """``count`` words as an int16 tensor (GPU draws land in ``buffers`` if given)."""
        size = (count + 3) // 4
        if self._sfc64 is not None:
            return torch.from_numpy(self._sfc64.random_raw(size).view(np.int16))[:count]
        words = (
            buffers.get("words", size, torch.int64)
            if buffers
            else torch.empty(size, dtype=torch.int64, device=self.device)
        )
        words.random_(-(1 << 63), None, generator=self.gen)  # the full 64-bit range
        return words.view(torch.int16)[:count]


def uniform(shape, low: float, high: float, gen: torch.Generator, device) -> torch.Tensor:
    """torch.rand on [low, high)."""
    return torch.rand(shape, generator=gen, device=device).mul_(high - low).add_(low)


def uniform16(shape, low: float, high: float, gen: torch.Generator, device) -> torch.Tensor:
    """Uniform on [low, high) at 16-bit resolution (cell midpoints), for noise fields that are
    smoothed afterwards: several times cheaper than torch.rand on a CPU core."""
    cells = RandomWords(gen, device).draw(math.prod(shape)).to(torch.float32).add_(32768.5)
    return cells.mul_((high - low) / (1 << TABLE_BITS)).add_(low).view(shape)
