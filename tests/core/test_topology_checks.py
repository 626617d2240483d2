"""Topology refuses a malformed link set, naming the first bad link in link order."""

from __future__ import annotations

import pytest

from topoweb.core.model import Device, DocumentError, Link, Topology

DEVICES = (Device("GPU0", "gpu", 0), Device("GPU1", "gpu", 1), Device("NIC0", "nic", 0))
GOOD = (Link("GPU0", "GPU1", "NV4"), Link("GPU0", "NIC0", "PIX"), Link("GPU1", "NIC0", "SYS"))


def test_a_complete_link_set_builds_and_finds_each_pair_either_way() -> None:
    topo = Topology(DEVICES, GOOD)
    assert topo.link("NIC0", "GPU1") == Link("NIC0", "GPU1", "SYS")  # facing as asked
    assert topo.link("GPU1", "NIC0") == GOOD[2]
    assert topo.link_class("GPU1", "GPU0") == "NV4"
    assert topo.class_row("GPU0") == {"GPU0": "X", "GPU1": "NV4", "NIC0": "PIX"}


@pytest.mark.parametrize(("a", "b"), [("GPU0", "GPU0"), ("GPU0", "GPU9"), ("GPU9", "GPU0")])
def test_no_link_joins_a_device_to_itself_or_to_a_stranger(a: str, b: str) -> None:
    with pytest.raises(KeyError):
        Topology(DEVICES, GOOD).link(a, b)


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (Link("GPU0", "GPU9", "PIX"), "link GPU0-GPU9 does not join two distinct devices"),
        (Link("GPU9", "NIC0", "PIX"), "link GPU9-NIC0 does not join two distinct devices"),
        (Link("GPU1", "GPU1", "PIX"), "link GPU1-GPU1 does not join two distinct devices"),
        (Link("GPU0", "NIC0", "SOC"), "link GPU0-NIC0 has invalid class 'SOC'"),
        (Link("GPU0", "NIC0", "X"), "link GPU0-NIC0 has invalid class 'X'"),
        (Link("GPU0", "NIC0", "NV0"), "link GPU0-NIC0 has invalid class 'NV0'"),
    ],
)
def test_the_first_bad_link_is_named(bad: Link, message: str) -> None:
    # A later bad link too: the message names the one that comes first.
    links = (GOOD[0], bad, Link("GPU1", "NIC0", "BOGUS"))
    with pytest.raises(DocumentError) as caught:
        Topology(DEVICES, links)
    assert str(caught.value) == message


def test_a_pair_given_twice_is_refused() -> None:
    links = (GOOD[0], GOOD[1], Link("NIC0", "GPU0", "PIX"))
    with pytest.raises(DocumentError, match="3 devices need 3 distinct links, got 3"):
        Topology(DEVICES, links)


def test_duplicate_device_ids_are_refused() -> None:
    with pytest.raises(DocumentError, match="duplicate device ids"):
        Topology((*DEVICES, Device("GPU0", "gpu", 2)), GOOD)


def test_two_topologies_of_the_same_devices_keep_their_own_links() -> None:
    first = Topology(DEVICES, GOOD)
    second = Topology(DEVICES, (GOOD[0], Link("NIC0", "GPU0", "PHB"), GOOD[2]))
    assert first.link_class("GPU0", "NIC0") == "PIX"
    assert second.link_class("GPU0", "NIC0") == "PHB"
    assert second.link("GPU0", "NIC0") == Link("GPU0", "NIC0", "PHB")


def test_from_checked_skips_the_checks_but_builds_the_same_topology_and_rows() -> None:
    checked = Topology(DEVICES, GOOD, ("a warning",))
    trusted = Topology.from_checked(DEVICES, GOOD, ("a warning",))
    # The class rows wait for a look-up.
    assert trusted == checked and "_class_rows" not in vars(trusted)
    assert trusted.link("NIC0", "GPU1") == Link("NIC0", "GPU1", "SYS")
    assert trusted.link_class("GPU1", "GPU0") == "NV4"
    assert trusted.link_class("GPU0", "GPU0") == "X"
    with pytest.raises(KeyError):
        trusted.link("GPU0", "GPU9")
    # Every field __init__ sets, and the class rows once built: nothing missing or extra.
    assert vars(trusted) == vars(checked)
    assert (
        trusted.details == {}
        and trusted.details is not Topology.from_checked(DEVICES, GOOD, ()).details
    )
