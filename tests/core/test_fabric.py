"""The InfiniBand fabric: the ibnetdiscover reader, the structure recovered from the graph, the
findings, and `python -m topoweb.core.cli fabric FILE`, on NVIDIA/topograph's real capture
(ibnet_01), its cut-off one (ibnet_02), and copies of ibnet_01 with faults planted in them.

What the tests expect is counted here from the raw lines with a few string operations, apart
from the reader."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest

from topoweb.core.fabric import build_fabric
from topoweb.core.fabric_findings import fabric_findings
from topoweb.core.formats import ParseError, detect_format, parse_text
from topoweb.core.formats.ibnet import IbnetCapture, parse

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"
IBNET_01 = FIXTURES / "ibnet_01_dgx-h100-ndr-fabric-40-switches-582-hcas.txt"
IBNET_02 = FIXTURES / "ibnet_02_gb200-fabric-partial-bad.txt"


def run_cli(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "topoweb.core.cli", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        input=stdin,
    )


def fabric_doc(text: str) -> dict[str, Any]:
    result = run_cli("fabric", "-", stdin=text)
    assert result.returncode == 0, result.stderr
    doc: dict[str, Any] = json.loads(result.stdout)
    return doc


# --- independent counts over the raw lines -----------------------------------------------------


def raw_blocks(text: str) -> list[tuple[str, str, list[str]]]:
    """(kind word, description, port lines) per node block: the header's quoted description."""
    blocks = []
    for chunk in text.split("\n\n"):
        lines = chunk.strip().splitlines()
        head = [ln for ln in lines if ln.startswith(("Switch", "Ca"))]
        if head:
            blocks.append(
                (
                    head[0].split()[0],
                    head[0].split('"')[3],
                    [ln for ln in lines if ln.startswith("[")],
                )
            )
    return blocks


def short(desc: str) -> str:
    """`MF0;A09-P1-IBLEAF-04-04:MQM9701/U1` -> `A09-P1-IBLEAF-04-04`."""
    return desc.split(";")[1].split(":")[0]


def raw_uplinks(text: str) -> dict[str, Counter[str]]:
    """Leaf -> spine -> link count, from the switch blocks' port lines (a leaf: a switch with
    a host-named CA on a port; a spine: a switch peer of a leaf)."""
    out: dict[str, Counter[str]] = {}
    for kind, desc, ports in raw_blocks(text):
        if kind != "Switch":
            continue
        hosts = [p for p in ports if '"H-' in p and "Aggregation" not in p]
        if hosts:
            out[short(desc)] = Counter(short(p.split('"')[3]) for p in ports if '"S-' in p)
    return out


def raw_shortfalls(text: str) -> set[tuple[str, str]]:
    up = raw_uplinks(text)
    spines = {s for c in up.values() for s in c}
    found = set()
    for spine in spines:
        usual = Counter(c[spine] for c in up.values()).most_common(1)[0][0]
        found |= {(leaf, spine) for leaf, c in up.items() if c[spine] < usual}
    return found


def raw_rails(text: str) -> dict[str, dict[str, str]]:
    """Host -> device -> leaf, from the CA blocks `"<host> <device>"` and their one port line."""
    rails: dict[str, dict[str, str]] = defaultdict(dict)
    for kind, desc, ports in raw_blocks(text):
        words = desc.split()
        if kind == "Ca" and len(words) == 2 and ports:
            rails[words[0]][words[1]] = short(ports[0].split('"')[3])
    return rails


# --- reader --------------------------------------------------------------------------------------


def test_parse_detects_ibnetdiscover_and_reads_every_node_and_link() -> None:
    text = IBNET_01.read_text()
    assert detect_format(text) == "ibnetdiscover"
    capture = parse_text(text)
    assert isinstance(capture, IbnetCapture)
    kinds = Counter(n.kind for n in capture.nodes.values())
    assert kinds == {"switch": text.count("\nSwitch\t"), "ca": text.count("\nCa\t")}
    # Every port line names one end of a link; each link is printed from both ends.
    port_lines = len(re.findall(r"^\[\d+\]", text, re.M))
    assert len(capture.links) * 2 == port_lines
    assert {lk.rate for lk in capture.links} == {"4xNDR"}
    assert capture.warnings == ()
    leaf = capture.nodes["2c5eab0300b87b40"]
    assert (leaf.description, leaf.ports, leaf.lid) == (
        "MF0;A09-P1-IBLEAF-04-04:MQM9701/U1",
        65,
        73,
    )


