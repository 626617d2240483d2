"""Slurm and Kubernetes files from the real fabric ibnet_01 (`cli fabric --export`): each
leaf's hosts and each spine's leaves as the raw lines say, the blocks of topology.yaml, and
topograph's node labels with an NVLink domain as the accelerator level."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import yaml

from tests.core.test_fabric import IBNET_01, raw_blocks, run_cli, short
from topoweb.core.scheduling import hostlist

DOMAIN = "5b0f3c52-9a1e-4c55-8d1e-0c5a3f9e7b21.7"


def export(fmt: str, *extra: str) -> str:
    result = run_cli("fabric", str(IBNET_01), "--export", fmt, *extra)
    assert result.returncode == 0, result.stderr
    return result.stdout


def raw_tree() -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """Leaf -> named hosts on it, spine -> leaves on it, from the switch blocks' port lines."""
    hosts: dict[str, set[str]] = defaultdict(set)
    switches: dict[str, set[str]] = defaultdict(set)
    for kind, desc, ports in raw_blocks(IBNET_01.read_text()):
        if kind != "Switch":
            continue
        for p in ports:
            peer = p.split('"')[3]
            if '"H-' in p and len(peer.split()) == 2:
                hosts[short(desc)].add(peer.split()[0])
        for p in ports:
            if '"S-' in p and short(desc) not in hosts:
                switches[short(desc)].add(short(p.split('"')[3]))
    return hosts, switches


def test_topology_conf_lists_each_leaf_s_hosts_and_each_spine_s_leaves() -> None:
    lines = export("topology.conf").splitlines()
    hosts, spines = raw_tree()
    leaf_lines = {ln for ln in lines if ln.startswith("SwitchName=") and "Nodes=" in ln}
    assert leaf_lines == {f"SwitchName={leaf} Nodes={hostlist(h)}" for leaf, h in hosts.items()}
    spine_lines = {ln for ln in lines if "Switches=" in ln}
    assert spine_lines == {
        f"SwitchName={s} Switches={hostlist(leaves & set(hosts))}" for s, leaves in spines.items()
    }
    assert "SwitchName=A09-P1-IBLEAF-01-03 Nodes=a07-p1-dgx-03-c[01-18]" in lines


def test_topology_yaml_has_the_tree_and_one_block_per_leaf_group() -> None:
    text = export("topology.yaml")
    doc: list[dict[str, Any]] = yaml.safe_load(text)
    tree, block = doc
    assert (tree["topology"], tree["cluster_default"]) == ("fabric-tree", True)
    conf = export("topology.conf")
    for sw in tree["tree"]["switches"]:
        kids = sw.get("nodes") or sw["children"]
        assert (
            f"SwitchName={sw['switch']} {'Nodes' if 'nodes' in sw else 'Switches'}={kids}" in conf
        )
    blocks = block["block"]["blocks"]
    # Eight DGX scalable units; the two UFM hosts' pair is below the base size, left out.
    assert len(blocks) == 8 and block["block"]["block_sizes"][0] == 8
    assert {"block": "b03", "nodes": "a07-p1-dgx-03-c[01-18]"} in blocks
    assert "# left out: ubuntu,B11-P1-CUFM-02" in text


def test_labels_follow_topograph_with_the_nvlink_domain_as_accelerator() -> None:
    import json

    labels = json.loads(export("labels.json", "--nvlink", f"a07-p1-dgx-03-c01={DOMAIN}"))
    prefix = "network.topology.nvidia.com/"
    assert labels["a07-p1-dgx-03-c01"] == {
        prefix + "accelerator": DOMAIN,
        prefix + "block": "A09-P1-IBLEAF-01-03",
        prefix + "spine": "A10-P1-IBSPINE-01",
    }
    assert prefix + "accelerator" not in labels["a07-p1-dgx-03-c02"]
    # Every spine carries a common leaf: one spine group for the whole fabric.
    assert {v[prefix + "spine"] for v in labels.values()} == {"A10-P1-IBSPINE-01"}
    script = export("label.sh")
    assert (
        "kubectl label node a07-p1-dgx-03-c02 --overwrite "
        f"{prefix}block=A09-P1-IBLEAF-01-03 {prefix}spine=A10-P1-IBSPINE-01"
    ) in script.splitlines()
    bad = run_cli("fabric", str(IBNET_01), "--export", "label.sh", "--nvlink", "nodomain")
    assert bad.returncode == 2 and "HOST=CLUSTER_UUID.CLIQUE_ID" in bad.stderr


def test_the_page_layout_is_deterministic_and_folds_large_fabrics() -> None:
    from bench.fabric import generate
    from topoweb.core.fabric import build_fabric
    from topoweb.core.fabric_findings import fabric_analysis
    from topoweb.core.fabric_layout import COLLAPSE_OVER, PAIRS_DRAWN, fabric_page
    from topoweb.core.formats.ibnet import parse

    doc = fabric_analysis(build_fabric(parse(IBNET_01.read_text())))
    page = fabric_page(doc)
    assert page == fabric_page(json_round_trip(doc))
    assert not page["collapsed"] and not page["bundled"]
    tiers = {s["tier"]: s["y"] for s in page["switches"]}
    assert tiers["spine"] < tiers["leaf"]
    # Rails are rows: every rail-k leaf at one height, rail k+1 below it.
    rows = {s["rail"]: s["y"] for s in page["switches"] if s["tier"] == "leaf"}
    assert sorted(rows, key=rows.__getitem__) == [0, 1, 2, 3]

    big = fabric_analysis(build_fabric(parse(generate(4000))))
    folded = fabric_page(big)
    assert len(big["hosts"]) > COLLAPSE_OVER and folded["collapsed"]
    assert all(not u["expanded"] for u in folded["units"]) and len(folded["units"]) == 125
    # 1,000 leaves x 32 spines are bundled: one line per leaf and spine group.
    assert folded["bundled"] and PAIRS_DRAWN < 32_000
    assert len(folded["uplinks"]) == 1000


def json_round_trip(doc: dict[str, Any]) -> dict[str, Any]:
    import json

    result: dict[str, Any] = json.loads(json.dumps(doc))
    return result
