"""NCCL topology XML read from the real samples (dumps and hand-written topo files, whole,
truncated and bare), refused where it is not XML, and written back in NCCL's own shape."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from tests import synthetic
from topoweb.core.fingerprint import topology_fingerprint
from topoweb.core.formats import (
    ParseError,
    detect_format,
    device_counts,
    ncclxml,
    ncclxml_tree,
    parse_text,
)
from topoweb.core.formats.ncclxml import HostFacts, cpulist_from_mask, mask_from_cpulist
from topoweb.core.model import Topology

from .topo_fixtures import TOPO_FILES, fixture_text

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
XML_FILES = sorted(FIXTURES.glob("ncclxml_*.xml"))


def xml_of(prefix: str) -> str:
    (path,) = FIXTURES.glob(f"{prefix}_*.xml")
    return path.read_text()


def read(prefix: str) -> Topology:
    return ncclxml.parse(xml_of(prefix))


def refusal(text: str) -> ParseError:
    with pytest.raises(ParseError) as err:
        ncclxml.parse(text)
    return err.value


@pytest.mark.parametrize("path", XML_FILES, ids=lambda p: p.name[:10])
def test_every_xml_sample_is_detected_and_read_into_a_topology(path: Path) -> None:
    text = path.read_text()
    assert detect_format(text) == "nccl-topology-xml"
    topo = parse_text(text)
    assert isinstance(topo, Topology) and topo.gpus


def test_a_full_h100_vm_dump_gives_nv18_through_nvswitch_and_nic_per_bridge() -> None:
    topo = read("ncclxml_08")
    assert len(topo.gpus) == 8 and len(topo.nics) == 8
    assert {lnk.link_class for lnk in topo.gpu_links()} == {"NV18"}
    # Each TI bridge holds one GPU and one NIC; the NICs are numbered backwards (mlx5_7 first).
    assert topo.device("NIC7").nic_name == "mlx5_7"
    assert topo.link_class("GPU0", "NIC7") == "PIX"
    assert topo.link_class("GPU0", "NIC6") == "NODE"
    assert topo.link_class("GPU0", "NIC0") == "SYS"
    assert topo.device("GPU4").numa_affinity == "1"
    assert topo.device("GPU0").cpu_affinity == "0-79"
    assert topo.warnings == ()


def test_it_keeps_what_the_matrix_cannot_say_pcie_hops_nic_speed_nvlink_targets() -> None:
    details = read("ncclxml_08").details
    gpu0 = details["devices"]["GPU0"]
    assert gpu0["bus_id"] == "0000:a4:00.0" and gpu0["sm"] == 90
    assert [h["link_speed_gts"] for h in gpu0["pcie_path"]] == [2.5, 32.0]
    assert [h["link_width"] for h in gpu0["pcie_path"]] == [1, 0]  # the VM's x0 endpoints
    assert sorted(n["count"] for n in gpu0["nvlinks"]) == [4, 4, 5, 5]
    assert {n["target_kind"] for n in gpu0["nvlinks"]} == {"nvswitch"}
    assert details["devices"]["NIC7"]["speed_gbits"] == 200
    assert details["devices"]["NIC7"]["port"] == 1
    assert len(details["nvswitches"]) == 4


def test_a_truncated_dump_is_read_up_to_where_it_stops_with_a_line_numbered_warning() -> None:
    topo = read("ncclxml_05")
    assert len(topo.gpus) == 3 and [n.nic_name for n in topo.nics] == ["mlx5_0", "mlx5_1", "mlx5_2"]
    assert topo.link_class("GPU0", "NIC0") == "PIX" and topo.link_class("GPU0", "GPU1") == "NV18"
    (warning,) = topo.warnings
    assert "truncated at line 53" in warning and "opened at line 52" in warning


def test_the_aws_efa_dump_with_extra_attributes_and_another_order_is_read() -> None:
    topo = read("ncclxml_07")
    assert topo.device("NIC0").nic_name == "rdmap82s0"
    assert topo.details["devices"]["NIC0"]["speed_gbits"] == 400
    assert topo.details["devices"]["GPU0"]["pcie_path"][0]["link_width"] == 8
    assert "truncated" in topo.warnings[0]


def test_nvlink_pairs_with_gpu_targets_give_nv12_and_a_nic_without_pci_sits_on_its_cpu() -> None:
    topo = read("ncclxml_01")
    assert topo.link_class("GPU0", "GPU1") == "NV12" and topo.link_class("GPU0", "GPU2") == "SYS"
    assert topo.link_class("GPU0", "NIC0") == "NODE"
    assert any("eth0" in w and "no PCI location" in w for w in topo.warnings)


def test_bare_pci_files_are_read_by_class_with_a_warning() -> None:
    topo = read("ncclxml_02")
    assert len(topo.gpus) == 8 and len(topo.nics) == 8
    assert topo.link_class("GPU0", "GPU1") == "PIX"  # two GPUs on one virtual bridge
    assert any("bare <pci>" in w for w in topo.warnings)
    flat = read("ncclxml_04")  # no bridges at all: everything hangs off its CPU
    assert flat.link_class("GPU0", "GPU1") == "NODE" and flat.link_class("GPU0", "GPU4") == "SYS"


def test_a_static_topology_file_without_nvlinks_says_so_and_a_dump_does_not() -> None:
    # AWS's p5.48xlarge NCCL_TOPO_FILE: eight H100 (sm 90) and 32 EFA NICs, no <nvlink>,
    # no PCI vendor or device ids; NCCL adds the NVLinks it detects when it runs.
    topo = read("ncclxml_10")
    assert len(topo.gpus) == 8 and len(topo.nics) == 32
    assert {topo.link_class(f"GPU{a}", f"GPU{b}") for a in range(8) for b in range(a)} == {"NODE"}
    (warning,) = [w for w in topo.warnings if "static NCCL_TOPO_FILE" in w]
    assert warning.startswith("line 5: the XML names no NVLink and no GPU's PCI ids")
    no_gpu_elements = read("ncclxml_02")  # bare <pci> GPUs: that warning says it already
    assert not any("static NCCL_TOPO_FILE" in w for w in no_gpu_elements.warnings)
    for dump in ("ncclxml_08", "ncclxml_09"):
        assert not any("static NCCL_TOPO_FILE" in w for w in read(dump).warnings), dump
    pcie_dump = xml_of("ncclxml_08")  # a dump of GPUs with no NVLink: ids given, no warning
    pcie_dump = "\n".join(line for line in pcie_dump.splitlines() if "<nvlink" not in line)
    assert not any("static NCCL_TOPO_FILE" in w for w in ncclxml.parse(pcie_dump).warnings)


@pytest.mark.parametrize(
    ("text", "line", "words"),
    [
        ('<system version="1">\n  <cpu numaid="0">\n  </pci>\n</system>\n', 3, "mismatched tag"),
        ("<gpus>\n</gpus>\n", 1, "no <system> element"),
        ('<system version="1">\n</system>\n', 1, "no <cpu>"),
        ('<system version="1">\n  <cpu numaid="0"/>\n</system>\n', 1, "no GPU"),
        (
            '<?xml version="1.0"?>\n<!DOCTYPE s [<!ENTITY a "aaaa">]>\n<system/>\n',
            2,
            "DOCTYPE or entity",
        ),
    ],
)
def test_it_refuses_what_is_not_an_nccl_topology_with_the_line(
    text: str, line: int, words: str
) -> None:
    err = refusal(text)
    assert err.line == line and words in err.message


def test_it_refuses_huge_input_before_parsing_it() -> None:
    err = refusal("<system>" + " " * (ncclxml_tree.MAX_XML_CHARS + 1))
    assert "refused" in err.message


def test_cpu_masks_and_lists_convert_both_ways() -> None:
    assert cpulist_from_mask("00000000,0000ffff,ff000000") == "24-47"
    assert mask_from_cpulist("0-23,48-71") == "000000ff,ffff0000,00ffffff"
    assert cpulist_from_mask(mask_from_cpulist("0,2,4,9-11") or "") == "0,2,4,9-11"


@pytest.mark.parametrize("name", TOPO_FILES, ids=lambda n: n[:7])
def test_an_exported_xml_reads_back_to_the_same_wiring(name: str) -> None:
    topo = parse_text(fixture_text(name[:7]))
    assert isinstance(topo, Topology)
    text, _ = ncclxml.to_nccl_xml(topo)
    back = ncclxml.parse(text)
    assert topology_fingerprint(back) == topology_fingerprint(topo)


@pytest.mark.parametrize("prefix", ["topo_01", "topo_10", "topo_22", "topo_28", "topo_38"])
def test_an_exported_xml_reads_back_to_the_identical_topology(prefix: str) -> None:
    topo = parse_text(fixture_text(prefix))
    back = ncclxml.parse(ncclxml.to_nccl_xml(topo)[0])
    # Same ids, affinities, NUMA nodes and every pair's class; a reader's warnings are about
    # the text it read (topo_38's cells run together), which the XML does not carry.
    assert back == replace(topo, warnings=())


def test_the_export_is_in_the_shape_nccls_reader_takes() -> None:
    topo = parse_text(fixture_text("topo_10"))  # two GPUs PHB apart: needs the host_bridge mark
    assert isinstance(topo, Topology)
    text, _ = ncclxml.to_nccl_xml(topo)
    assert text.startswith('<system version="1">\n  <cpu numaid=')
    assert "\t" not in text and "<?xml" not in text  # NCCL's reader knows neither
    assert 'host_bridge="hb0"' in text
    for line in text.splitlines():
        assert line.count("=") <= 16  # NCCL keeps 16 attributes per element


def test_host_facts_replace_the_placeholders() -> None:
    topo = parse_text(fixture_text("topo_22"))
    assert isinstance(topo, Topology)
    bus = {f"GPU{i}": f"00000000:{0x18 + 0x10 * i:02X}:00.0" for i in range(8)}
    text, warnings = ncclxml.to_nccl_xml(topo, HostFacts(gpu_bus_ids=bus, sm=90, pcie_gen=5))
    assert 'busid="0000:18:00.0"' in text and "fffe:" not in text
    assert not any("bus ids" in w for w in warnings)
    assert [d.id for d in ncclxml.parse(text).gpus] == [f"GPU{i}" for i in range(8)]


def test_a_topology_read_from_xml_is_written_back_as_it_was_read() -> None:
    topo = read("ncclxml_08")
    text, warnings = ncclxml.to_nccl_xml(topo)
    assert warnings == []
    assert ncclxml.parse(text) == topo
    assert text == xml_of("ncclxml_08")


def test_each_gpus_nvlinks_are_walked_a_bounded_number_of_times_not_once_per_pair(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    walked = 0
    real = ncclxml._nvlinks

    def counting(ep: ncclxml._Endpoint) -> list[ncclxml_tree.Node]:
        nonlocal walked
        walked += 1
        return real(ep)

    monkeypatch.setattr(ncclxml, "_nvlinks", counting)
    topo = ncclxml.parse(synthetic.nccl_xml(256, nvlinks=18))
    # Before: four walks of a GPU's 18 <nvlink> elements per GPU pair (130,560 walks).
    assert walked <= 4 * 256
    assert topo.link_class("GPU0", "GPU1") == "NV1" and topo.link_class("GPU0", "GPU20") == "NODE"
    switched = ncclxml.parse(synthetic.nccl_xml(64, nvlinks=18, switched=True))
    assert switched.link_class("GPU3", "GPU60") == "NV18"


def test_gpus_and_devices_are_counted_on_the_raw_text_as_the_readers_find_them() -> None:
    for text in (synthetic.nccl_xml(40, 2), synthetic.nvswitch_domain(40)):
        topo = parse_text(text)
        assert isinstance(topo, Topology)
        assert device_counts(text) == (len(topo.gpus), len(topo.devices))
    for text in (fixture_text(p[:7]) for p in TOPO_FILES):
        topo = parse_text(text)
        assert isinstance(topo, Topology)
        gpus, devices = device_counts(text)
        assert gpus <= len(topo.gpus) and devices <= len(topo.devices), text[:200]
    for path in XML_FILES:
        topo = parse_text(path.read_text())
        assert isinstance(topo, Topology)
        gpus, devices = device_counts(path.read_text())
        assert gpus <= len(topo.gpus) and devices <= len(topo.devices), path.name


def test_a_topology_file_that_opens_with_comments_is_detected_and_read() -> None:
    # As AWS's hand-written topology files open: a licence and notes before <system>.
    header = "<!--\n  Copyright: example\n  Notes on this instance type\n-->\n<!-- one more -->\n"
    text = header + xml_of("ncclxml_02")
    assert detect_format(text) == "nccl-topology-xml"
    plain, commented = read("ncclxml_02"), ncclxml.parse(text)
    assert (commented.devices, commented.links) == (plain.devices, plain.links)
    assert commented.warnings == plain.warnings  # comments are XML, not text left out
    worded = ncclxml.parse("Here is our file:\n" + text)
    assert worded.warnings == ("ignored 6 line(s) of text before the XML", *plain.warnings)


def test_nvlinks_that_name_their_own_gpu_are_left_out_with_a_warning() -> None:
    # A revision of Azure's NCv4 file has every GPU's <nvlink> target its own bus id.
    text = xml_of("ncclxml_01").replace(
        '<nvlink target="0002:00:00.0"', '<nvlink target="0001:00:00.0"', 1
    )
    plain, topology = read("ncclxml_01"), ncclxml.parse(text)
    assert topology.warnings == (
        *plain.warnings,
        "line 5: 1 <nvlink> element(s) name their own GPU's bus id as the target: those links "
        "are left out",
    )


def test_two_gpus_on_one_bus_id_are_refused_naming_both_lines() -> None:
    # A dump of two hosts' trays in one file repeats each host's bus ids.
    text = xml_of("ncclxml_01").replace('busid="0002:00:00.0"', 'busid="0001:00:00.0"', 1)
    err = refusal(text)
    assert err.line == 14  # the second <gpu>
    assert err.message == (
        "two GPUs share PCI bus id 0001:00:00.0 (lines 4 and 14): one host's topology per file"
    )


def test_a_second_hosts_dump_after_the_first_is_named_in_the_warning() -> None:
    # As a cluster's docs show two hosts' dumps, each under its file name.
    first = xml_of("ncclxml_01").rstrip("\n")
    text = first + "\n\ntopology_10.0.0.2.xml\n\n" + xml_of("ncclxml_02")
    after = first.count("\n") + 3  # the file name's line
    plain, topology = read("ncclxml_01"), ncclxml.parse(text)
    assert (topology.devices, topology.links) == (plain.devices, plain.links)
    assert topology.warnings == (
        f"ignored text after </system> from line {after}: another host's <system> (line "
        f"{after + 2}) is not read; upload each host's dump apart",
        *plain.warnings,
    )


def test_an_nccl_graph_file_is_refused_as_what_it_is() -> None:
    text = (
        '<graphs version="1">\n  <graph id="0" pattern="4" nchannels="2">\n  </graph>\n</graphs>\n'
    )
    with pytest.raises(ParseError) as err:
        parse_text(text)
    assert err.value.line == 1 and err.value.message.startswith("this is an NCCL graph file")


@pytest.mark.parametrize("head", ["doctype", "declaration", "bare"])
def test_hwlocs_xml_is_refused_as_what_it_is(head: str) -> None:
    # The head of `lstopo --of xml` on a p5en.48xlarge (aws/aws-ofi-nccl's unit-test fixture).
    text = (
        ('<?xml version="1.0" encoding="UTF-8"?>\n' if head != "bare" else "")
        + ('<!DOCTYPE topology SYSTEM "hwloc2.dtd">\n' if head == "doctype" else "")
        + '<topology version="2.0">\n'
        '  <object type="Machine" os_index="0" cpuset="0xffffffff,0xffffffff">\n'
        '    <info name="DMIProductName" value="p5en.48xlarge"/>\n'
        "  </object>\n</topology>\n"
    )
    with pytest.raises(ParseError) as err:
        parse_text(text)
    assert err.value.line == {"doctype": 2, "declaration": 2, "bare": 1}[head]
    assert err.value.message.startswith("this is hwloc's XML (`lstopo --of xml`)")


def test_two_functions_of_one_card_are_pix_as_nvidia_smi_shows_its_two_ports() -> None:
    # A dual-port NIC listed as one <pci> per function, straight under its CPU (a Dell host's
    # Broadcom eno1np0/eno2np1 at 0000:18:00.0 and .1): PIX, not NODE.
    ports = "".join(
        f'    <pci busid="0000:18:00.{f}" class="0x020000" link_speed="8 GT/s" link_width="8">\n'
        f'      <nic><net name="eno{f + 1}" dev="{8 + f}" speed="25000" port="1"/></nic>\n'
        "    </pci>\n"
        for f in (0, 1)
    )
    text = xml_of("ncclxml_02").replace(
        "    </pci>\n  </cpu>", "    </pci>\n" + ports + "  </cpu>", 1
    )
    topology = ncclxml.parse(text)
    names = {d.nic_name: d.id for d in topology.nics}
    (link,) = [lk for lk in topology.links if {lk.a, lk.b} == {names["eno1"], names["eno2"]}]
    assert link.link_class == "PIX"
    # Two cards side by side under the same CPU stay NODE.
    apart = text.replace('busid="0000:18:00.1"', 'busid="0000:19:00.0"')
    topology = ncclxml.parse(apart)
    names = {d.nic_name: d.id for d in topology.nics}
    (link,) = [lk for lk in topology.links if {lk.a, lk.b} == {names["eno1"], names["eno2"]}]
    assert link.link_class == "NODE"


def socket_nic_host(second_dev: str = "0") -> str:
    """Two sockets with a GPU each and eth0 (no PCI path) under each <cpu>, as Vast.ai's B200
    and H200 dumps list it; `second_dev` is the dev of the second socket's copy."""

    def cpu(numaid: int, busid: str, dev: str) -> str:
        return (
            f'  <cpu numaid="{numaid}" affinity="0000ffff" arch="x86_64" vendor="GenuineIntel">\n'
            f'    <pci busid="{busid}" class="0x030200" vendor="0x10de" link_speed="32.0 GT/s '
            'PCIe" link_width="16">\n'
            f'      <gpu dev="{numaid}" sm="100" rank="{numaid}" gdr="1"/>\n'
            "    </pci>\n"
            "    <nic>\n"
            f'      <net name="eth0" dev="{dev}" latency="0" speed="10000" port="0" guid="0x0" '
            'maxconn="65536" gdr="0"/>\n'
            "    </nic>\n"
            "  </cpu>\n"
        )

    return (
        '<system version="1">\n'
        + cpu(0, "0000:51:00.0", "0")
        + cpu(1, "0000:75:00.0", second_dev)
        + "</system>\n"
    )