def test_a_capture_indented_as_a_block_reads_as_printed() -> None:
    # As a man page or a docs code block shows one (rdma-core's ibnetdiscover.8 indents 3).
    text = IBNET_01.read_text()
    indented = "\n".join("   " + line if line else line for line in text.split("\n"))
    assert detect_format(indented) == "ibnetdiscover"
    assert parse_text(indented) == parse_text(text)


def test_full_output_reads_as_the_plain_one() -> None:
    # `ibnetdiscover --full` follows each port's rate with its raw fields, ` s=%d w=%d v=%d`
    # and ` e=%d` where extended speeds are on; Xsigo gear adds ` slot %d` or ` (scp)`
    # (rdma-core's ibnetdiscover.c). NDR is extended speed 8 on a 4x (w=2) port.
    text = IBNET_01.read_text()
    lines = text.split("\n")
    full = [line + " s=4 w=2 v=4 e=8" if line.startswith("[") else line for line in lines]
    ports = [i for i, line in enumerate(full) if line.startswith("[")]
    full[ports[0]] += " (scp)"
    full[ports[1]] += " slot 3"
    assert parse_text("\n".join(full)) == parse_text(text)


def test_document_round_trip() -> None:
    capture = parse(IBNET_01.read_text())
    again = IbnetCapture.from_document(json.loads(json.dumps(capture.to_document())))
    assert again == capture


SMALL = """\
switchguid=0x1(1)
Switch\t8 "S-0000000000000001"\t\t# "MF0;LEAF-A:MQM9700/U1" enhanced port 0 lid 1 lmc 0
[1]\t"H-00000000000000a1"[1](a1) \t\t# "node01 mlx5_0" lid 10 2xNDR
[2]\t"H-00000000000000a2"[1](a2) \t\t# "node02 mlx5_0" lid 11 4xHDR
[7]\t"S-0000000000000009"[3]\t\t# "MF0;SPINE-A:MQM9700/U1" lid 9 4xNDR

caguid=0xa1
Ca\t1 "H-00000000000000a1"\t\t# "node01 mlx5_0"
[1](a1) \t"S-0000000000000001"[1]\t\t# lid 10 lmc 0 "MF0;LEAF-A:MQM9700/U1" lid 1 4xNDR
"""


def test_widths_speeds_and_disagreeing_ends_warn_with_lines() -> None:
    capture = parse(SMALL)
    rates = {(lk.a_port, lk.rate, lk.gbps) for lk in capture.links}
    assert rates == {(1, "2xNDR", 200.0), (2, "4xHDR", 200.0), (7, "4xNDR", 400.0)}
    text = "\n".join(capture.warnings)
    # node01's two ends disagree (2xNDR on the leaf's line, 4xNDR on the CA's).
    assert (
        "line 9: the two ends of the link of line 3 disagree (2xNDR there, 4xNDR here); "
        "2xNDR is kept" in text
    )
    # The slower end is kept whichever prints first: the link runs no faster than either.
    slower_second = parse(
        SMALL.replace("lid 10 2xNDR", "lid 10 4xNDR").replace("1 4xNDR", "1 1xNDR")
    )
    assert {(lk.a_port, lk.rate) for lk in slower_second.links} == {
        (1, "1xNDR"),
        (2, "4xHDR"),
        (7, "4xNDR"),
    }
    assert "(4xNDR there, 1xNDR here); 1xNDR is kept" in "\n".join(slower_second.warnings)
    # The spine and node02 are named only by the leaf: their blocks were cut off.
    assert "line 5: switch 'MF0;SPINE-A:MQM9700/U1'" in text
    assert "line 4: ca 'node02 mlx5_0'" in text


