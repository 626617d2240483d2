"""The topology fingerprint: same for renumbered copies, different for different wiring."""

from __future__ import annotations

import itertools
from collections.abc import Iterable

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.core.topo_fixtures import fixture_text
from topoweb.core.fingerprint import (
    canonical_form,
    canonical_order,
    describe_links,
    nvlink_fabric,
    topology_fingerprint,
    wiring_sha256,
)
from topoweb.core.formats.topo import parse
from topoweb.core.model import Device, Link, Topology


def read(prefix: str) -> Topology:
    return parse(fixture_text(prefix))


def build(n_gpus: int, n_nics: int, cls: dict[tuple[int, int], str], default: str) -> Topology:
    devices = [Device(f"GPU{i}", "gpu", i) for i in range(n_gpus)]
    devices += [Device(f"NIC{i}", "nic", i) for i in range(n_nics)]
    links = [
        Link(devices[a].id, devices[b].id, cls.get((a, b), cls.get((b, a), default)))
        for a, b in itertools.combinations(range(len(devices)), 2)
    ]
    return Topology(tuple(devices), tuple(links))


def relabel(topo: Topology, mapping: dict[str, str]) -> Topology:
    devices = [
        Device(mapping[d.id], d.kind, int(mapping[d.id][3:]) if d.kind == "gpu" else d.index)
        for d in topo.devices
    ]
    devices.sort(key=lambda d: (d.kind != "gpu", d.index))
    links = [Link(mapping[lnk.a], mapping[lnk.b], lnk.link_class) for lnk in topo.links]
    return Topology(tuple(devices), tuple(links))


def test_it_is_a_sha256_hex_digest() -> None:
    digest = topology_fingerprint(read("topo_01"))
    assert len(digest) == 64
    assert int(digest, 16) >= 0


def test_renumbering_the_h200_gpus_and_nics_keeps_the_fingerprint() -> None:
    topo = read("topo_01")
    gpu_perm = [3, 7, 0, 5, 1, 6, 2, 4]
    nic_perm = [11, 0, 5, 2, 9, 1, 10, 3, 8, 4, 7, 6]
    mapping = {f"GPU{i}": f"GPU{p}" for i, p in enumerate(gpu_perm)}
    mapping |= {f"NIC{i}": f"NIC{p}" for i, p in enumerate(nic_perm)}
    renamed = relabel(topo, mapping)
    assert renamed.link_class("GPU3", "NIC11") == "PXB"  # was GPU0-NIC0
    assert topology_fingerprint(renamed) == topology_fingerprint(topo)


def test_two_servers_wired_alike_share_a_fingerprint_whatever_their_nic_names() -> None:
    nimbix, k80 = read("topo_06"), read("topo_08")
    assert nimbix.nics[0].id == "mlx5_0" and k80.nics[0].id == "mlx4_0"
    assert nimbix.gpu(0).cpu_affinity != k80.gpu(0).cpu_affinity
    assert topology_fingerprint(nimbix) == topology_fingerprint(k80)


def test_the_three_v100_samples_share_one_nvlink_fabric_and_the_p100_dgx1_does_not() -> None:
    fabrics = {
        p: topology_fingerprint(nvlink_fabric(read(p)))
        for p in ("topo_07", "topo_12", "topo_29", "topo_31")
    }
    assert fabrics["topo_12"] == fabrics["topo_29"] == fabrics["topo_31"]
    assert fabrics["topo_07"] != fabrics["topo_12"]


def nvlink_triangles(topo: Topology) -> int:
    ids = [d.id for d in topo.devices]
    return sum(
        1
        for a, b, c in itertools.combinations(ids, 3)
        if all(topo.link(x, y).is_nvlink for x, y in ((a, b), (b, c), (a, c)))
    )