def test_a_socket_nic_listed_under_each_cpu_is_one_nic_next_to_the_gpus_of_each() -> None:
    topology = ncclxml.parse(socket_nic_host())
    assert [n.nic_name for n in topology.nics] == ["eth0"]
    assert topology.link_class("GPU0", "NIC0") == topology.link_class("GPU1", "NIC0") == "NODE"
    assert topology.link_class("GPU0", "GPU1") == "SYS"
    assert topology.warnings == (
        "NIC eth0 (under 2 <cpu> elements, lines 7, 15) has no PCI location: placed on each "
        "of those CPUs",
    )
    assert topology.details["devices"]["NIC0"]["also_numaids"] == ["1"]
    assert device_counts(socket_nic_host()) == (2, 3)  # counted before reading, as read
    # Two nets NCCL tells apart by their dev stay two NICs, each on its own socket.
    two = ncclxml.parse(socket_nic_host(second_dev="1"))
    assert [n.nic_name for n in two.nics] == ["eth0", "eth0"]
    assert two.link_class("GPU0", "NIC0") == "NODE" and two.link_class("GPU1", "NIC0") == "SYS"
    assert two.link_class("NIC0", "NIC1") == "SYS" and len(two.warnings) == 2


def test_the_b200_dump_with_eth0_under_both_sockets_has_one_eth0_next_to_all_eight_gpus() -> None:
    topology = read("ncclxml_09")
    assert len(topology.gpus) == 8 and [n.nic_name for n in topology.nics] == ["eth0"]
    assert {topology.link_class(g.id, "NIC0") for g in topology.gpus} == {"NODE"}
    assert topology.device("GPU4").numa_affinity == "1"
    (warning,) = topology.warnings
    assert warning.startswith("NIC eth0 (under 2 <cpu> elements, lines 16, 45)")