def test_odd_lines_warn_and_a_repeated_node_is_refused() -> None:
    odd = SMALL.replace("[7]\t", "[7]garbage ").replace("caguid=0xa1", "caguid=0xa1\nhello there")
    capture = parse(odd)
    text = "\n".join(capture.warnings)
    assert "line 5: not a port line ibnetdiscover prints, skipped" in text
    assert "line 8: not an ibnetdiscover line, skipped: 'hello there'" in text
    twice = SMALL + "\n" + SMALL.split("\n\n")[1]
    with pytest.raises(ParseError) as err:
        parse(twice)
    assert err.value.line == 12 and "printed twice (first at line 8)" in err.value.message


def test_a_capture_with_its_guids_redacted_is_refused_naming_the_guid_and_line() -> None:
    # A blog's paste (QM9700 at 2xNDR, 2024) with every GUID masked: three HCAs print as
    # "H-946d<redacted>", so the links' ends cannot be told apart.
    text = (
        "root@tj01-h20-node139:/# ibnetdiscover\n#\n# Initiated from node <redacted> port "
        "<redacted>\n\nvendid=0x2c9\ndevid=0xd2f2\nsysimgguid=0x9c05<redacted>\n"
        "switchguid=0x9c05<redacted>(9c05<redacted>)\n"
        'Switch\t129 "S-9c05<redacted>"\t\t# "MF0;CNTSN-POD229-QM97-IB-02:MQM9700/U1" '
        "enhanced port 0 lid 1 lmc 0\n"
        '[1]\t"H-b83f<redacted>"[1](b83f<redacted>) \t\t# "tj01-4090-node005 mlx5_2" lid 22 '
        "2xNDR\n"
        '[2]\t"H-946d<redacted>"[1](946d<redacted>) \t\t# "tj01-4090-node004 mlx5_2" lid 27 '
        "2xNDR\n...omitted\n"
    )
    assert detect_format(text) == "ibnetdiscover"
    with pytest.raises(ParseError) as err:
        parse_text(text)
    assert err.value.line == 9
    assert 'the node GUID "S-9c05<redacted>" is not hexadecimal (redacted?)' in err.value.message


# A Voltaire 4036 QDR fabric as an OMNeT++ model's converter quotes it: the blocks alone, with
# no vendid/switchguid header lines, and a '#' inside the switch's NodeDescription.
VOLTAIRE = (
    'Switch\t36 "S-0008f10500200134"\t\t# "Voltaire 4036 # v4036" enhanced port 0 lid 1 lmc 0\n'
    '[1]\t"H-00117500007ea9b2"[1](117500007ea9b2) \t\t# "larissa HCA-1" lid 2 4xQDR\n'
    '[2]\t"H-00117500007eaa84"[1](117500007eaa84) \t\t# "triton HCA-1" lid 7 4xDDR\n'
    '[4]\t"H-001e0bffff4cafc0"[1](1e0bffff4cafc1) \t\t# "telesto HCA-1" lid 3 4xDDR\n'
    '[5]\t"H-0002c90300001dd0"[1](2c90300001dd1) \t\t# "skoll HCA-1" lid 8 4xDDR\n\n'
    'Ca\t2 "H-001e0bffff4cafc0"\t\t# "telesto HCA-1"\n'
    '[1](1e0bffff4cafc1) \t"S-0008f10500200134"[4]\t\t# lid 3 lmc 0 "Voltaire 4036 # v4036" '
    "lid 1 4xDDR\n"
)


def test_blocks_pasted_without_their_header_lines_are_read() -> None:
    assert detect_format(VOLTAIRE) == "ibnetdiscover"
    capture = parse_text(VOLTAIRE)
    assert isinstance(capture, IbnetCapture)
    assert capture.nodes["0008f10500200134"].description == "Voltaire 4036 # v4036"
    assert sorted((lk.a_port, lk.rate) for lk in capture.links) == [
        (1, "4xQDR"),
        (2, "4xDDR"),
        (4, "4xDDR"),
        (5, "4xDDR"),
    ]


