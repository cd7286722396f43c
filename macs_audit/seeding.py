"""Stable seeds derived from names and positions (Python's hash() is salted per process)."""

import hashlib


def derive_seed(*parts) -> int:
    """A 63-bit seed from any printable parts, identical across processes and machines."""
    digest = hashlib.sha256("\x1f".join(str(p) for p in parts).encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1
