"""Findings grouped by cause (issue 27 item 5): one group per cause with its pairs, as a pure
function of findings, on the real GTX rig capture whose x1 risers make every pair slow and
whose P2P gives nothing on 13 pairs."""

from __future__ import annotations

from pathlib import Path

from topoweb.core.formats import parse_text
from topoweb.core.health import check_health, expectations_from_model
from topoweb.core.health.groups import cause_of, group_documents, group_findings
from topoweb.core.model import P2PResult, Topology

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
GTX_RIG = "topo_04_gtx1070x6-1080-7gpu-pix-phb.txt"
GTX_RIG_P2P = "p2p_01_gtx1070x6-1080-7gpu-pcie-x1.txt"


def rig_findings() -> tuple[Topology, list]:  # type: ignore[type-arg]
    rig = parse_text((FIXTURES / GTX_RIG).read_text())
    measured = parse_text((FIXTURES / GTX_RIG_P2P).read_text())
    assert isinstance(rig, Topology) and isinstance(measured, P2PResult)
    expected = expectations_from_model(rig, "NVIDIA GeForce GTX 1070")
    return rig, check_health(rig, p2p=measured, expectations=expected)


def test_the_gtx_rigs_21_slow_pairs_are_one_group_per_cause_each_with_its_pairs() -> None:
    rig, findings = rig_findings()
    slow = [f for f in findings if f.kind == "below_expected_bandwidth"]
    assert len(slow) == 21
    groups = group_findings(findings)
    assert len(groups) < len(findings) // 4
    assert len({g.cause for g in groups}) == len(groups)
    # Slow P2P within the PCIe switches (8 pairs), and P2P unavailable (every PHB pair and one
    # PIX pair whose P2P gives nothing): the finding that says so and its 13 pairs slow even
    # as host-staged copies are one cause, not a warning beside a critical line.
    assert len(groups) == 2
    within, no_p2p = groups
    assert within.kind == "below_expected_bandwidth" and len(within.members) == 8
    assert no_p2p.kind == "p2p_unavailable" and no_p2p.severity == "critical"
    assert [f.kind for f in no_p2p.members].count("p2p_unavailable") == 1
    assert len(no_p2p.members) == 14 and len(no_p2p.pairs) == 13
    assert {rig.link_class(a, b) for a, b in no_p2p.pairs} == {"PHB", "PIX"}
    assert no_p2p.title.startswith("P2P unavailable on 13 GPU pairs (P2P=Enabled bandwidth")
    # Against the cost model's staged copy at the assumed x16 link (not half a P2P figure).
    assert "host-staged copies measured 13-14 %" in no_p2p.title
    assert no_p2p.members[0].advice.startswith("Disable PCIe ACS")  # the cause's own advice
    assert ["GPU0", "GPU3"] in no_p2p.pairs


def test_groups_are_most_severe_first_and_a_lone_finding_keeps_its_message() -> None:
    _, findings = rig_findings()
    groups = group_findings(findings)
    order = {"critical": 0, "warning": 1, "info": 2}
    assert [order[g.severity] for g in groups] == sorted(order[g.severity] for g in groups)
    # The warning that P2P is unavailable leads a group as severe as its worst pair.
    no_p2p = next(g for g in groups if g.kind == "p2p_unavailable")
    assert no_p2p.members[0].severity == "warning" and no_p2p.severity == "critical"
    # Alone (a capture's P2P access matrix, nothing measured), a finding keeps its message.
    said = [f for f in findings if f.kind == "p2p_unavailable"]
    (lone,) = group_findings(said)
    assert lone.title == said[0].message and len(lone.pairs) == 13


def test_documents_group_as_findings_do_and_keep_what_each_document_carries() -> None:
    _, findings = rig_findings()
    docs = [f.to_document() | {"id": i} for i, f in enumerate(findings)]
    grouped = group_documents(docs)
    assert [g["cause"] for g in grouped] == [g.cause for g in group_findings(findings)]
    assert sorted(f["id"] for g in grouped for f in g["findings"]) == list(range(len(docs)))
    assert all(g["count"] == len(g["findings"]) >= len(g["pairs"]) for g in grouped)


def test_the_same_mechanism_on_other_pairs_has_the_same_cause() -> None:
    _, findings = rig_findings()
    slow = [f for f in findings if f.kind == "below_expected_bandwidth"]
    staged = [f for f in slow if "host-staged" in f.message]
    said = [f for f in findings if f.kind == "p2p_unavailable"]
    assert len({cause_of(f) for f in staged + said}) == 1
    assert len({cause_of(f) for f in slow if f not in staged}) == 1


def test_pairs_measuring_what_a_narrower_link_carries_say_which_when_the_width_was_assumed() -> (
    None
):
    """The rig's P2P pairs measure 0.7-0.8 GB/s, 1/16 of the x16 link topo -m made the model
    assume: what the x1 risers the capture's source names carry. Said where the width was
    assumed; where NVML reported x16 links, the same figures are only slow."""
    rig, findings = rig_findings()
    within = next(g for g in group_findings(findings) if g.kind == "below_expected_bandwidth")
    assert within.title.endswith(
        ": what a PCIe Gen3 x1 link carries (x16 was assumed: a riser, an x1 slot or a link "
        "trained down? NVML facts name the width)"
    )
    assert all(f.evidence["fits_pcie"] == [3, 1, 16] for f in within.members)
    assert "; that is what a PCIe Gen3 x1 link carries" in within.members[0].message

    measured = parse_text((FIXTURES / GTX_RIG_P2P).read_text())
    assert isinstance(measured, P2PResult)
    reported = expectations_from_model(rig, "NVIDIA GeForce GTX 1070", pcie=(3, 16))
    assert reported.assumed_pcie is None
    told = check_health(rig, p2p=measured, expectations=reported)
    slow = [f for f in told if f.kind == "below_expected_bandwidth"]
    assert slow and not any("fits_pcie" in f.evidence or "x1" in f.message for f in slow)


def test_a_slow_pair_across_the_sockets_is_not_explained_by_a_narrower_link() -> None:
    """Azure's M60 pair (SYS) copies at 5.3 GB/s with P2P off: with no GPU name the model
    guesses a generation whose SYS figure is P2P over xGMI, and 5.3 GB/s is a quarter of it,
    but staging, not an x4 link, is what slows a copy across the sockets."""
    pair = parse_text((FIXTURES / "topo_05_azure-m60-2gpu-soc-nolegend.txt").read_text())
    measured = parse_text((FIXTURES / "p2p_02_azure-m60-2gpu-no-p2p.txt").read_text())
    assert isinstance(pair, Topology) and isinstance(measured, P2PResult)
    guessed = expectations_from_model(pair)
    assert guessed.assumed_pcie is not None
    (slow,) = [f for f in check_health(pair, p2p=measured, expectations=guessed)
               if f.kind == "below_expected_bandwidth"]  # fmt: skip
    assert slow.evidence["class"] == "SYS"
    assert "fits_pcie" not in slow.evidence and "link carries" not in slow.message