def test_a_shell_prompt_in_brackets_is_not_taken_for_a_port_line() -> None:
    # `ibnetdiscover | grep <guid>` on an Oracle BDA node, pasted with its prompt.
    text = (
        "[root@bda01node05 ~]# ibnetdiscover | grep 10e0406d5aa0a0\n"
        "switchguid=0x10e0406d5aa0a0(10e0406d5aa0a0)\n"
        'Switch 36 "S-0010e0406d5aa0a0" # "SUN DCS 36P QDR bdax01sw-ib1 xxx.xxx.171.24" '
        "enhanced port 0 lid 15 lmc 0\n"
    )
    warnings = "\n".join(parse(text).warnings)
    assert "port line outside any node block" not in warnings
    assert "line 1: not an ibnetdiscover line, skipped: '[root@bda01node05 ~]#" in warnings


def test_links_an_older_ibnetdiscover_could_not_rate_are_kept_with_an_unknown_rate() -> None:
    """rdma-core's ibnetdiscover prints a width it has no name for as `??` and such a speed as
    `???` (`4x???` for NDR from a build that predates it): those links were dropped as port
    lines without a width and speed, so hosts lost their leaves and leaves their uplinks."""
    text = IBNET_01.read_text()
    old = text.replace("4xNDR", "4x???")
    plain, aged = parse(text), parse(old)
    assert [(lk.a, lk.a_port, lk.b, lk.b_port) for lk in aged.links] == [
        (lk.a, lk.a_port, lk.b, lk.b_port) for lk in plain.links
    ]
    assert {lk.rate for lk in aged.links} == {"4x???"}
    assert {lk.gbps for lk in aged.links} == {0.0}
    # A width it has no name for: `??` before the speed.
    narrow = parse(SMALL.replace("lid 11 4xHDR", "lid 11 ??HDR"))
    assert {(lk.a_port, lk.rate, lk.known) for lk in narrow.links if lk.a_port == 2} == {
        (2, "??HDR", False)
    }
    (warning,) = aged.warnings
    first = min(lk.line for lk in aged.links)
    assert warning.startswith(f"line {first}: {len(plain.links)} link(s) print their rate as ")
    assert "predates that link width or speed" in warning
    fabric, before = build_fabric(aged), build_fabric(plain)
    assert {h.guid: h.switch for host in fabric.hosts for h in host.hcas} == {
        h.guid: h.switch for host in before.hosts for h in host.hcas
    }
    kinds = {f.kind for f in fabric_findings(fabric)}
    assert not kinds & {"downtrained_link", "leaf_oversubscribed"}


@pytest.mark.parametrize("cut", [0.1, 0.37, 0.5, 0.81, 0.999])
def test_a_cut_off_capture_reads_what_is_there_and_never_crashes(cut: float) -> None:
    text = IBNET_01.read_text()
    head = text[: int(len(text) * cut)]
    capture = parse(head)  # every cut keeps the first switch block's header
    assert capture.nodes
    fabric = build_fabric(capture)
    fabric_findings(fabric)
    if cut < 0.99:
        assert any("block is missing" in w for w in capture.warnings)


# --- CLI and structure on the real fabric ---------------------------------------------------


@pytest.fixture(scope="module")
def ibnet_01() -> dict[str, Any]:
    return fabric_doc(IBNET_01.read_text())


def test_forty_switches_in_two_tiers(ibnet_01: dict[str, Any]) -> None:
    text = IBNET_01.read_text()
    leaves = set(raw_uplinks(text))
    tiers = {s["name"]: s["tier"] for s in ibnet_01["switches"]}
    assert len(tiers) == 40
    assert {n for n, t in tiers.items() if t == "leaf"} == leaves
    assert len(leaves) == 31
    assert Counter(tiers.values()) == {"leaf": 31, "spine": 9}


def test_every_host_has_its_rails(ibnet_01: dict[str, Any]) -> None:
    expected = raw_rails(IBNET_01.read_text())
    got = {
        h["hostname"]: {c["name"]: c["switch"] for c in h["hcas"]}
        for h in ibnet_01["hosts"]
        if h["hostname"]
    }
    assert got == expected
    # Rail k is one device name per kind of host, and (rail-optimised) one rail per leaf.
    rails = Counter(
        (c["name"], c["rail"]) for h in ibnet_01["hosts"] for c in h["hcas"] if c["name"]
    )
    assert {r for (_, r) in rails} == {0, 1, 2, 3}
    assert {(n, r) for (n, r) in rails if n.startswith("HCA-")} == {
        ("HCA-1", 0),
        ("HCA-2", 1),
        ("HCA-5", 2),
        ("HCA-6", 3),
    }
    # HCAs with the firmware's NodeDescription are hosts of their own, without a name.
    unnamed = [h for h in ibnet_01["hosts"] if h["hostname"] is None]
    assert len(unnamed) == IBNET_01.read_text().count(
        '"MT4129 ConnectX7   Mellanox Technologies"\n'
    )


