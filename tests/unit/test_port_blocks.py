"""The tests' port slots (tests/support/port_blocks.py): held across suites, never ephemeral."""

from __future__ import annotations

import os
import random

import pytest

from tests.support import port_blocks


def test_no_slot_is_taken_in_the_kernels_ephemeral_range(tmp_path, monkeypatch):
    monkeypatch.setattr(port_blocks, "LOCKS", tmp_path / "locks")
    low, high = port_blocks.ephemeral_range()
    taken = [port_blocks.take(100, 10000, 65400, random.Random(seed)) for seed in range(40)]
    assert all(start + 100 <= low or start > high for start in taken), (low, high, taken)
    with pytest.raises(RuntimeError, match="ephemeral range"):
        port_blocks.take(50, low, high)


def test_a_held_slot_is_not_handed_out_again_until_it_is_given_back(tmp_path, monkeypatch):
    monkeypatch.setattr(port_blocks, "LOCKS", tmp_path / "locks")
    first = port_blocks.take(50, 20000, 20100)
    with pytest.raises(RuntimeError, match="other tests hold them all"):
        port_blocks.take(50, 20000, 20100)
    port_blocks.release()
    assert port_blocks.take(50, 20000, 20100) == first


def test_the_ephemeral_range_is_read_from_the_kernel_or_linuxs_default(tmp_path):
    (tmp_path / "range").write_text("40000\t50000\n")
    assert port_blocks.ephemeral_range(tmp_path / "range") == (40000, 50000)
    assert port_blocks.ephemeral_range(tmp_path / "missing") == (32768, 60999)


def test_a_range_taken_outside_a_test_is_kept_after_the_next_test_ends(tmp_path, monkeypatch):
    """A module's settings made at collection (a parametrize) are used by all its tests."""
    monkeypatch.setattr(port_blocks, "LOCKS", tmp_path / "locks")
    monkeypatch.setattr(port_blocks, "_kept", [])
    port_blocks.release()  # as between two tests
    at_collection = port_blocks.take(50, 20000, 20100)
    port_blocks.test_began()
    port_blocks.release()
    with pytest.raises(RuntimeError, match="other tests hold them all"):
        port_blocks.take(50, 20000, 20100)
    while port_blocks._kept:
        os.close(port_blocks._kept.pop())
    assert port_blocks.take(50, 20000, 20100) == at_collection
    while port_blocks._kept:
        os.close(port_blocks._kept.pop())
