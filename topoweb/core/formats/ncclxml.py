"""NCCL topology XML (`NCCL_TOPO_DUMP_FILE` dumps, hand-written `NCCL_TOPO_FILE`s) in and out.

In: the `<system>` tree becomes a Topology whose classes follow nvidia-smi's (NV<k>, PIX, PXB,
PHB, NODE, SYS) and whose `details` keep what the matrix cannot say: PCIe speed and width per
hop, NIC speeds and ports, NVLink targets (GPU, NVSwitch, CPU), C2C links, CPU placement.
Truncated files are read up to where they stop, with a warning; anything else that is not
well-formed XML is refused with its line number (the text to a tree: ncclxml_tree.py).

Out: an `NCCL_TOPO_FILE` in the shape NCCL's own loader reads (src/graph/xml.cc: spaces, no XML
declaration, `<system version="1">` > `<cpu>` > nested `<pci>` > `<gpu>`/`<nic><net>`; the
attributes src/graph/topo.cc reads: cpu numaid/affinity/arch/vendor/familyid/modelid, pci
busid/class/link_speed/link_width, gpu dev/sm/rank/gdr, nvlink target/count/tclass, net
name/dev/speed/port/latency/guid/maxconn/gdr). NCCL's XML cannot tell PHB from NODE (both are
"through the CPU" to it); a top-level `<pci>` carries `host_bridge` (ignored by NCCL) so the
file reads back to the same matrix."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from topoweb.core.catalogue import infer_generation, socket_link_of_cpu
from topoweb.core.formats.errors import ParseError
from topoweb.core.formats.ncclxml_tree import UNWRITABLE, Node, read_tree, writable
from topoweb.core.hierarchy import recover_hierarchy
from topoweb.core.model import (
    DEVICE_NAME,
    MAX_CPU_ID,
    MAX_NVLINKS,
    Device,
    Link,
    Topology,
    nvlink_count,
)

GPU_CLASS = "0x030200"
NVSWITCH_CLASS = "0x068000"  # NCCL's PCI_NVSWITCH_CLASS
CPU_NVLINK_CLASS = "0x068001"  # an NVLink whose far end is the CPU (Grace C2C as NVLink)
BRIDGE_CLASS = "0x060400"
IB_CLASS = "0x020700"
ETH_CLASS = "0x020000"


# --- reading -----------------------------------------------------------------------------------


@dataclass
class _Endpoint:
    """A GPU or NIC found in the tree, with the <pci> chain from its <cpu> down to it."""

    kind: str
    busid: str | None
    cpu: int  # position of its <cpu> among the system's
    chain: tuple[Node, ...]  # <pci> ancestors, top-level first, its own <pci> last
    node: Node  # the <gpu>, <net>, or the bare <pci> for a pci-only file
    name: str | None = None
    also_under: tuple[int, ...] = ()  # other <cpu>s a net with no PCI path is listed under


def _bus_key(busid: str | None) -> tuple[int, int, int, int]:
    m = re.fullmatch(r"(?:([0-9a-fA-F]+):)?([0-9a-fA-F]+):([0-9a-fA-F]+)\.([0-7])", busid or "")
    if not m:
        return (1 << 32, 0, 0, 0)
    return (int(m.group(1) or "0", 16), int(m.group(2), 16), int(m.group(3), 16), int(m.group(4)))


def normalise_busid(busid: str) -> str:
    """NCCL's spelling, `0000:18:00.0`: NVML's 8-digit domain cut to 4, hex lowercase."""
    d, b, s, f = _bus_key(busid)
    if d == 1 << 32:
        return busid.lower()
    return f"{d:04x}:{b:02x}:{s:02x}.{f}"


def _int(value: str | None) -> int | None:
    if value is None or not value.strip():
        return None
    for base in (0, 10):
        try:
            return int(value, base)
        except ValueError:
            continue
    return None


def cpulist_from_mask(mask: str) -> str | None:
    """`00000000,00ffffff` (NCCL's and sysfs's cpumap) -> `0-23`, nvidia-smi's spelling."""
    digits = mask.replace(",", "").strip().lstrip("0") or "0"
    # A mask past the highest CPU Linux numbers is no machine's (and its bits are walked).
    if not re.fullmatch(r"[0-9a-fA-F]+", digits) or len(digits) * 4 > MAX_CPU_ID + 1:
        return None
    value = int(digits, 16)
    cpus = [i for i in range(value.bit_length()) if value >> i & 1]
    if not cpus:
        return None
    return cpulist(cpus)


