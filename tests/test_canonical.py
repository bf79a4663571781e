"""The fast canonical serializer writes exactly what the spec's json.dumps call writes."""

from __future__ import annotations

import json
import random

from app import record


def reference(value) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def random_text(rng: random.Random) -> str:
    ranges = [(0, 0x80), (0x80, 0x800), (0x800, 0xD800), (0xE000, 0x110000), (0, 0x20), (0x2028, 0x202A)]
    return "".join(chr(rng.randrange(*rng.choice(ranges))) for _ in range(rng.randrange(0, 16)))


def test_same_bytes_as_the_spec_call_on_random_values():
    rng = random.Random(20261129)
    for _ in range(5000):
        key = random_text(rng)
        value = {key: [random_text(rng), rng.randrange(-2**62, 2**62), None, True, False,
                       {"b": random_text(rng), "a": rng.randrange(100), random_text(rng): []}]}
        assert record.canonical_bytes(value) == reference(value)


def test_big_integers_fall_back():
    value = {"n": 2**70}
    assert record.canonical_bytes(value) == reference(value)