def test_a_rewired_mesh_with_the_same_class_counts_gets_another_fingerprint() -> None:
    mesh = nvlink_fabric(read("topo_12"))
    assert mesh.link_class("GPU0", "GPU3") == "NV1" and mesh.link_class("GPU4", "GPU7") == "NV1"
    assert mesh.link_class("GPU0", "GPU7") == "SYS" and mesh.link_class("GPU3", "GPU4") == "SYS"
    # Swap two NV1 edges for two non-NVLink ones: every GPU keeps its NV1/NV2/SYS counts.
    swapped = {
        frozenset(("GPU0", "GPU3")): "SYS",
        frozenset(("GPU4", "GPU7")): "SYS",
        frozenset(("GPU0", "GPU7")): "NV1",
        frozenset(("GPU3", "GPU4")): "NV1",
    }
    rewired = Topology(
        mesh.devices,
        tuple(
            Link(lnk.a, lnk.b, swapped.get(frozenset((lnk.a, lnk.b)), lnk.link_class))
            for lnk in mesh.links
        ),
    )
    assert sorted(lnk.link_class for lnk in rewired.links) == sorted(
        lnk.link_class for lnk in mesh.links
    )
    assert nvlink_triangles(rewired) != nvlink_triangles(mesh)  # so not isomorphic
    assert topology_fingerprint(rewired) != topology_fingerprint(mesh)


def test_any_changed_link_class_on_the_dgx1_gives_another_fingerprint() -> None:
    topo = read("topo_07")
    base = topology_fingerprint(topo)
    for i in (0, 5, 20, len(topo.links) - 1):
        links = list(topo.links)
        old = links[i]
        links[i] = Link(old.a, old.b, "NV2" if old.link_class != "NV2" else "PXB")
        assert topology_fingerprint(Topology(topo.devices, tuple(links))) != base


def test_a_gpu_and_a_nic_are_not_interchangeable() -> None:
    two_gpus = build(2, 0, {}, "PIX")
    gpu_and_nic = build(1, 1, {}, "PIX")
    assert topology_fingerprint(two_gpus) != topology_fingerprint(gpu_and_nic)


def test_canonical_order_lists_corresponding_devices_alike() -> None:
    topo = read("topo_29")
    mapping = {f"GPU{i}": f"GPU{(i + 3) % 8}" for i in range(8)} | {"NIC0": "NIC0"}
    renamed = relabel(topo, mapping)
    order, renamed_order = canonical_order(topo), canonical_order(renamed)
    assert len(order) == 9 and set(order) == {d.id for d in topo.devices}
    # The same wiring seen from both numberings, position by position.
    for (a, b), (c, d) in zip(
        itertools.combinations(order, 2), itertools.combinations(renamed_order, 2), strict=True
    ):
        assert topo.link_class(a, b) == renamed.link_class(c, d)


def test_an_nvswitch_all_to_all_collapses_to_one_twin_group() -> None:
    form = canonical_form(read("topo_22"))
    assert form["groups"] == [["gpu", 8, "NV18"]]
    assert form["links"] == []