def cpulist(cpus: Iterable[int]) -> str:
    """{0, 1, 2, 3, 8} -> `0-3,8`, nvidia-smi's spelling of a (non-empty) set of CPUs."""
    nums = sorted(cpus)
    runs: list[str] = []
    start = prev = nums[0]
    for c in nums[1:] + [-2]:
        if c != prev + 1:
            runs.append(f"{start}-{prev}" if prev > start else str(start))
            start = c
        prev = c
    return ",".join(runs)


def mask_from_cpulist(cpulist: str) -> str | None:
    """`0-23,48-71` -> `00ffffff,00000000,00ffffff`: 32-bit words, most significant first."""
    value = 0
    for part in cpulist.replace(" ", "").split(","):
        m = re.fullmatch(r"(\d+)(?:-(\d+))?", part)
        if not m:
            return None
        if len(m.group(2) or m.group(1)) > 5:  # a stored value from before ingest checked it
            return None
        lo, hi = int(m.group(1)), int(m.group(2) or m.group(1))
        if hi > MAX_CPU_ID:
            return None
        for c in range(lo, hi + 1):
            value |= 1 << c
    if not value:
        return None
    words = max(1, (value.bit_length() + 31) // 32)
    return ",".join(f"{(value >> (32 * w)) & 0xFFFFFFFF:08x}" for w in reversed(range(words)))


def _endpoints(root: Node, warnings: list[str]) -> tuple[list[_Endpoint], list[Node]]:
    cpus = [c for c in root.children if c.tag == "cpu"]
    found: list[_Endpoint] = []
    bare: list[str] = []
    # A net with no PCI path is written under every <cpu> in some dumps (Vast.ai's eth0): one
    # device, keyed as NCCL keys a net (its dev) with its name and guid, next to each CPU.
    on_cpu: dict[tuple[str | None, ...], _Endpoint] = {}
    listed: dict[tuple[str | None, ...], list[int]] = {}
    for ci, cpu in enumerate(cpus):

        def visit(node: Node, chain: tuple[Node, ...], ci: int = ci) -> None:
            for child in node.children:
                if child.tag == "pci":
                    here = (*chain, child)
                    cls = child.attrs.get("class", "")
                    gpus = [g for g in child.children if g.tag == "gpu"]
                    nics = [n for n in child.children if n.tag == "nic"]
                    busid = normalise_busid(child.attrs.get("busid", ""))
                    for g in gpus:
                        found.append(_Endpoint("gpu", busid, ci, here, g))
                    for nic in nics:
                        for net in (n for n in nic.children if n.tag == "net"):
                            found.append(
                                _Endpoint("nic", busid, ci, here, net, net.attrs.get("name"))
                            )
                    if not gpus and not nics and not any(c.tag == "pci" for c in child.children):
                        if cls.startswith("0x03"):
                            found.append(_Endpoint("gpu", busid, ci, here, child))
                            bare.append(busid)
                        elif cls.startswith("0x02"):
                            found.append(_Endpoint("nic", busid, ci, here, child))
                            bare.append(busid)
                    visit(child, here)
                elif child.tag == "nic" and node.tag == "cpu":
                    for net in (n for n in child.children if n.tag == "net"):
                        key = tuple(net.attrs.get(k) for k in ("name", "dev", "guid"))
                        if (ep := on_cpu.get(key)) is None:
                            on_cpu[key] = ep = _Endpoint("nic", None, ci, (), net, key[0])
                            found.append(ep)
                        elif ci != ep.cpu and ci not in ep.also_under:
                            ep.also_under += (ci,)
                        listed.setdefault(key, []).append(net.line)

        visit(cpu, ())
    for key, ep in on_cpu.items():
        lines = listed[key]
        where = f"line {lines[0]}" if len(lines) == 1 else "lines " + ", ".join(map(str, lines))
        under = f"under {1 + len(ep.also_under)} <cpu> elements, " if ep.also_under else ""
        warnings.append(
            f"NIC {ep.name or '?'} ({under}{where}) has no PCI location: placed on "
            + ("each of those CPUs" if ep.also_under else "its CPU")
        )
    if bare:
        warnings.append(
            f"{len(bare)} device(s) are bare <pci> entries without <gpu>/<nic> (e.g. "
            f"{bare[0]}): no NVLink, NIC name or speed is known for them"
        )
    return found, cpus


def _nvlinks(ep: _Endpoint) -> list[Node]:
    return [n for n in ep.node.children if n.tag == "nvlink"] if ep.node.tag == "gpu" else []


def _card(busid: str) -> str:
    return busid.rpartition(".")[0] or busid  # 0000:18:00.1 -> 0000:18:00, the function gone


def _pcie_class(a: _Endpoint, b: _Endpoint, cpus: list[Node]) -> str:
    if a.cpu != b.cpu and (
        not (a.also_under or b.also_under)
        or {a.cpu, *a.also_under}.isdisjoint({b.cpu, *b.also_under})
    ):
        return "SYS"  # under no common <cpu>
    if a.busid is not None and b.busid is not None and _card(a.busid) == _card(b.busid):
        return "PIX"  # two ports of one card: one <pci>, or one function each
    k = 0
    while k < min(len(a.chain), len(b.chain)) and a.chain[k] is b.chain[k]:
        k += 1
    if k == 0:
        ha = a.chain[0].attrs.get("host_bridge") if a.chain else None
        hb = b.chain[0].attrs.get("host_bridge") if b.chain else None
        return "PHB" if ha is not None and ha == hb else "NODE"
    bridges = len(a.chain) + len(b.chain) - 2 * k - 1
    return "PIX" if bridges <= 1 else "PXB"


@dataclass(frozen=True)
class _NvlinkCounts:
    """Each GPU's NVLinks read once: per target GPU bus id, and the total to NVSwitches. The
    pair loop looks them up instead of walking a GPU's <nvlink> children for every pair."""

    direct: dict[int, dict[str, int]]  # id(endpoint) -> target busid -> count
    switched: dict[int, int]  # id(endpoint) -> NVLinks to NVSwitches

    @classmethod
    def of(cls, gpus: list[_Endpoint]) -> _NvlinkCounts:
        direct: dict[int, dict[str, int]] = {}
        switched: dict[int, int] = {}
        for gpu in gpus:
            targets: dict[str, int] = {}
            to_switch = 0
            for n in _nvlinks(gpu):
                count = _int(n.attrs.get("count")) or 0
                tclass = n.attrs.get("tclass", "")
                if tclass.startswith("0x03"):
                    target = normalise_busid(n.attrs.get("target", ""))
                    targets[target] = targets.get(target, 0) + count
                elif tclass == NVSWITCH_CLASS:
                    to_switch += count
            direct[id(gpu)], switched[id(gpu)] = targets, to_switch
        return cls(direct, switched)

    def between(self, a: _Endpoint, b: _Endpoint) -> int:
        to_b = self.direct[id(a)].get(b.busid or "", 0) if b.busid is not None else 0
        to_a = self.direct[id(b)].get(a.busid or "", 0) if a.busid is not None else 0
        return max(to_b, to_a) + min(self.switched[id(a)], self.switched[id(b)])


def parse(text: str) -> Topology:
    """Read an NCCL topology XML into a Topology (GPUs in PCI bus order, as nvidia-smi numbers
    them; NICs in NCCL's net device order)."""
    root, warnings = read_tree(text)
    if root.attrs.get("version", "1") != "1":
        warnings.append(f"<system version={root.attrs.get('version')!r}>: NCCL reads version 1")
    found, cpus = _endpoints(root, warnings)
    _refuse_other_vendors(found)
    if not cpus:
        raise ParseError("the <system> element holds no <cpu>", line=root.line)
    gpus = sorted((e for e in found if e.kind == "gpu"), key=lambda e: _bus_key(e.busid))
    if not gpus:
        raise ParseError(
            "no GPU in the XML (no <gpu> and no <pci> of class 0x03...)", line=root.line
        )
    nics = sorted(
        (e for e in found if e.kind == "nic"),
        key=lambda e: (
            _int(e.node.attrs.get("dev")) is None,
            _int(e.node.attrs.get("dev")) or 0,
            _bus_key(e.busid),
            e.name or "",
        ),
    )
    seen: dict[str | None, _Endpoint] = {}
    for gpu in gpus:
        if (first := seen.setdefault(gpu.busid, gpu)) is not gpu:
            # NCCL dumps one host's topology; two hosts' in one file (a multi-node NVLink
            # domain's dump) repeat their bus ids, which this reader cannot tell apart.
            raise ParseError(
                f"two GPUs share PCI bus id {gpu.busid} (lines {first.node.line} and "
                f"{gpu.node.line}): one host's topology per file",
                line=gpu.node.line,
            )

    for ep in nics:
        name = ep.name or ep.busid
        if name is not None and not DEVICE_NAME.match(name):
            shown = name if len(name) <= 40 else name[:40] + "..."
            raise ParseError(
                f"NIC name {shown!r} ({len(name)} characters) is not a device name: letters, "
                "digits, `_ . : -`, at most 64 characters",
                line=ep.node.line,
            )
    ids: dict[int, str] = {}
    devices: list[Device] = []
    details_devices: dict[str, Any] = {}
    for kind, group, prefix in (("gpu", gpus, "GPU"), ("nic", nics, "NIC")):
        for i, ep in enumerate(group):
            dev_id = f"{prefix}{i}"
            ids[id(ep)] = dev_id
            cpu = cpus[ep.cpu]
            numa = cpu.attrs.get("numaid")
            affinity = cpulist_from_mask(cpu.attrs.get("affinity", ""))
            devices.append(
                Device(
                    id=dev_id,
                    kind=kind,  # type: ignore[arg-type]
                    index=i,
                    cpu_affinity=affinity if kind == "gpu" else None,
                    numa_affinity=numa if kind == "gpu" and numa and numa.isdigit() else None,
                    nic_name=(ep.name or ep.busid) if kind == "nic" else None,
                )
            )
            details_devices[dev_id] = _device_details(ep, cpu)
            if ep.also_under:
                also = [cpus[c].attrs.get("numaid") for c in ep.also_under]
                details_devices[dev_id]["also_numaids"] = also
    if any(c.attrs.get("numaid", "").startswith("-") for c in cpus):
        warnings.append("a <cpu> has numaid -1 (the VM hides NUMA): no NUMA node is known")
    _check_targets(gpus, warnings)
    _check_static(gpus, warnings)

    eps = gpus + nics
    nvlinks = _NvlinkCounts.of(gpus)
    links: list[Link] = []
    for i, a in enumerate(eps):
        for b in eps[i + 1 :]:
            nv = nvlinks.between(a, b) if a.kind == b.kind == "gpu" else 0
            if nv > MAX_NVLINKS:
                raise ParseError(
                    f"{nv} NVLinks between two GPUs; no machine has more than {MAX_NVLINKS}",
                    line=a.node.line,
                )
            cls = f"NV{nv}" if nv else _pcie_class(a, b, cpus)
            links.append(Link(ids[id(a)], ids[id(b)], cls))
    details = {
        "source": "nccl-topology-xml",
        "devices": details_devices,
        "cpus": [_cpu_details(c) for c in cpus],
        "nvswitches": sorted(
            {
                normalise_busid(n.attrs.get("target", ""))
                for g in gpus
                for n in _nvlinks(g)
                if n.attrs.get("tclass") == NVSWITCH_CLASS
            }
        ),
        "tree": root.to_document(),
    }
    return Topology(tuple(devices), tuple(links), tuple(warnings), details)


_GPU_VENDORS = {"0x1002": "AMD", "0x1d94": "Hygon", "0x8086": "Intel"}


def _refuse_other_vendors(found: list[_Endpoint]) -> None:
    """RCCL, AMD's port of NCCL, dumps the same XML for AMD and Hygon GPUs (its <gpu> carries
    gcn and arch, its <pci> their vendor id); read as NVIDIA's it would pass for a server this
    project models. Refused as what it is, at its first GPU; a vendor not given is NVIDIA's."""
    for ep in found:
        if ep.kind != "gpu":
            continue
        pci = ep.chain[-1]  # the GPU's own <pci>: a <gpu> is read only inside one
        vendor = pci.attrs.get("vendor", "").lower()
        gcn = ep.node.attrs.get("gcn")
        nvidia = not vendor or vendor.removeprefix("0x").lstrip("0") == "10de"
        if gcn is None and nvidia:
            continue
        named = "" if nvidia else f"PCI vendor {vendor} {_GPU_VENDORS.get(vendor, '')}".rstrip()
        if gcn is None and _GPU_VENDORS.get(vendor) not in ("AMD", "Hygon"):
            raise ParseError(
                f"the GPU at {ep.busid} has {named}: topoweb reads NVIDIA GPUs", pci.line
            )
        clues = ", ".join(c for c in ("" if gcn is None else f'<gpu gcn="{gcn}">', named) if c)
        raise ParseError(
            f"this is an RCCL topology dump of AMD/Hygon GPUs ({clues}), not NVIDIA's: topoweb "
            "reads NVIDIA GPUs",
            line=pci.line if gcn is None else ep.node.line,
        )


def _check_targets(gpus: list[_Endpoint], warnings: list[str]) -> None:
    """NVLinks whose target GPU is not listed, or is the GPU itself (seen in a hand-written
    topology file): both link to nothing, and are left out with a warning."""
    known = {g.busid for g in gpus}
    missing: set[str | None] = set()
    to_itself: list[int] = []
    for g in gpus:
        for n in _nvlinks(g):
            if not n.attrs.get("tclass", "").startswith("0x03"):
                continue
            target = normalise_busid(n.attrs.get("target", ""))
            if target == g.busid:
                to_itself.append(n.line)
            elif target not in known:
                missing.add(target)
    if to_itself:
        warnings.append(
            f"line {to_itself[0]}: {len(to_itself)} <nvlink> element(s) name their own GPU's "
            "bus id as the target: those links are left out"
        )
    if missing:
        shown = sorted(str(m) for m in missing)
        warnings.append(
            f"NVLinks lead to {len(shown)} GPU(s) the XML does not list ({', '.join(shown[:4])}"
            f"{', ...' if len(shown) > 4 else ''}): those links are left out"
        )


def _check_static(gpus: list[_Endpoint], warnings: list[str]) -> None:
    """A file with <gpu> elements but no <nvlink> and no PCI ids on its GPUs is written by hand
    or shipped with a cloud image as NCCL_TOPO_FILE (AWS's p5.48xlarge file): NCCL adds the
    NVLinks it detects at run time, so the file's silence says nothing about them. A dump
    (NCCL_TOPO_DUMP_FILE) carries the ids, and lists no NVLink only where there is none; so
    does this project's export (the vendor id)."""
    written = [g for g in gpus if g.node.tag == "gpu"]
    if len(written) < 2 or any(c.tag == "nvlink" for g in written for c in g.node.children):
        return
    if any(g.chain and {"vendor", "device"} & set(g.chain[-1].attrs) for g in written):
        return
    warnings.append(
        f"line {written[0].node.line}: the XML names no NVLink and no GPU's PCI ids, as a "
        "static NCCL_TOPO_FILE does (NCCL detects NVLink at run time): its GPU pairs are read "
        "as their PCIe paths only; NCCL's dump (NCCL_TOPO_DUMP_FILE) or `nvidia-smi topo -m` "
        "shows the NVLinks"
    )


def _cpu_details(cpu: Node) -> dict[str, Any]:
    keep = ("numaid", "affinity", "arch", "vendor", "familyid", "modelid")
    out: dict[str, Any] = {k: cpu.attrs[k] for k in keep if k in cpu.attrs}
    out["cpus"] = cpulist_from_mask(cpu.attrs.get("affinity", ""))
    return out


def _link_speed_gts(value: str | None) -> float | None:
    m = re.match(r"\s*([\d.]+)\s*GT/s", value or "")
    return float(m.group(1)) if m else None


def _device_details(ep: _Endpoint, cpu: Node) -> dict[str, Any]:
    hops = [
        {
            "busid": normalise_busid(p.attrs.get("busid", "")),
            "class": p.attrs.get("class"),
            "link_speed_gts": _link_speed_gts(p.attrs.get("link_speed")),
            "link_width": _int(p.attrs.get("link_width")),
            **({"vendor": p.attrs["vendor"]} if "vendor" in p.attrs else {}),
            **({"device": p.attrs["device"]} if "device" in p.attrs else {}),
        }
        for p in ep.chain
    ]
    out: dict[str, Any] = {
        "bus_id": ep.busid,
        "numaid": cpu.attrs.get("numaid"),
        "pcie_path": hops,
        "line": ep.node.line,
    }
    a = ep.node.attrs
    if ep.kind == "gpu" and ep.node.tag == "gpu":
        out.update(
            {
                "sm": _int(a.get("sm")),
                "cuda_dev": _int(a.get("dev")),
                "gdr": _int(a.get("gdr")),
                "nvlinks": [
                    {
                        "target": normalise_busid(n.attrs.get("target", "")),
                        "count": _int(n.attrs.get("count")),
                        "target_kind": _target_kind(n.attrs.get("tclass", "")),
                    }
                    for n in _nvlinks(ep)
                ],
                "c2c": [
                    {"count": _int(n.attrs.get("count")), "bw_mbps": _int(n.attrs.get("bw"))}
                    for n in ep.node.children
                    if n.tag == "c2c"
                ],
            }
        )
    elif ep.kind == "nic" and ep.node.tag == "net":
        speed = _int(a.get("speed"))
        out.update(
            {
                "name": a.get("name"),
                "speed_mbps": speed,
                "speed_gbits": speed / 1000 if speed and speed > 0 else None,
                "port": _int(a.get("port")),
                "net_dev": _int(a.get("dev")),
                "gdr": _int(a.get("gdr")),
                "guid": a.get("guid"),
            }
        )
    return out


def _target_kind(tclass: str) -> str:
    if tclass == NVSWITCH_CLASS:
        return "nvswitch"
    if tclass == CPU_NVLINK_CLASS:
        return "cpu"
    return "gpu" if tclass.startswith("0x03") else tclass


# --- writing -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class HostFacts:
    """What the host knows that a `topo -m` matrix does not. Anything left None is filled with
    a stated placeholder (see the warnings `to_nccl_xml` returns)."""

    gpu_bus_ids: Mapping[str, str] = field(default_factory=dict)  # device id -> PCI bus id
    nic_bus_ids: Mapping[str, str] = field(default_factory=dict)
    nic_speed_mbps: Mapping[str, int] = field(default_factory=dict)  # by NIC name (mlx5_0)
    sm: int | None = None  # compute capability x10 (90 for Hopper)
    pcie_gen: int | None = None
    pcie_width: int | None = None
    cpu_model: str | None = None


_SM_BY_GENERATION = {
    "Kepler": 37, "Maxwell": 52, "Pascal": 60, "Pascal-NVLink": 60, "Volta": 70,
    "Volta-PCIe": 70, "Turing": 75, "Ampere": 80, "Ampere-A800": 80, "Ampere-sm86": 86,
    "Ada": 89, "Hopper": 90, "Hopper-H800": 90, "Blackwell": 100, "Blackwell-consumer": 120,
}  # fmt: skip
_PCIE_SPEED = {1: "2.5 GT/s PCIe", 2: "5.0 GT/s PCIe", 3: "8.0 GT/s PCIe", 4: "16.0 GT/s PCIe",
               5: "32.0 GT/s PCIe", 6: "64.0 GT/s PCIe"}  # fmt: skip


# The ids a <cpu> is written with for each socket link: NCCL plans the link from them
# (src/graph/topo.cc), and this project's reader reads them back as the same link.
_CPU_IDS: dict[str, tuple[str, str, str]] = {
    "Intel QPI (Broadwell)": ("GenuineIntel", "6", "79"),
    "Intel UPI (Skylake)": ("GenuineIntel", "6", "85"),
    "Intel UPI (Sapphire Rapids)": ("GenuineIntel", "6", "143"),
    "Intel UPI (Emerald Rapids)": ("GenuineIntel", "6", "207"),
    "AMD xGMI (Zen1-2)": ("AuthenticAMD", "23", "49"),
    "AMD xGMI (Zen3-4)": ("AuthenticAMD", "25", "17"),
    "AMD xGMI (Zen5)": ("AuthenticAMD", "26", "17"),
}


def _cpu_attrs(cpu_model: str | None) -> dict[str, str]:
    """The host's CPU model (/proc/cpuinfo's name) as NCCL's <cpu> attributes; a name not
    recognised is written as its vendor's current generation, Intel's where none is named."""
    model = (cpu_model or "").lower()
    if "grace" in model or "neoverse" in model or "arm" in model:
        return {"arch": "arm64", "vendor": "", "familyid": "0", "modelid": "0"}
    link = socket_link_of_cpu(cpu_model) if cpu_model else None
    if link is None:
        amd = "amd" in model or "epyc" in model
        link = "AMD xGMI (Zen3-4)" if amd else "Intel UPI (Sapphire Rapids)"
    vendor, family, model_id = _CPU_IDS[link]
    return {"arch": "x86_64", "vendor": vendor, "familyid": family, "modelid": model_id}


def _write(node: dict[str, Any], indent: int, out: list[str]) -> None:
    pairs = node["attrs"].items() if isinstance(node["attrs"], dict) else node["attrs"]
    attrs = "".join(f' {k}="{_safe(v)}"' for k, v in pairs)
    children = node.get("children") or []
    if not children:
        out.append(f"{' ' * indent}<{node['tag']}{attrs}/>")
        return
    out.append(f"{' ' * indent}<{node['tag']}{attrs}>")
    for c in children:
        _write(c, indent + 2, out)
    out.append(f"{' ' * indent}</{node['tag']}>")


def _safe(value: Any) -> str:
    """An attribute value NCCL's reader takes (src/graph/xml.cc knows no entities and stops at
    255 characters). Ingest refuses values that are not (`writable`); one stored before it
    did is written with those characters replaced, so the export still answers."""
    text = str(value)
    if writable(text):
        return text
    return UNWRITABLE.sub("_", text)[:255]


def _el(
    tag: str, attrs: dict[str, Any], children: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    node: dict[str, Any] = {"tag": tag, "attrs": {k: str(v) for k, v in attrs.items()}}
    if children:
        node["children"] = children
    return node


def to_nccl_xml(topo: Topology, facts: HostFacts | None = None) -> tuple[str, list[str]]:
    """An NCCL_TOPO_FILE for this host, and what had to be assumed. A topology read from an
    NCCL XML is written back as it was read; one from `topo -m` is built from its recovered
    PCIe tree, NVLink fabric and NUMA placement."""
    tree = topo.details.get("tree") if isinstance(topo.details, dict) else None
    if isinstance(tree, dict) and tree.get("tag") == "system":
        out: list[str] = []
        _write(tree, 0, out)
        return "\n".join(out) + "\n", []
    return _synthesise(topo, facts or HostFacts())


def _synthesise(topo: Topology, facts: HostFacts) -> tuple[str, list[str]]:
    h = recover_hierarchy(topo)
    generation = infer_generation(topo).generation
    warnings: list[str] = []
    sm = facts.sm or _SM_BY_GENERATION.get(generation.name, 80)
    gen = facts.pcie_gen or generation.pcie_gen
    width = facts.pcie_width or 16
    if facts.sm is None:
        warnings.append(f"sm={sm} assumed from the GPU generation ({generation.name})")
    if facts.pcie_gen is None:
        warnings.append(f"PCIe Gen{gen} x{width} assumed for every link (no NVML facts)")
    speed = _PCIE_SPEED.get(gen, "16.0 GT/s PCIe")

    bus: dict[str, str] = {}
    placeholder = 0
    for d in topo.gpus:
        given = facts.gpu_bus_ids.get(d.id)
        if given:
            bus[d.id] = normalise_busid(given)
        else:
            placeholder += 1
            bus[d.id] = f"fffe:{d.index + 1:02x}:00.0"
    for d in topo.nics:
        given = facts.nic_bus_ids.get(d.id)
        bus[d.id] = normalise_busid(given) if given else f"fffd:{d.index + 1:02x}:00.0"
    if placeholder:
        warnings.append(
            "GPU bus ids unknown: placeholders fffe:NN:00.0 are written; NCCL matches GPUs by "
            "bus id, so export the server (with its NVML facts), not the class, for a usable file"
        )
    bridge_no = 0

    def bridge(children: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
        nonlocal bridge_no
        bridge_no += 1
        return _el(
            "pci",
            {"busid": f"ffff:{bridge_no:02x}:00.0", "class": BRIDGE_CLASS, "link_speed": speed,
             "link_width": width, **extra},
            children,
        )  # fmt: skip

    domains = {g: dom for dom in h.nvlink_domains for g in dom.gpus}
    unknown_speed: list[str] = []

    def endpoint(dev_id: str, **extra: Any) -> dict[str, Any]:
        d = topo.device(dev_id)
        attrs = {"busid": bus[dev_id], **extra}
        if d.kind == "gpu":
            nvl: list[dict[str, Any]] = []
            dom = domains.get(dev_id)
            row = topo.class_row(dev_id)
            if dom is not None and dom.fabric == "nvswitch":
                count = max(nvlink_count(row[o]) for o in dom.gpus if o != dev_id)
                nvl.append(_el("nvlink", {"target": "fffc:00:00.0", "count": count,
                                          "tclass": NVSWITCH_CLASS}))  # fmt: skip
            else:
                for o in topo.gpus:
                    if o.id != dev_id and (k := nvlink_count(row[o.id])):
                        nvl.append(_el("nvlink", {"target": bus[o.id], "count": k,
                                                  "tclass": GPU_CLASS}))  # fmt: skip
            gpu = _el("gpu", {"dev": d.index, "sm": sm, "rank": d.index, "gdr": 1}, nvl)
            return _el(
                "pci",
                {**attrs, "class": GPU_CLASS, "vendor": "0x10de", "link_speed": speed,
                 "link_width": width},
                [gpu],
            )  # fmt: skip
        name = d.nic_name or d.id
        mbps = facts.nic_speed_mbps.get(name)
        if mbps is None:
            unknown_speed.append(name)
        net_attrs: dict[str, Any] = {"name": name, "dev": d.index}
        if mbps is not None:
            net_attrs["speed"] = mbps
        net_attrs.update({"port": 1, "latency": "0.000000", "maxconn": 131072, "gdr": 1})
        return _el(
            "pci",
            {**attrs, "class": IB_CLASS, "vendor": "0x15b3", "link_speed": speed,
             "link_width": width},
            [_el("nic", {}, [_el("net", net_attrs)])],
        )  # fmt: skip

    children_of: dict[str, list[str]] = {}
    for n in h.nodes:
        if n.parent is not None:
            children_of.setdefault(n.parent, []).append(n.id)
    devices_of: dict[str, list[str]] = {}
    for dev_id, up in h.parent.items():
        devices_of.setdefault(up, []).append(dev_id)
    order = {d.id: i for i, d in enumerate(topo.devices)}

    def below(node_id: str) -> list[dict[str, Any]]:
        """The XML elements for everything under a hierarchy node, in device order."""
        node = h.node(node_id)
        items: list[tuple[int, dict[str, Any]]] = []
        for child in children_of.get(node_id, []):
            sub = h.node(child)
            first = min(order[d] for d in sub.devices)
            if sub.kind == "host_bridge":
                items += [(first, e) for e in below_host_bridge(child)]
            else:
                items.append((first, bridge(below(child))))
        for dev_id in devices_of.get(node_id, []):
            e = endpoint(dev_id)
            # Alone under a switch tree: its own downstream bridge, so that it stays PXB from
            # the tree's other devices rather than PIX.
            items.append((order[dev_id], bridge([e]) if node.kind == "switch_tree" else e))
        return [e for _, e in sorted(items, key=lambda t: t[0])]

    def below_host_bridge(node_id: str) -> list[dict[str, Any]]:
        items = below(node_id)
        for e in items:
            e["attrs"]["host_bridge"] = node_id
        return items

    cpu_attrs = _cpu_attrs(facts.cpu_model)
    cpus: list[dict[str, Any]] = []
    for i, numa in enumerate(n for n in h.nodes if n.kind == "numa"):
        members = [topo.device(d) for d in numa.devices]
        numas = {d.numa_affinity for d in members if d.kind == "gpu" and d.numa_affinity}
        affinities = {d.cpu_affinity for d in members if d.kind == "gpu" and d.cpu_affinity}
        numaid = numas.pop() if len(numas) == 1 and next(iter(numas)).isdigit() else str(i)
        attrs: dict[str, Any] = {"numaid": numaid}
        mask = mask_from_cpulist(affinities.pop()) if len(affinities) == 1 else None
        if mask:
            attrs["affinity"] = mask
        attrs.update({k: v for k, v in cpu_attrs.items() if v})
        cpus.append(_el("cpu", attrs, below(numa.id)))
    if unknown_speed:
        warnings.append(
            f"speed unknown for {', '.join(unknown_speed)}: NCCL assumes 10 Gb/s without a "
            "speed attribute"
        )
    out: list[str] = []
    _write(_el("system", {"version": 1}, cpus), 0, out)
    return "\n".join(out) + "\n", warnings
