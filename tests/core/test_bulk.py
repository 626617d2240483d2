"""The collector pause around building a large topology's objects: nested and failing blocks
leave the garbage collector as they found it, and a large matrix reads the same with it."""

from __future__ import annotations

import gc
import threading

import pytest

from tests import synthetic
from topoweb.core.bulk import collector_paused
from topoweb.core.formats.topo import parse
from topoweb.core.model import Topology


def test_nested_pauses_enable_the_collector_when_the_outermost_ends() -> None:
    assert gc.isenabled()
    with collector_paused():
        assert not gc.isenabled()
        with collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()


def test_a_failing_block_still_enables_it() -> None:
    with pytest.raises(ValueError), collector_paused():
        raise ValueError("a reader refused the matrix")
    assert gc.isenabled()


def test_a_collector_disabled_before_stays_disabled() -> None:
    gc.disable()
    try:
        with collector_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_a_pause_in_another_thread_ends_with_the_last_one() -> None:
    inside, leave = threading.Event(), threading.Event()

    def other() -> None:
        with collector_paused():
            inside.set()
            leave.wait(5)

    thread = threading.Thread(target=other)
    thread.start()
    inside.wait(5)
    with collector_paused():
        pass
    assert not gc.isenabled()  # the other thread's pause still holds
    leave.set()
    thread.join(5)
    assert gc.isenabled()


def test_a_large_matrix_reads_and_round_trips_with_the_collector_back_on() -> None:
    topology = parse(synthetic.many_nics(8, 96))
    assert gc.isenabled()
    assert len(topology.links) == 104 * 103 // 2
    assert Topology.from_document(topology.to_document()) == topology
    assert gc.isenabled()