def test_each_leaf_spine_shortfall_in_the_file_is_found(ibnet_01: dict[str, Any]) -> None:
    expected = raw_shortfalls(IBNET_01.read_text())
    assert len(expected) == 16  # 10 pairs with no cable, 6 with one where peers have two
    found = {tuple(f["switches"]) for f in ibnet_01["findings"] if f["kind"] == "missing_uplinks"}
    assert found == expected
    single = next(
        f
        for f in ibnet_01["findings"]
        if f["switches"] == ["A09-P1-IBLEAF-01-01", "A10-P1-IBSPINE-04"]
    )
    assert single["severity"] == "warning"
    assert "port 39 - A10-P1-IBSPINE-04 port 1" in single["message"]
    assert single["evidence"]["missing_ports"] == [40]


def test_no_finding_on_a_clean_leaf(ibnet_01: dict[str, Any]) -> None:
    """A leaf with all its uplinks, no more host bandwidth than uplink bandwidth, and only named
    HCAs of one device is named by no finding."""
    text = IBNET_01.read_text()
    up = raw_uplinks(text)
    shortfall_leaves = {leaf for leaf, _ in raw_shortfalls(text)}
    clean = set()
    for kind, desc, ports in raw_blocks(text):
        if kind != "Switch" or short(desc) not in up or short(desc) in shortfall_leaves:
            continue
        hcas = [p.split('"')[3] for p in ports if '"H-' in p and "Aggregation" not in p]
        devices = {h.split()[-1] for h in hcas}
        if len(hcas) <= sum(up[short(desc)].values()) and len(devices) == 1:
            if all(len(h.split()) == 2 for h in hcas):
                clean.add(short(desc))
    assert len(clean) >= 5
    named = {s for f in ibnet_01["findings"] for s in f["switches"]}
    assert not clean & named, sorted(clean & named)


def test_real_faults_beyond_the_uplinks(ibnet_01: dict[str, Any]) -> None:
    by_kind = defaultdict(list)
    for f in ibnet_01["findings"]:
        by_kind[f["kind"]].append(f)
    # b08-p1-dgx-08-c01's HCA-5 and HCA-6 are cabled to each other's leaves.
    swapped = [f for f in by_kind["off_rail_hca"] if f["hosts"] == ["b08-p1-dgx-08-c01"]]
    assert {f["evidence"]["hca"] for f in swapped} == {"HCA-5", "HCA-6"}
    assert {tuple(f["switches"]) for f in swapped} == {
        ("B09-P1-IBLEAF-03-08", "B09-P1-IBLEAF-04-08"),
        ("B09-P1-IBLEAF-04-08", "B09-P1-IBLEAF-03-08"),
    }
    assert len(by_kind["unnamed_hcas"]) == 1 and by_kind["unnamed_hcas"][0]["severity"] == "info"
    assert not by_kind["downtrained_link"]
    every = {f["kind"] for f in ibnet_01["findings"]}
    assert every <= {"missing_uplinks", "leaf_oversubscribed", "missing_hca", "off_rail_hca",
                     "unnamed_hcas"}  # fmt: skip


def test_ibnet_02_is_refused_with_its_line() -> None:
    result = run_cli("fabric", str(IBNET_02))
    assert result.returncode == 2
    assert result.stdout == ""
    assert (
        "ibnet_02_gb200-fabric-partial-bad.txt: line 10: the capture ends after ca "
        in result.stderr
    )
    assert "'dgx-gb200-n01-c1 HCA-1' with no port line and holds no switch" in result.stderr


def test_not_a_fabric_is_refused() -> None:
    result = run_cli("fabric", str(FIXTURES / "topo_01_h200-8gpu-12nic-numaid.txt"))
    assert result.returncode == 2
    assert "expected ibnetdiscover output but this looks like topology output" in result.stderr


