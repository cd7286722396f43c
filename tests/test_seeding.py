"""macs_audit.seeding: 63-bit seeds from names and positions, the same in every process and on every machine, by
the package's rule (PARTS) and the corruptions' older per-batch rule (CORRUPTION_BATCHES)."""

import hashlib
import os
import subprocess
import sys

from macs_audit.seeding import CORRUPTION_BATCHES, PARTS, SeedRule, derive_seed


def test_the_package_rule_is_sha256_of_the_parts_high_63_bits():
    """Recomputed from the rule as documented: the parts as text joined by \\x1f, SHA-256's first 8 bytes read
    little-endian, the high 63 bits kept."""
    parts = ("perturbation", 0, "noise", 3)
    digest = hashlib.sha256("perturbation\x1f0\x1fnoise\x1f3".encode()).digest()[:8]
    assert derive_seed(*parts) == int.from_bytes(digest, "little") >> 1
    assert derive_seed("perturbation", 0, "noise", 0) == 2_731_969_506_781_076_793  # pinned: seeded bytes depend on it


def test_the_corruption_rule_is_blake2b_of_the_prefixed_key_low_63_bits():
    parts = (0, "fog", 3, 1000)
    digest = hashlib.blake2b(b"macs-audit/corruptions/0/fog/3/1000", digest_size=8).digest()
    assert derive_seed(*parts, rule=CORRUPTION_BATCHES) == int.from_bytes(digest, "big") & (2**63 - 1)
    assert derive_seed(0, "fog", 3, 0, rule=CORRUPTION_BATCHES) == 7_280_092_846_327_443_954  # pinned


def test_seeds_are_63_bit_and_tell_the_parts_apart():
    seeds = {derive_seed("view", i, name) for i in range(200) for name in ("noise", "blur")}
    assert len(seeds) == 400 and all(0 <= s < 2**63 for s in seeds)
    # The separator keeps the parts apart: the same characters split otherwise give another seed.
    assert derive_seed("ab", "c") != derive_seed("a", "bc")
    assert derive_seed(1, 2) == derive_seed("1", "2")  # parts are read as their text
    assert derive_seed() == PARTS.seed(())
    assert derive_seed(0, "fog", 3, 0) != derive_seed(0, "fog", 3, 0, rule=CORRUPTION_BATCHES)


def test_a_rule_keeps_high_or_low_bits_of_its_digest():
    every_bit = SeedRule("", "/", lambda key: b"\xff" * 8, "big", keep_high=True)
    assert every_bit.seed(("x",)) == 2**63 - 1
    top_only = SeedRule("", "/", lambda key: b"\x80" + b"\x00" * 7, "big", keep_high=False)
    assert top_only.seed(("x",)) == 0  # the top bit is the one dropped
    assert SeedRule("", "/", lambda key: b"\x80" + b"\x00" * 7, "big", keep_high=True).seed(()) == 2**62


def test_seeds_do_not_depend_on_the_process_hash_salt():
    """Python's hash() changes with PYTHONHASHSEED; derive_seed must not."""
    code = "from macs_audit.seeding import derive_seed; print(derive_seed('clean', 7, ('a', 1)))"
    printed = set()
    for salt in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": salt}
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
        printed.add(done.stdout.strip())
    assert printed == {str(derive_seed("clean", 7, ("a", 1)))}
