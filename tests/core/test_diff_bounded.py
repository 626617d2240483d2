"""The topology comparison is bounded before it starts (issue 24 item 1): two topologies of any
sizes up to the limits are compared with a budget of pair look-ups decided from their sizes,
whatever their wiring, directly and through the health checks (previous snapshot, the SKU's
usual wiring)."""

from __future__ import annotations

import itertools
import time

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.core import topologies as T
from topoweb.core.health import check_health, diff_topologies
from topoweb.core.health.diff import MAX_PAIR_LOOKUPS
from topoweb.core.model import Device, Link, Topology

# The largest topology ingest accepts (TOPOWEB_MAX_GPUS, TOPOWEB_MAX_DEVICES).
MAX_GPUS, MAX_DEVICES = 576, 640
CLASSES = ("NV18", "NV4", "NV1", "PIX", "PXB", "PHB", "NODE", "SYS")


def wired(gpus: int, nics: int, block: int, salt: int) -> Topology:
    """GPUs in NVLink blocks of `block`, NICs on PCIe; `salt` varies the classes, so two
    topologies of one size may be wired differently."""
    devices = [Device(f"GPU{i}", "gpu", i, None, str(i % 2)) for i in range(gpus)]
    devices += [Device(f"NIC{i}", "nic", i, None, str(i % 2)) for i in range(nics)]

    def cls(a: int, b: int) -> str:
        if a < gpus and b < gpus and a // block == b // block:
            return CLASSES[(a + b + salt) % 3]
        return CLASSES[3 + (a * b + salt) % 5]

    links = [
        Link(devices[a].id, devices[b].id, cls(a, b))
        for a, b in itertools.combinations(range(len(devices)), 2)
    ]
    return Topology(tuple(devices), tuple(links))


topologies = st.builds(
    wired,
    gpus=st.one_of(st.integers(1, 32), st.integers(1, MAX_GPUS)),
    nics=st.integers(0, MAX_DEVICES - MAX_GPUS),
    block=st.sampled_from([1, 2, 4, 8, 72]),
    salt=st.integers(0, 6),
)


def spent_within_budget(old: Topology, new: Topology) -> None:
    started = time.thread_time()
    diff = diff_topologies(old, new)
    took = time.thread_time() - started
    matched = sum(
        min(
            len([d for d in old.devices if d.kind == k]),
            len([d for d in new.devices if d.kind == k]),
        )
        for k in ("gpu", "nic")
    )
    # The first candidate is always scored, whatever its size.
    assert diff.lookups <= max(MAX_PAIR_LOOKUPS, matched * (matched + 1) // 2)
    assert took < 1.0, f"{len(old.devices)} vs {len(new.devices)} devices took {took:.2f} s"
    # Every device is matched, gone or added.
    assert len(old.devices) - len(diff.gone) == len(new.devices) - len(diff.added)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(old=topologies, new=topologies)
def test_any_two_topologies_up_to_the_limits_are_compared_within_the_budget(
    old: Topology, new: Topology
) -> None:
    spent_within_budget(old, new)


def test_an_8_gpu_snapshot_against_a_45_gpu_one_is_compared_at_once() -> None:
    # Every order-preserving matching of 8 GPUs among 45 is 215 million candidates.
    small, large = wired(8, 4, 8, 0), wired(45, 4, 8, 0)
    spent_within_budget(small, large)
    spent_within_budget(large, small)
    diff = diff_topologies(small, large)
    assert len(diff.added) == 37 and not diff.gone


def test_a_gpu_off_the_bus_of_a_large_server_is_still_found_within_the_budget() -> None:
    # 32 GPUs: one order-preserving matching per position of the missing GPU.
    full = wired(32, 8, 4, 1)
    short = Topology(
        tuple(d for d in full.devices if d.id != "GPU5"),
        tuple(lk for lk in full.links if "GPU5" not in (lk.a, lk.b)),
    )
    diff = diff_topologies(full, short)
    assert diff.gone == ("GPU5",) and not diff.added and not diff.changed


def test_a_report_claiming_another_skus_wiring_is_checked_against_it_at_once() -> None:
    # The SKU's usual wiring is an 8-GPU box; the report is a 72-GPU rack.
    started = time.thread_time()
    findings = check_health(T.nvl72(), sku_reference=T.h200_nv18_12nic())
    assert time.thread_time() - started < 1.0
    assert "topology_drift" in {f.kind for f in findings}
    started = time.thread_time()
    findings = check_health(T.h200_nv18_12nic(), previous=T.nvl72())
    assert time.thread_time() - started < 1.0
    assert "topology_drift" in {f.kind for f in findings}