@pytest.mark.parametrize(
    ("text", "line", "named"),
    [
        # As a QDR cluster's iblinkinfo printed it (a public capture).
        (
            "CA: ip-160 HCA-1:\n      0x0002c903000d7aad      5    1[  ] ==( 4X          10.0 Gbps "
            'Active/  LinkUp)==>       2   33[  ] "Infiniscale-IV Mellanox Technologies" ( )\n',
            2,
            "`iblinkinfo` output",
        ),
        # As an EDR cluster's `ibnetdiscover -p` printed it (a public capture).
        (
            "CA   134  1 0x7cfe9003003b4bde 4x EDR - SW  1719 10 0x7cfe9003009ce5b0 "
            "( 'o0001 HCA-1' - 'ib-i1l1s01' )\n",
            1,
            "`ibnetdiscover -p` output",
        ),
        # As `ibswitches` then `ibhosts` printed them on an HDR lab fabric (a public page).
        (
            "root@ubuntu:/home/ubuntu# ibswitches \n"
            'Switch  : 0x08c0eb0300add04e ports 41 "Quantum Mellanox Technologies" base port 0 '
            "lid 10 lmc 0\nroot@ubuntu:/home/ubuntu# ibhosts\n"
            'Ca      : 0xe8ebd303003a3cb8 ports 1 "node1 HCA-2"\n',
            2,
            "a list of nodes (`ibswitches`, `ibhosts`",
        ),
    ],
)
def test_the_other_infiniband_reports_are_refused_as_what_they_are(
    text: str, line: int, named: str
) -> None:
    with pytest.raises(ParseError) as raised:
        detect_format(text)
    assert raised.value.line == line
    assert named in raised.value.message


# --- planted faults --------------------------------------------------------------------------


def replace_once(text: str, old: str, new: str) -> str:
    assert text.count(old) == 1, old
    return text.replace(old, new)


def test_a_downtrained_uplink_is_found_with_both_ends() -> None:
    text = IBNET_01.read_text()
    # IBLEAF-04-04 port 37 - IBSPINE-03 port 31: both printed ends trained at 4xHDR.
    text = replace_once(
        text,
        '[37]\t"S-2c5eab0300c26380"[31]\t\t# "MF0;A10-P1-IBSPINE-03:MQM9701/U1" lid 233 4xNDR',
        '[37]\t"S-2c5eab0300c26380"[31]\t\t# "MF0;A10-P1-IBSPINE-03:MQM9701/U1" lid 233 4xHDR',
    )
    text = re.sub(
        r'(\[31\]\t"S-2c5eab0300b87b40"\[37\]\t\t# "MF0;A09-P1-IBLEAF-04-04:MQM9701/U1" '
        r"lid 73 )4xNDR",
        r"\g<1>4xHDR",
        text,
    )
    doc = fabric_doc(text)
    (down,) = [f for f in doc["findings"] if f["kind"] == "downtrained_link"]
    assert down["switches"] == ["A09-P1-IBLEAF-04-04", "A10-P1-IBSPINE-03"]
    assert (down["evidence"]["rate"], down["evidence"]["peer_rate"]) == ("4xHDR", "4xNDR")
    assert (
        "A09-P1-IBLEAF-04-04 port 37 - A10-P1-IBSPINE-03 port 31 trained at 4xHDR"
        in (down["message"])
    )
    assert not doc["warnings"]


