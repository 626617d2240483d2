"""What issue 28 asks of `cli fabric`'s JSON and of the structure behind it, checked apart from
the reader: the fields of each section; tiers from the graph whatever the switches are called
(ibnet_01 with its leaf and spine names swapped, and a three-tier fabric whose names lie); each
oversubscribed leaf of ibnet_01, counted from the raw port lines."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import pytest

from tests.core.test_fabric import (
    FIXTURES,
    IBNET_01,
    fabric_doc,
    raw_blocks,
    raw_uplinks,
    short,
)

LANE_GBPS = {"EDR": 25, "HDR": 50, "NDR": 100, "XDR": 200}


@pytest.fixture(scope="module")
def ibnet_01() -> dict[str, Any]:
    return fabric_doc(IBNET_01.read_text())


def test_the_json_has_every_field_the_issue_lists(ibnet_01: dict[str, Any]) -> None:
    assert {"switches", "links", "hosts", "findings", "warnings"} <= set(ibnet_01)
    assert ibnet_01["warnings"] == []
    for switch in ibnet_01["switches"]:
        assert {"name", "guid", "tier"} <= set(switch)
        assert switch["tier"] in ("leaf", "spine", "core")
    for link in ibnet_01["links"]:
        assert {"a", "a_port", "b", "b_port", "width", "speed", "gbps"} <= set(link)
        assert isinstance(link["a_port"], int) and isinstance(link["b_port"], int)
        assert (link["width"], link["speed"], link["gbps"]) == ("4x", "NDR", 400.0)
    for host in ibnet_01["hosts"]:
        assert {"hostname", "hcas"} <= set(host) and host["hcas"]
        assert host["hostname"] is None or isinstance(host["hostname"], str)
        for hca in host["hcas"]:
            assert {"name", "guid", "switch", "port"} <= set(hca)
    names = {s["name"] for s in ibnet_01["switches"]}
    hostnames = {h["hostname"] for h in ibnet_01["hosts"]} | {
        f"H-{h['hcas'][0]['guid']}" for h in ibnet_01["hosts"] if h["hostname"] is None
    }
    for finding in ibnet_01["findings"]:
        assert {"kind", "severity", "message", "switches", "hosts"} <= set(finding)
        assert finding["severity"] in ("critical", "warning", "info")
        assert set(finding["switches"]) <= names and set(finding["hosts"]) <= hostnames


def test_tiers_come_from_the_graph_when_the_names_say_the_opposite() -> None:
    text = IBNET_01.read_text()
    swapped = text.replace("IBLEAF", "\0").replace("IBSPINE", "IBLEAF").replace("\0", "IBSPINE")
    doc = fabric_doc(swapped)
    tiers = {s["name"]: s["tier"] for s in doc["switches"]}
    # The 31 switches that carry hosts are still the leaves, now named IBSPINE.
    leaves = {leaf.replace("IBLEAF", "IBSPINE") for leaf in raw_uplinks(text)}
    assert len(leaves) == 31
    assert {n for n, t in tiers.items() if t == "leaf"} == leaves
    assert {n for n, t in tiers.items() if t == "spine"} == {n for n in tiers if "IBLEAF" in n}
    assert len(tiers) == 40


def port_line(port: int, peer: str, peer_port: int, desc: str, ca: bool) -> str:
    kind = "H" if ca else "S"
    tail = f"({peer})" if ca else ""
    return f'[{port}]\t"{kind}-{peer}"[{peer_port}]{tail}\t\t# "{desc}" lid 1 4xNDR'


def three_tiers() -> str:
    """Four leaves of two hosts each, two spines (two leaves each), one core above both spines;
    the leaves are called CORE, the spines LEAF, the core SPINE."""
    leaves = [f"{n:016x}" for n in range(0x10, 0x14)]
    spines = [f"{n:016x}" for n in (0x20, 0x21)]
    core = f"{0x30:016x}"
    desc = {g: f"MF0;CORE-{i}:MQM9700/U1" for i, g in enumerate(leaves)}
    desc |= {g: f"MF0;LEAF-{i}:MQM9700/U1" for i, g in enumerate(spines)}
    desc[core] = "MF0;SPINE-0:MQM9700/U1"
    ports: dict[str, list[tuple[int, str, int, bool]]] = defaultdict(list)
    cas: list[tuple[str, str, str, int]] = []  # guid, description, switch, port

    def cable(a: str, b: str, b_is_ca: bool = False) -> None:
        pa = len(ports[a]) + 1
        pb = 1 if b_is_ca else len(ports[b]) + 1
        ports[a].append((pa, b, pb, b_is_ca))
        if b_is_ca:
            cas.append((b, desc[b], a, pa))
        else:
            ports[b].append((pb, a, pa, False))

    for i, leaf in enumerate(leaves):
        for h in range(2):
            hca = f"{0xA0 + 2 * i + h:016x}"
            desc[hca] = f"node{2 * i + h:02d} mlx5_0"
            cable(leaf, hca, b_is_ca=True)
        cable(leaf, spines[i // 2])
    for spine in spines:
        cable(spine, core)
    out = []
    for guid in [*leaves, *spines, core]:
        out += [
            f"switchguid=0x{guid}({guid})",
            f'Switch\t36 "S-{guid}"\t\t# "{desc[guid]}" enhanced port 0 lid 1 lmc 0',
        ]
        out += [port_line(p, peer, pp, desc[peer], ca) for p, peer, pp, ca in ports[guid]]
        out.append("")
    for guid, description, switch, port in cas:
        out += [
            f"caguid=0x{guid}",
            f'Ca\t1 "H-{guid}"\t\t# "{description}"',
            f'[1]({guid}) \t"S-{switch}"[{port}]\t\t# lid 2 lmc 0 "{desc[switch]}" lid 1 4xNDR',
            "",
        ]
    return "\n".join(out)


def test_a_three_tier_fabric_has_cores_above_its_spines_whatever_their_names() -> None:
    doc = fabric_doc(three_tiers())
    assert doc["warnings"] == []
    tiers = {s["name"]: s["tier"] for s in doc["switches"]}
    assert tiers == {
        "CORE-0": "leaf", "CORE-1": "leaf", "CORE-2": "leaf", "CORE-3": "leaf",
        "LEAF-0": "spine", "LEAF-1": "spine", "SPINE-0": "core",
    }  # fmt: skip
    assert {h["hostname"]: h["hcas"][0]["switch"] for h in doc["hosts"]}["node05"] == "CORE-2"


def raw_leaf_gbps(text: str) -> dict[str, tuple[float, float]]:
    """Leaf -> (Gb/s of its host ports, Gb/s of its switch ports), from the switch blocks:
    a leaf is a switch with a host's HCA on a port (SHARP aggregation nodes are not hosts);
    each port line ends in its rate, `<width>x<speed>`."""
    out = {}
    for kind, desc, ports in raw_blocks(text):
        hosts = [p for p in ports if '"H-' in p and "Aggregation" not in p]
        if kind != "Switch" or not hosts:
            continue

        def gbps(lines: list[str]) -> float:
            total = 0.0
            for line in lines:
                width, _, speed = line.split()[-1].partition("x")
                total += int(width) * LANE_GBPS[speed]
            return total

        out[short(desc)] = (gbps(hosts), gbps([p for p in ports if '"S-' in p]))
    return out


def test_each_oversubscribed_leaf_is_found_with_its_figures(ibnet_01: dict[str, Any]) -> None:
    expected = {
        leaf: (down, up)
        for leaf, (down, up) in raw_leaf_gbps(IBNET_01.read_text()).items()
        if down > up
    }
    assert len(expected) == 12
    found = {
        f["switches"][0]: f for f in ibnet_01["findings"] if f["kind"] == "leaf_oversubscribed"
    }
    assert set(found) == set(expected)
    for leaf, (down, up) in expected.items():
        assert (
            f"{leaf} carries {down:g} Gb/s of hosts on {up:g} Gb/s of uplinks"
            in (found[leaf]["message"])
        )
        assert found[leaf]["severity"] == "warning"


def test_one_hostname_on_two_hosts_is_found_with_both_places(ibnet_01: dict[str, Any]) -> None:
    """ibnet_01 has a host that set its NodeDescription to `localhost` (HCA-1, -2, -6 on port
    10 of unit 01's leaves). Planted: a07-p1-dgx-03-c01 (port 1 of unit 03's leaves) called
    `localhost` too. The capture cannot tell their HCAs apart; the finding says so."""
    assert not [f for f in ibnet_01["findings"] if f["kind"] == "shared_hostname"]
    text = IBNET_01.read_text()
    assert text.count('"a07-p1-dgx-03-c01 ') == 8  # four HCAs, each printed from both ends
    doc = fabric_doc(text.replace('"a07-p1-dgx-03-c01 ', '"localhost '))
    (shared,) = [f for f in doc["findings"] if f["kind"] == "shared_hostname"]
    assert shared["hosts"] == ["localhost"] and shared["severity"] == "warning"
    places = {
        device: {(p["switch"], p["port"]) for p in where}
        for device, where in shared["evidence"]["devices"].items()
    }
    assert places == {
        f"HCA-{n}": {(f"A09-P1-IBLEAF-{rail}-01", 10), (f"A09-P1-IBLEAF-{rail}-03", 1)}
        for n, rail in (("1", "01"), ("2", "02"), ("6", "04"))
    }
    assert "HCA-1 on A09-P1-IBLEAF-01-01 port 10, A09-P1-IBLEAF-01-03 port 1" in shared["message"]


def test_a_switch_whose_block_is_missing_gets_no_tier_it_cannot_have() -> None:
    """A switch named only by its peers' lines: touching a leaf it is a spine, as trees are
    cabled; touching only spines it may be a core or a leaf whose hosts went with its block,
    so it gets no tier (a cut-off EDR capture read its two leaves as cores)."""
    blocks = three_tiers().split("\n\n")
    without = {
        name: "\n\n".join(b for b in blocks if f"{name}:MQM9700" not in b.split("\n")[1])
        for name in ("SPINE-0", "LEAF-1", "CORE-3")
    }
    tiers = {}
    for name, text in without.items():
        doc = fabric_doc(text)
        tiers[name] = {s["name"]: s["tier"] for s in doc["switches"]}[name]
        warnings = "\n".join(doc["warnings"])
        assert "block is missing" in warnings
        if name == "SPINE-0":
            assert (
                "1 switch(es) whose own block is missing, seen only from spines, left " in warnings
            )
            assert "SPINE-0" in warnings.rsplit("\n", 1)[-1]
    # The core is seen only from the spines; a spine from its leaves; a leaf from its hosts'
    # own blocks, which name it.
    assert tiers == {"SPINE-0": "unknown", "LEAF-1": "spine", "CORE-3": "leaf"}


def test_switches_of_one_description_get_names_that_differ() -> None:
    """Switches left at one NodeDescription are told apart by their GUID's tail, as long as it
    takes: two whose GUIDs end alike (a QDR paste, "...0535c3ff" and "...0235c3ff") were both
    named "...~c3ff"."""
    desc = "BC 36-Port QSFP QDR Infiniband Switch"
    text = (
        f'Switch  36 "S-080038000235c7ef" # "{desc}" base port 0 lid 16 lmc 0\n'
        '[35]    "H-080038000139e357"[1](80038000139e308)   # "r3-1016 HCA-1" lid 3 4xQDR\n\n'
        'Ca      1 "H-080038000139e307"          # "r3-1016 HCA-1"\n'
        f'[1](80038000139e328)    "S-080038000535c3ff"[35]   # lid 3 lmc 0 "{desc}" lid 16 '
        "4xQDR\n\n"
        'Ca      1 "H-080038000138a325"          # "1015 HCA-1"\n'
        f'[1](80038000139a526)    "S-080038000235c3ff"[34]   # lid 5 lmc 0 "{desc}" lid 16 4xQDR\n'
    )
    names = {s["guid"]: s["name"] for s in fabric_doc(text)["switches"]}
    assert names == {
        "080038000235c7ef": f"{desc}~235c7ef",
        "080038000535c3ff": f"{desc}~535c3ff",
        "080038000235c3ff": f"{desc}~235c3ff",
    }


# A lab fabric from NVIDIA's ibdiagpath how-to: an EDR SwitchIB with three loopback cables and an
# FDR SX6012 below it, HCAs from SDR to EDR, hosts cabling both their HCAs to one switch.
IBNET_03 = FIXTURES / "ibnet_03_switchib-edr-sx6012-fdr-loopback-cables.txt"


@pytest.fixture(scope="module")
def ibnet_03() -> dict[str, Any]:
    return fabric_doc(IBNET_03.read_text())


def test_a_loopback_cable_is_named_and_is_no_peer_of_the_links_between_switches(
    ibnet_03: dict[str, Any],
) -> None:
    warnings = ibnet_03["warnings"]
    loops = [w for w in warnings if "(a loopback" in w]
    assert loops == [
        f"line {n}: SwitchIB Mellanox Technologies port {p} is cabled to its own port {q} "
        "(a loopback: it joins the switch to no other)"
        for n, p, q in ((12, 1, 2), (15, 19, 21), (17, 29, 30))
    ]
    # The FDR switch's link to the EDR one runs as fast as the FDR switch runs anywhere: it was
    # called downtrained against the EDR loopbacks.
    slow = [f["evidence"] for f in ibnet_03["findings"] if f["kind"] == "downtrained_link"]
    assert [(e["a"], e["a_port"], e["rate"]) for e in slow] == [("switch-de779e", 8, "4xSDR")]


def test_leaves_carrying_whole_hosts_have_no_rail_to_be_off(ibnet_03: dict[str, Any]) -> None:
    # r-ufm101 cables HCA-1 and HCA-2 to the SX6012; each switch carries as many HCA-1s as
    # HCA-2s. Their HCA-2s were called off a "rail-0 leaf".
    hcas = {(h["hostname"], c["name"]): c["switch"] for h in ibnet_03["hosts"] for c in h["hcas"]}
    assert hcas[("r-ufm101", "HCA-1")] == hcas[("r-ufm101", "HCA-2")] == "switch-de779e"
    assert [f for f in ibnet_03["findings"] if f["kind"] == "off_rail_hca"] == []


def test_a_query_that_failed_during_discovery_is_named_for_what_it_may_have_lost(
    ibnet_03: dict[str, Any],
) -> None:
    # The capture opens with libibnetdisc's stderr line for a node that did not answer.
    assert ibnet_03["warnings"][0] == (
        "line 1: ibnetdiscover's query to the node at directed route 0,1,1,31 failed "
        "(Connection timed out): that node, and what only it leads to, may be missing from the "
        "capture"
    )


def test_hcas_named_by_a_bare_name_are_not_said_to_carry_the_firmware_default() -> None:
    # ibsim's fabric, as its tutorial's `ibnetdiscover` printed it: HCAs named "Hca1", "Hca2".
    text = (
        "switchguid=0x200000(200000)\n"
        'Switch  8 "S-0000000000200000"          # "Switch1" base port 0 lid 1 lmc 0\n'
        '[1]     "H-0000000000100000"[1](100001)                 # "Hca1" lid 2 4xSDR\n\n'
        "caguid=0x100000\n"
        'Ca      2 "H-0000000000100000"          # "Hca1"\n'
        '[1](100001)     "S-0000000000200000"[1]         # lid 2 lmc 0 "Switch1" lid 1 4xSDR\n'
    )
    (unnamed,) = [f for f in fabric_doc(text)["findings"] if f["kind"] == "unnamed_hcas"]
    assert unnamed["message"].startswith(
        "1 HCA(s) carry a NodeDescription not of the form `<hostname> <device>` (a firmware "
        "default, or a bare name)"
    )
