"""Stable seeds derived from names and positions (Python's hash() is salted per process).

One function, `derive_seed`, and the rules it derives by: a rule is how the parts become a key and the
key's digest a 63-bit seed. PARTS is the package's rule; CORRUPTION_BATCHES is the corruptions' per-batch
rule (views/corruptions/apply.batch_seed), which is older and kept because it is part of their output
contract: the generated corruption grids, the files written from them and the tests that pin them hold
the bytes its seeds give, and PARTS gives other seeds for the same parts.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable


@dataclasses.dataclass(frozen=True)
class SeedRule:
    """The key (`prefix` + the parts as text, joined by `separator`), its 8-byte `digest`, read in
    `byteorder`, and the 63 bits kept: the high ones (`keep_high`) or the low ones."""

    prefix: str
    separator: str
    digest: Callable[[bytes], bytes]
    byteorder: str
    keep_high: bool

    def seed(self, parts: tuple) -> int:
        key = (self.prefix + self.separator.join(str(p) for p in parts)).encode()
        value = int.from_bytes(self.digest(key), self.byteorder)  # type: ignore[arg-type]
        return value >> 1 if self.keep_high else value & 0x7FFF_FFFF_FFFF_FFFF


PARTS = SeedRule("", "\x1f", lambda key: hashlib.sha256(key).digest()[:8], "little", keep_high=True)
CORRUPTION_BATCHES = SeedRule(
    "macs-audit/corruptions/", "/", lambda key: hashlib.blake2b(key, digest_size=8).digest(), "big", keep_high=False
)


def derive_seed(*parts, rule: SeedRule = PARTS) -> int:
    """A 63-bit seed from any printable parts, identical across processes and machines."""
    return rule.seed(parts)