def test_a_missing_hca_is_found_with_its_host() -> None:
    text = IBNET_01.read_text()
    # a08-p1-dgx-04-c05 loses mlx5_5: its leaf port line and its CA block go.
    text = replace_once(
        text,
        '[5]\t"H-e09d7303007a5290"[1](e09d7303007a5290) \t\t# "a08-p1-dgx-04-c05 mlx5_5" '
        "lid 678 4xNDR\n",
        "",
    )
    text = re.sub(
        r"vendid=[^\n]*\ndevid=[^\n]*\nsysimgguid=0xe09d7303007a5290\n(.*\n){3}", "", text
    )
    assert "e09d7303007a5290" not in text
    doc = fabric_doc(text)
    (missing,) = [f for f in doc["findings"] if f["kind"] == "missing_hca"
                  and f["hosts"] == ["a08-p1-dgx-04-c05"]]  # fmt: skip
    assert missing["evidence"]["missing"] == ["mlx5_5"]
    assert missing["switches"] == ["A09-P1-IBLEAF-04-04"]
    assert "a08-p1-dgx-04-c05 has 3 HCAs" in missing["message"]
    # Without the fault, the host has all four.
    before = fabric_doc(IBNET_01.read_text())
    assert not [f for f in before["findings"] if "a08-p1-dgx-04-c05" in f["hosts"]]


def test_an_hca_moved_off_its_rail_is_found_with_host_and_leaves() -> None:
    text = IBNET_01.read_text()
    # a08-p1-dgx-04-c02 mlx5_5 (rail 3, leaf IBLEAF-04-04 port 2) moves to port 30 of the rail-0
    # leaf of its neighbours' mlx5_0, IBLEAF-01-04.
    rails = raw_rails(text)
    leaf0 = rails["a08-p1-dgx-04-c02"]["mlx5_0"]
    assert leaf0 == "A09-P1-IBLEAF-01-04"
    line = (
        '[2]\t"H-e09d730300859298"[1](e09d730300859298) \t\t# "a08-p1-dgx-04-c02 mlx5_5" '
        "lid 641 4xNDR\n"
    )
    text = replace_once(text, line, "")
    header = re.search(r'Switch\t65 "S-([0-9a-f]+)"\t\t# "MF0;A09-P1-IBLEAF-01-04:[^\n]*\n', text)
    assert header is not None
    text = text.replace(header.group(0), header.group(0) + line.replace("[2]", "[30]"))
    text = re.sub(
        r'(\[1\]\(e09d730300859298\) \t)"S-2c5eab0300b87b40"\[2\]',
        rf'\g<1>"S-{header.group(1)}"[30]',
        text,
    )
    doc = fabric_doc(text)
    hosts = {h["hostname"]: h for h in doc["hosts"]}
    moved = {c["name"]: (c["switch"], c["port"]) for c in hosts["a08-p1-dgx-04-c02"]["hcas"]}
    assert moved["mlx5_5"] == ("A09-P1-IBLEAF-01-04", 30)
    (off,) = [f for f in doc["findings"] if f["kind"] == "off_rail_hca"
              and f["hosts"] == ["a08-p1-dgx-04-c02"]]  # fmt: skip
    assert off["switches"] == ["A09-P1-IBLEAF-01-04", "A09-P1-IBLEAF-04-04"]
    assert off["evidence"]["hca"] == "mlx5_5" and off["evidence"]["rail"] == 3
    assert (
        "a08-p1-dgx-04-c02 mlx5_5 (rail 3) is cabled to A09-P1-IBLEAF-01-04 port 30"
        in (off["message"])
    )


def test_collector_guids_name_hcas_with_the_default_description() -> None:
    """Host a06-p1-dgx-02-c06 left its four HCAs with the firmware's NodeDescription (port 6 of
    its SU's four rail leaves). Its collector's sysfs node_guids name them."""
    capture = parse(IBNET_01.read_text())
    plain = build_fabric(capture)
    assert not any(h.hostname == "a06-p1-dgx-02-c06" for h in plain.hosts)
    on_port_6 = {
        plain.name(h.hcas[0].switch or ""): h.hcas[0].guid
        for h in plain.hosts
        if h.hostname is None and h.hcas[0].port == 6
    }
    sent = {}
    for leaf, device in (
        ("01-02", "HCA-1"),
        ("02-02", "HCA-2"),
        ("03-02", "HCA-5"),
        ("04-02", "HCA-6"),
    ):
        guid = on_port_6[f"A09-P1-IBLEAF-{leaf}"]
        sysfs = ":".join(guid[i : i + 4] for i in range(0, 16, 4))  # e09d:7303:0085:8d88
        sent[sysfs] = ("a06-p1-dgx-02-c06", device)
    named = build_fabric(capture, sent)
    host = next(h for h in named.hosts if h.hostname == "a06-p1-dgx-02-c06")
    assert [(h.name, h.rail, h.port) for h in host.hcas] == [
        ("HCA-1", 0, 6),
        ("HCA-2", 1, 6),
        ("HCA-5", 2, 6),
        ("HCA-6", 3, 6),
    ]
    unnamed = [h for h in named.hosts if h.hostname is None]
    assert len(unnamed) == len([h for h in plain.hosts if h.hostname is None]) - 4
    assert not any("a06-p1-dgx-02-c06" in f.hosts for f in fabric_findings(named))