def test_a_72_gpu_all_to_all_with_a_nic_per_four_gpus_is_fingerprinted() -> None:
    per_nic = {
        (g, 72 + n): ("PIX" if g // 4 == n else "NODE" if (g // 4) % 2 == n % 2 else "SYS")
        for g in range(72)
        for n in range(18)
    }
    per_nic |= {(a, b): "NV18" for a, b in itertools.combinations(range(72), 2)}
    topo = build(72, 18, per_nic, "SYS")
    assert topology_fingerprint(topo) != topology_fingerprint(build(72, 18, per_nic, "NODE"))


# --- exactness against brute force on small graphs ---------------------------------------


def brute_force_form(topo: Topology) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The least (kinds, classes) reading over every ordering of the devices."""
    devices = list(topo.devices)
    best: tuple[tuple[str, ...], tuple[str, ...]] | None = None
    for order in itertools.permutations(devices):
        form = (
            tuple(d.kind for d in order),
            tuple(topo.link_class(a.id, b.id) for a, b in itertools.combinations(order, 2)),
        )
        if best is None or form < best:
            best = form
    assert best is not None
    return best


@st.composite
def small_topologies(draw: st.DrawFn) -> Topology:
    n_gpus = draw(st.integers(1, 5))
    n_nics = draw(st.integers(0, 6 - n_gpus))
    pairs = list(itertools.combinations(range(n_gpus + n_nics), 2))
    classes = draw(
        st.lists(st.sampled_from(["NV1", "NV2", "SYS"]), min_size=len(pairs), max_size=len(pairs))
    )
    return build(n_gpus, n_nics, dict(zip(pairs, classes, strict=True)), "SYS")


@settings(max_examples=120, deadline=None)
@given(small_topologies(), small_topologies())
def test_fingerprints_agree_exactly_when_brute_force_finds_an_isomorphism(
    first: Topology, second: Topology
) -> None:
    same_graph = brute_force_form(first) == brute_force_form(second)
    assert (topology_fingerprint(first) == topology_fingerprint(second)) == same_graph


@settings(max_examples=60, deadline=None)
@given(small_topologies(), st.permutations(range(6)))
def test_small_topologies_keep_their_fingerprint_under_any_gpu_renumbering(
    topo: Topology, perm: list[int]
) -> None:
    order = [p for p in perm if p < len(topo.gpus)]
    mapping = {f"GPU{i}": f"GPU{p}" for i, p in enumerate(order)}
    mapping |= {d.id: d.id for d in topo.nics}
    assert topology_fingerprint(relabel(topo, mapping)) == topology_fingerprint(topo)


# --- the one-line summary ----------------------------------------------------------------------


def test_describe_links_summarises_each_kind_of_server() -> None:
    assert describe_links(read("topo_01")) == "8x GPU, NV18 all-to-all, 12 NICs (PXB/NODE/SYS)"
    assert describe_links(read("topo_07")) == (
        "8x GPU, NV1 NVLink on 16 of 28 pairs, rest SYS, 4 NICs (PIX/PHB/SYS)"
    )
    assert describe_links(read("topo_12")) == (
        "8x GPU, NV2/NV1 NVLink on 16 of 28 pairs, rest NODE, 1 NIC (NODE)"
    )
    assert describe_links(read("topo_04")) == "7x GPU, PCIe only (PIX/PHB), no NICs"
    assert describe_links(read("topo_34")) == "4x GPU, PCIe NODE only, no NICs"
    assert describe_links(read("topo_25")) == "1x GPU, 1 NIC (PHB)"


def test_the_wiring_hash_sees_the_numbering_the_fingerprint_forgets() -> None:
    topo = _in_order(read("topo_12").devices, read("topo_12").links)  # a DGX-1V
    doc = topo.to_document()
    renumbered = _in_order(topo.devices, [_swapped(lnk, "GPU0", "GPU4") for lnk in topo.links])
    assert renumbered.class_row("GPU0") != topo.class_row("GPU0")  # not an automorphism
    assert topology_fingerprint(renumbered) == topology_fingerprint(topo)
    assert wiring_sha256(renumbered.to_document()) != wiring_sha256(doc)
    # The same wiring: reordered keys (a database's JSON) and other warnings do not count.
    reordered = {key: doc[key] for key in reversed(doc)} | {"warnings": ["another reader's"]}
    assert wiring_sha256(reordered) == wiring_sha256(doc)
    first = topo.links[0]
    changed = _in_order(topo.devices, [Link(first.a, first.b, "SYS"), *topo.links[1:]])
    assert wiring_sha256(changed.to_document()) != wiring_sha256(doc)


def _swapped(link: Link, x: str, y: str) -> Link:
    swap = {x: y, y: x}
    return Link(swap.get(link.a, link.a), swap.get(link.b, link.b), link.link_class)


def _in_order(devices: tuple[Device, ...], links: Iterable[Link]) -> Topology:
    """The links each facing the same way and in one order, as one reader would list them."""
    faced = (Link(min(x.a, x.b), max(x.a, x.b), x.link_class) for x in links)
    return Topology(devices, tuple(sorted(faced, key=lambda x: (x.a, x.b))))


def test_the_wiring_digest_is_the_one_json_dumps_gives_for_every_sample() -> None:
    import hashlib
    import json
    from pathlib import Path

    from topoweb.core.formats import parse_text

    fixtures = Path(__file__).resolve().parent.parent / "fixtures"
    for path in [*fixtures.glob("topo_*.txt"), *fixtures.glob("ncclxml_*.xml")]:
        topo = parse_text(path.read_text(encoding="utf-8"))
        assert isinstance(topo, Topology)
        document = topo.to_document()
        wiring = {k: v for k, v in document.items() if k != "warnings"}
        slow = json.dumps(wiring, separators=(",", ":"), sort_keys=True).encode()
        assert wiring_sha256(document) == hashlib.sha256(slow).hexdigest(), path.name
    odd = {"devices": [{"id": "GPU0", "nic_name": "é", "index": 2**70}], "details": {"x": 0.5}}
    slow = json.dumps(odd, separators=(",", ":"), sort_keys=True).encode()
    assert wiring_sha256(odd) == hashlib.sha256(slow).hexdigest()
