"""Property tests: the topo reader fails only with ParseError, and reads back what it is shown."""

from __future__ import annotations

import itertools

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.core.topo_fixtures import FIXTURES, TOPO_FILES
from topoweb.core.fingerprint import topology_fingerprint
from topoweb.core.formats import ParseError, parse_text
from topoweb.core.formats.topo import parse
from topoweb.core.model import Device, Link, Topology

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SAMPLES = [(FIXTURES / name).read_text(encoding="utf-8") for name in TOPO_FILES]
CLASSES = ["NV1", "NV2", "NV4", "NV12", "NV18", "PIX", "PXB", "PHB", "NODE", "SYS"]


def parses_or_parse_error(text: str) -> None:
    try:
        result = parse(text)
    except ParseError as exc:
        assert exc.message
        assert exc.line is None or exc.line >= 1
    else:
        assert isinstance(result, Topology)
        # The reader builds its Topology without the constructor's checks (it has made them
        # itself): whatever it returns must pass them and class every pair the same.
        checked = Topology(result.devices, result.links, result.warnings)
        assert checked == result
        assert [result.class_row(d.id) for d in result.devices] == [
            checked.class_row(d.id) for d in checked.devices
        ]


# --- nothing but ParseError -----------------------------------------------------------------


@SETTINGS
@given(st.text(max_size=400))
def test_random_text_never_raises_anything_but_parse_error(text: str) -> None:
    parses_or_parse_error(text)


@SETTINGS
@given(
    st.lists(
        st.sampled_from(
            [
                "GPU0",
                "GPU1",
                "NIC0",
                "mlx5_0",
                " X ",
                "NV18",
                "PIX",
                "SYS",
                "NS",
                "\t",
                "  ",
                "\n",
                "0-3",
                "N/A",
                "CPU Affinity",
                "NODENODE",
                "",
            ]
        ),
        max_size=60,
    )
)
def test_matrix_like_token_soup_never_raises_anything_but_parse_error(tokens: list[str]) -> None:
    parses_or_parse_error("".join(tokens))


@st.composite
def mutated_sample(draw: st.DrawFn) -> str:
    lines = draw(st.sampled_from(SAMPLES)).splitlines()
    for _ in range(draw(st.integers(1, 3))):
        if not lines:
            break
        i = draw(st.integers(0, len(lines) - 1))
        action = draw(st.sampled_from(["delete", "duplicate", "drop_cell", "swap_chars"]))
        if action == "delete":
            del lines[i]
        elif action == "duplicate":
            lines.insert(i, lines[i])
        elif action == "drop_cell":
            cells = lines[i].split("\t") if "\t" in lines[i] else lines[i].split()
            if cells:
                del cells[draw(st.integers(0, len(cells) - 1))]
            lines[i] = "\t".join(cells)
        elif len(lines[i]) >= 2:
            j = draw(st.integers(0, len(lines[i]) - 2))
            k = draw(st.integers(j + 1, len(lines[i]) - 1))
            chars = list(lines[i])
            chars[j], chars[k] = chars[k], chars[j]
            lines[i] = "".join(chars)
    return "\n".join(lines)


@settings(max_examples=150, deadline=None)
@given(mutated_sample())
def test_mutated_samples_never_raise_anything_but_parse_error(text: str) -> None:
    parses_or_parse_error(text)
    try:
        parse_text(text)
    except ParseError:
        pass


# --- round trip through rendered text ---------------------------------------------------------


@st.composite
def topologies(draw: st.DrawFn) -> Topology:
    n_gpus = draw(st.integers(1, 8))
    n_nics = draw(st.integers(0, 4))
    nic_style = draw(st.sampled_from(["NIC", "mlx5_"]))
    devices = [
        Device(
            f"GPU{i}",
            "gpu",
            i,
            cpu_affinity=draw(st.sampled_from([None, "0-55,112-167", "0,2,4", "1-1"])),
            numa_affinity=draw(st.sampled_from([None, "0", "1", "0-3"])),
            gpu_numa_id=draw(st.sampled_from([None, "2"])),
        )
        for i in range(n_gpus)
    ]
    devices += [Device(f"{nic_style}{i}", "nic", i, nic_name=f"mlx5_{i}") for i in range(n_nics)]
    links = [
        Link(a.id, b.id, draw(st.sampled_from(CLASSES)))
        for a, b in itertools.combinations(devices, 2)
    ]
    return Topology(tuple(devices), tuple(links))