# --- any damage to a real capture: read, or refused naming a line, never a crash ------------

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

LINES = IBNET_01.read_text().split("\n")[:400]  # a leaf, a spine's start, their ports


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, len(LINES) - 1),
            st.sampled_from(["drop", "cut", "junk", "swap"]),
            st.text(max_size=12),
        ),
        max_size=12,
    )
)
def test_a_damaged_capture_is_read_or_refused_with_a_line(
    damage: list[tuple[int, str, str]],
) -> None:
    lines = list(LINES)
    for i, how, junk in damage:
        i %= len(lines)
        if how == "drop":
            del lines[i]
        elif how == "cut":
            lines[i] = lines[i][: len(junk)]
        elif how == "junk":
            lines[i] = lines[i][: len(lines[i]) // 2] + junk
        else:
            lines[i], lines[-1] = lines[-1], lines[i]
        if not lines:
            return
    text = "\n".join(lines)
    try:
        capture = parse(text)
    except ParseError as exc:
        assert exc.line is None or 1 <= exc.line <= len(lines)
        return
    for w in capture.warnings:
        assert w.startswith("line ")
    fabric = build_fabric(capture)
    fabric_findings(fabric)
    from topoweb.core.fabric_exports import topology_yaml
    from topoweb.core.fabric_findings import fabric_analysis
    from topoweb.core.fabric_layout import fabric_page

    doc = fabric_analysis(fabric)
    fabric_page(doc)
    topology_yaml(doc)


def test_siblings_are_the_sku_s_hosts_where_the_service_knows_the_servers() -> None:
    """Without SKUs the two UFM servers (2 HCAs, named unlike the DGX hosts) are held to no
    one; once the service says they are DGX H100 like the a08 hosts (whose HCAs are mlx5_*
    as theirs), they lack two HCAs."""
    fabric = build_fabric(parse(IBNET_01.read_text()))
    plain = {f.hosts[0] for f in fabric_findings(fabric) if f.kind == "missing_hca"}
    assert not plain & {"B11-P1-CUFM-02", "ubuntu"}
    dgx = [h.hostname for h in fabric.hosts if h.hostname and h.hostname.startswith("a08-")]
    skus = dict.fromkeys([*dgx, "B11-P1-CUFM-02", "ubuntu"], "DGX H100")
    found = [f for f in fabric_findings(fabric, skus) if f.kind == "missing_hca"]
    ufm = {f.hosts[0]: f for f in found if f.hosts[0] in ("B11-P1-CUFM-02", "ubuntu")}
    assert set(ufm) == {"B11-P1-CUFM-02", "ubuntu"}
    assert ufm["ubuntu"].evidence["missing"] == ["mlx5_4", "mlx5_5"]
    assert "ubuntu has 2 HCAs where most of its 18 siblings have 4" in ufm["ubuntu"].message


def test_grouping_lines_are_read_past() -> None:
    # `ibnetdiscover -g` titles chassis and the nodes in none (rdma-core's dump_topology).
    grouped = SMALL.replace(
        "switchguid=0x1(1)",
        "Chassis 1 (guid 0x8f104004126d)\nHostname: xsigo-01\n\nNon-Chassis Nodes\n\n"
        "switchguid=0x1(1)",
    )
    capture = parse(grouped)

    def ends(c: IbnetCapture) -> set[tuple[str, int, str, int, str]]:
        return {(lk.a, lk.a_port, lk.b, lk.b_port, lk.rate) for lk in c.links}

    assert ends(capture) == ends(parse(SMALL)) and len(capture.links) == 3
    assert not any("not an ibnetdiscover line" in w for w in capture.warnings)