def one_gpu_host(pci: str, gpu: str = 'dev="0" sm="90" rank="0" gdr="1"') -> str:
    return (
        '<system version="2">\n'
        '  <cpu numaid="3" affinity="00000000,ff000000" arch="x86_64" vendor="AMD">\n'
        f'    <pci busid="0000:37:00.0" {pci} link_speed="16.0 GT/s PCIe" link_width="16">\n'
        f"      <gpu {gpu}/>\n"
        "    </pci>\n"
        "  </cpu>\n"
        "</system>\n"
    )


@pytest.mark.parametrize(
    ("text", "line", "message"),
    [
        (  # as RCCL dumps its GPUs (ROCm/rccl issue 1185): gcn and arch on <gpu>, Hygon's id
            one_gpu_host(
                'class="0x038000" vendor="0x1d94" device="0x55b7"',
                'dev="0" sm="90" gcn="21943" arch="38911" rank="0" gdr="1"',
            ),
            4,
            'this is an RCCL topology dump of AMD/Hygon GPUs (<gpu gcn="21943">, PCI vendor '
            "0x1d94 Hygon), not NVIDIA's: topoweb reads NVIDIA GPUs",
        ),
        (
            one_gpu_host('class="0x038000" vendor="0x1002"'),
            3,
            "this is an RCCL topology dump of AMD/Hygon GPUs (PCI vendor 0x1002 AMD), not "
            "NVIDIA's: topoweb reads NVIDIA GPUs",
        ),
        (
            one_gpu_host('class="0x030000" vendor="0x8086"'),
            3,
            "the GPU at 0000:37:00.0 has PCI vendor 0x8086 Intel: topoweb reads NVIDIA GPUs",
        ),
    ],
)
def test_a_topology_of_gpus_not_nvidias_is_refused_as_what_it_is(
    text: str, line: int, message: str
) -> None:
    with pytest.raises(ParseError) as err:
        parse_text(text)
    assert (err.value.line, err.value.message) == (line, message)
    nvidia = one_gpu_host('class="0x030200" vendor="0x10DE"')
    assert len(ncclxml.parse(nvidia).gpus) == 1  # NVIDIA's id, in either case, is read