def render(topo: Topology, style: str) -> str:
    """`nvidia-smi topo -m` as the driver prints it (tabs), optionally tab-expanded or glued."""
    ids = [d.id for d in topo.devices]
    columns = ["CPU Affinity", "NUMA Affinity", "GPU NUMA ID"]
    header = "\t" + "\t".join(ids + columns)
    if style == "glued":
        header = "\t    " + "".join(ids) + "\t" + "\t".join(columns)
    lines = ["$ nvidia-smi topo -m", header]
    for d in topo.devices:
        cells = [" X " if other == d.id else topo.link_class(d.id, other) for other in ids]
        row = d.id + "\t" + "\t".join(cells)
        if d.kind == "gpu":
            row += "\t" + "\t".join(
                [d.cpu_affinity or "N/A", d.numa_affinity or "N/A", "", d.gpu_numa_id or "N/A"]
            )
        lines.append(row)
    lines += ["", "Legend:", "", "  X    = Self", "  NV#  = Connection traversing a bonded set"]
    if any(d.id.startswith("NIC") for d in topo.nics):
        lines += ["", "NIC Legend:", ""] + [f"  {d.id}: {d.nic_name}" for d in topo.nics]
    text = "\n".join(lines) + "\n"
    return text.expandtabs(8) if style == "spaces" else text


@SETTINGS
@given(topologies(), st.sampled_from(["tabs", "spaces", "glued"]))
def test_rendered_topologies_parse_back_to_the_same_topology(topo: Topology, style: str) -> None:
    assert parse(render(topo, style)) == topo


@SETTINGS
@given(topologies())
def test_rendered_topologies_round_trip_through_the_document_form(topo: Topology) -> None:
    parsed = parse(render(topo, "tabs"))
    assert Topology.from_document(parsed.to_document()) == topo


# --- fingerprint invariance ---------------------------------------------------------------


def renumbered(topo: Topology, gpu_order: list[int], nic_order: list[int]) -> Topology:
    """The same wiring with GPU<i> called GPU<gpu_order[i]> and NICs listed in a new order."""
    gpu_ids = {d.id: f"GPU{gpu_order[d.index]}" for d in topo.gpus}
    nic_ids = {d.id: f"NIC{nic_order[d.index]}" for d in topo.nics}
    names = gpu_ids | nic_ids
    gpus = sorted(
        (Device(names[d.id], "gpu", gpu_order[d.index]) for d in topo.gpus), key=lambda d: d.index
    )
    nics = sorted(
        (Device(names[d.id], "nic", nic_order[d.index]) for d in topo.nics), key=lambda d: d.index
    )
    links = [Link(names[lnk.a], names[lnk.b], lnk.link_class) for lnk in reversed(topo.links)]
    return Topology(tuple(gpus + nics), tuple(links))


@SETTINGS
@given(topologies(), st.randoms(use_true_random=False))
def test_renumbering_devices_keeps_the_fingerprint(topo: Topology, rng: object) -> None:
    import random

    assert isinstance(rng, random.Random)
    gpu_order = list(range(len(topo.gpus)))
    nic_order = list(range(len(topo.nics)))
    rng.shuffle(gpu_order)
    rng.shuffle(nic_order)
    assert topology_fingerprint(renumbered(topo, gpu_order, nic_order)) == topology_fingerprint(
        topo
    )


@SETTINGS
@given(topologies(), st.data())
def test_changing_one_link_class_changes_the_fingerprint_unless_isomorphic(
    topo: Topology, data: st.DataObject
) -> None:
    if not topo.links:
        return
    i = data.draw(st.integers(0, len(topo.links) - 1))
    old = topo.links[i]
    new_class = data.draw(st.sampled_from([c for c in CLASSES if c != old.link_class]))
    links = list(topo.links)
    links[i] = Link(old.a, old.b, new_class)
    changed = Topology(topo.devices, tuple(links))
    # The multiset of classes differs, so no renumbering can make the two equal.
    assert topology_fingerprint(changed) != topology_fingerprint(topo)