def test_a_comment_inside_the_tree_saying_content_was_left_out_is_a_warning() -> None:
    # As an incident report quotes AWS's p5 topology file: one GPU's block, then comments.
    text = (
        '<system version="1">\n'
        '  <cpu numaid="0" affinity="0000ffff,ffffffff" arch="x86_64" vendor="AuthenticAMD">\n'
        "    <!-- PCIe switch 0000:00 -->\n"
        '    <pci busid="0000:00:00.0" class="0x060400" link_speed="16.0 GT/s PCIe">\n'
        '      <pci busid="0000:4f:00.0" class="0x030200" link_speed="32.0 GT/s PCIe">\n'
        '        <gpu dev="0" sm="90" rank="0" gdr="1"/>\n'
        "      </pci>\n"
        '      <pci busid="0000:50:00.0" class="0x020000" link_speed="16.0 GT/s PCIe">\n'
        '        <nic><net name="rdmap79s0" dev="0" speed="100000" port="1" guid="0"/></nic>\n'
        "      </pci>\n"
        "    </pci>\n"
        "    <!-- ... 7 more similar blocks for PCIe switches 0000:01 through 0000:07 ... -->\n"
        "    <!-- Full 204-line text lives at:\n"
        "         https://github.com/example/topology.xml\n"
        "    -->\n"
        "  </cpu>\n"
        "</system>\n"
    )
    topology = ncclxml.parse(text)
    assert len(topology.gpus) == 1 and len(topology.nics) == 1
    assert topology.warnings == (
        "line 12: a comment says content was left out of the file (<!-- ... 7 more similar "
        "blocks for PCIe switches 0000:01 through 0000:07 ... -->): what is read is partial, "
        "its GPU and NIC counts too",
    )
    # Comments that only name what is there (line 3) or point elsewhere are no such warning.
    cut = "... 7 more similar blocks for PCIe switches 0000:01 through 0000:07 ..."
    assert ncclxml.parse(text.replace(cut, "PCIe switches 0000:01 to 0000:07")).warnings == ()
