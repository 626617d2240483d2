"""The facts a collector sends beside its topology (collector/nvml.py and collector/gather.py),
read once into typed dataclasses. The stored JSON stays as the collector sent it; every reader
of it (ingest's GPU model and SKU, the health checks) goes through `read_nvml` / `read_host`,
but for the GPUs' smallest memory total (`smallest_gpu_memory`), which ingest stores as a
column and which never refuses a report.

Unknown values are tolerated: any value may be None, "unsupported", "n/a", "error: ..." where
the driver could not say, and reads as None (never guessed). A value of the wrong type is an
error naming where it is (NvmlFactsError). `current_gen`/`max_gen` are accepted for the PCIe
generation keys, true/false and "up"/"down" as well as "active"/"inactive" for a link's state::

    {"available": true,                        # false: nothing else is read
     "driver_version": "580.159.04",
     "gpus": [{"index": 0,                     # NVML index == nvidia-smi's == topo -m GPU<index>
               "name": "NVIDIA H100 80GB HBM3",
               "uuid": "GPU-5c6c5a1e-...",
               "pci_bus_id": "00000000:18:00.0",
               "pcie": {"current_generation": 5, "max_generation": 5,
                        "current_width": 16, "max_width": 16},
               "nvlinks": [{"link": 0, "state": "active",        # or "inactive"
                            "version": 6,                      # raw nvmlNvlinkVersion_t
                            "remote_device_type": "SWITCH",    # or "GPU"
                            "remote_pci_bus_id": "00000000:05:00.0"}, ...]},   # or "unsupported"
              ...],
     "p2p": [{"from": 0, "to": 1, "read": "OK", "write": "OK", ...}, ...]}   # NVML P2P status
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from topoweb.core.formats.errors import ParseError

_UNKNOWN_MARKERS = {"unsupported", "n/a", "unknown", "not supported", ""}
# What one GPU can be: past these, facts are forged or corrupt, and refused naming the place.
MAX_GPU_MEMORY_BYTES = 2**50  # 1 PiB; the largest GPU today has under 2^38
MAX_NVML_GPUS = 4096
MAX_NVLINKS_PER_GPU = 64
MAX_TEXT = 1024  # names, ids, versions (a longer name is stored cut to its column)
_BUS_ID = re.compile(r"[0-9A-Fa-f]{1,8}:[0-9A-Fa-f]{1,2}:[0-9A-Fa-f]{1,2}\.[0-7]\Z")


class NvmlFactsError(ParseError):
    """Facts of the wrong shape or type; the message names the place, e.g. gpus[2].pcie."""


@dataclass(frozen=True)
class PcieLink:
    current_generation: int | None = None
    max_generation: int | None = None
    current_width: int | None = None
    max_width: int | None = None

    @property
    def slower_generation(self) -> bool:
        cg, mg = self.current_generation, self.max_generation
        return cg is not None and mg is not None and cg < mg

    @property
    def narrower(self) -> bool:
        cw, mw = self.current_width, self.max_width
        return cw is not None and mw is not None and cw < mw


@dataclass(frozen=True)
class NvLink:
    link: int | None
    up: bool | None  # None: the driver could not say
    version: int | None = None  # raw nvmlNvlinkVersion_t
    remote_device_type: str | None = None  # "GPU", "SWITCH", ...
    remote_pci_bus_id: str | None = None


@dataclass(frozen=True)
class NvmlGpu:
    index: int | None
    name: str | None = None
    uuid: str | None = None  # "GPU-..." as NVML and dcgm-exporter's UUID label give it
    pci_bus_id: str | None = None
    pcie: PcieLink = PcieLink()
    nvlinks: tuple[NvLink, ...] = ()  # empty also when the driver has no NVLink functions
    # The fabric's (clusterUuid, cliqueId) on multi-node NVLink (NVL72): GPUs of one clique
    # share one NVLink domain across servers. None where unset, empty or all-zero.
    clique: tuple[str, int] | None = None


@dataclass(frozen=True)
class P2PStatus:
    """NVML's P2P status from one GPU to another: capability -> status ("OK", "NS", ...);
    capabilities the driver could not answer are left out."""

    src: int | None
    dst: int | None
    status: Mapping[str, str]

    def refused(self, capabilities: tuple[str, ...] = ("read", "write")) -> dict[str, str]:
        """The capabilities among `capabilities` whose status is known and not OK."""
        return {
            cap: self.status[cap]
            for cap in capabilities
            if cap in self.status and self.status[cap].upper() != "OK"
        }


@dataclass(frozen=True)
class NvmlFacts:
    available: bool
    gpus: tuple[NvmlGpu, ...] = ()
    p2p: tuple[P2PStatus, ...] | None = None  # None: not sent (older collectors)
    driver_version: str | None = None

    @property
    def gpu_names(self) -> list[str]:
        """The names the driver gave, in index order (unknown ones left out)."""
        return [g.name for g in self.gpus if g.name]


@dataclass(frozen=True)
class RdmaNic:
    device: str
    port: int | str | None = None
    rate_gbps: float | None = None
    state: str | None = None
    link_layer: str | None = None
    pci_bus_id: str | None = None
    numa_node: int | None = None


@dataclass(frozen=True)
class HostFacts:
    product_name: str | None = None  # DMI: what a SKU is named after
    sys_vendor: str | None = None
    cpu_model: str | None = None
    kernel: str | None = None
    rdma_nics: tuple[RdmaNic, ...] = ()


def unknown(value: Any) -> bool:
    """None or a marker the collector writes where the driver gave no answer."""
    if value is None:
        return True
    if not isinstance(value, str):
        return False
    text = value.strip().lower()
    return text in _UNKNOWN_MARKERS or text.startswith("error")


def _int(value: Any, where: str) -> int | None:
    if unknown(value):
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise NvmlFactsError(f"NVML facts: {where} is {value!r}, expected an integer")


def _in_range(value: Any, where: str, low: int, high: int) -> int | None:
    """An integer between `low` and `high`, or unknown: a value outside is no GPU's (and
    past 2^63 it would not even fit the database's integer columns)."""
    number = _int(value, where)
    if number is not None and not low <= number <= high:
        raise NvmlFactsError(
            f"NVML facts: {where} is {number!r}, expected an integer from {low} to {high}"
        )
    return number


def _short(value: Any, where: str, limit: int = MAX_TEXT) -> None:
    """Free text of at most `limit` characters (anything else but a string is left to the
    readers, which take it as unknown)."""
    if isinstance(value, str) and len(value) > limit:
        raise NvmlFactsError(
            f"NVML facts: {where} has {len(value)} characters; at most {limit} are accepted"
        )


def _float(value: Any, where: str) -> float | None:
    if unknown(value):
        return None
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    raise NvmlFactsError(f"{where} is {value!r}, expected a number")


def _text(value: Any) -> str | None:
    """Free text the driver or the host gave; unknown markers and non-strings read as None."""
    if unknown(value) or not isinstance(value, str):
        return None
    return value.strip() or None


def _link_up(value: Any, where: str) -> bool | None:
    if isinstance(value, bool):
        return value
    if unknown(value):
        return None
    text = str(value).strip().lower()
    if text in ("up", "active", "enabled", "1"):
        return True
    if text in ("down", "inactive", "disabled", "0"):
        return False
    raise NvmlFactsError(f"NVML facts: {where} is {value!r}, expected 'up' or 'down'")


def _object(value: Any, where: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise NvmlFactsError(f"NVML facts: {where} is not an object")
    return value


def _bus_id(value: Any, where: str) -> str | None:
    text = _text(value)
    if text is not None and not _BUS_ID.match(text):
        raise NvmlFactsError(
            f"NVML facts: {where} is {value[:40]!r}, expected a PCI bus id (00000000:18:00.0)"
        )
    return text


def _gpu(g: Mapping[str, Any], where: str) -> NvmlGpu:
    pcie = _object(g.get("pcie"), f"{where}.pcie")
    cg, mg, cw, mw = (
        _in_range(pcie.get(k, pcie.get(alias)), f"{where}.pcie.{k}", 1, high)
        for k, alias, high in (
            ("current_generation", "current_gen", 8),
            ("max_generation", "max_gen", 8),
            ("current_width", "current_width", 32),
            ("max_width", "max_width", 32),
        )
    )
    _in_range(g.get("memory_total_bytes"), f"{where}.memory_total_bytes", 1, MAX_GPU_MEMORY_BYTES)
    _in_range(g.get("minor_number"), f"{where}.minor_number", 0, MAX_NVML_GPUS)
    for key in ("name", "uuid", "pci_device_id", "numa_affinity", "cpu_affinity", "gpu_numa_id"):
        _short(g.get(key), f"{where}.{key}")
    fabric = (
        _object(g.get("fabric"), f"{where}.fabric") if isinstance(g.get("fabric"), Mapping) else {}
    )
    for key in fabric:
        _short(fabric[key], f"{where}.fabric.{key}")
    uuid = fabric.get("cluster_uuid")
    if isinstance(uuid, str) and not re.fullmatch(r"[0-9A-Fa-f-]{0,64}", uuid):
        raise NvmlFactsError(
            f"NVML facts: {where}.fabric.cluster_uuid is {uuid[:40]!r}, expected a UUID"
        )
    clique_id = _in_range(fabric.get("clique_id"), f"{where}.fabric.clique_id", 0, 2**32 - 1)
    cluster = _text(uuid) if isinstance(uuid, str) else None
    clique = (
        (cluster.lower(), clique_id)
        if cluster and clique_id is not None and cluster.strip("0-")
        else None
    )
    links = g.get("nvlinks") or []
    if isinstance(links, str):
        links = []  # the driver has no NVLink functions ("unsupported")
    if not isinstance(links, list) or not all(isinstance(x, Mapping) for x in links):
        raise NvmlFactsError(f"NVML facts: {where}.nvlinks is not a list of objects")
    if len(links) > MAX_NVLINKS_PER_GPU:
        raise NvmlFactsError(
            f"NVML facts: {where}.nvlinks lists {len(links)} links; a GPU has at most "
            f"{MAX_NVLINKS_PER_GPU}"
        )
    return NvmlGpu(
        index=_in_range(g.get("index"), f"{where}.index", 0, MAX_NVML_GPUS - 1),
        name=_text(g.get("name")),
        uuid=_text(g.get("uuid")),
        pci_bus_id=_bus_id(g.get("pci_bus_id"), f"{where}.pci_bus_id"),
        pcie=PcieLink(cg, mg, cw, mw),
        clique=clique,
        nvlinks=tuple(
            NvLink(
                link=_in_range(
                    x.get("link"), f"{where}.nvlinks[{k}].link", 0, MAX_NVLINKS_PER_GPU - 1
                ),
                up=_link_up(x.get("state"), f"{where}.nvlinks[{k}].state"),
                version=_in_range(x.get("version"), f"{where}.nvlinks[{k}].version", 0, 255),
                remote_device_type=_text(x.get("remote_device_type")),
                remote_pci_bus_id=_bus_id(
                    x.get("remote_pci_bus_id"), f"{where}.nvlinks[{k}].remote_pci_bus_id"
                ),
            )
            for k, x in enumerate(links)
        ),
    )


def _distinct_indexes(gpus: tuple[NvmlGpu, ...]) -> None:
    seen: dict[int, int] = {}
    for n, gpu in enumerate(gpus):
        if gpu.index is None:
            continue
        if gpu.index in seen:
            raise NvmlFactsError(
                f"NVML facts: gpus[{n}].index is {gpu.index}, as gpus[{seen[gpu.index]}].index "
                "is: each GPU has its own index"
            )
        seen[gpu.index] = n


def _p2p(entries: Any, gpus: int) -> tuple[P2PStatus, ...] | None:
    if not isinstance(entries, list):
        return None
    if not all(isinstance(entry, Mapping) for entry in entries):
        raise NvmlFactsError("NVML facts: p2p holds something other than objects")
    if len(entries) > gpus * gpus:
        raise NvmlFactsError(
            f"NVML facts: p2p lists {len(entries)} pairs; {gpus} GPUs have at most {gpus * gpus}"
        )
    out = []
    for n, entry in enumerate(entries):
        if not isinstance(entry, Mapping):
            raise NvmlFactsError("NVML facts: p2p holds something other than objects")
        for cap, value in entry.items():
            _short(value, f"p2p[{n}].{cap}", 32)
        out.append(
            P2PStatus(
                src=_in_range(entry.get("from"), f"p2p[{n}].from", 0, MAX_NVML_GPUS - 1),
                dst=_in_range(entry.get("to"), f"p2p[{n}].to", 0, MAX_NVML_GPUS - 1),
                status={
                    str(cap): str(value)
                    for cap, value in entry.items()
                    if cap not in ("from", "to") and not unknown(value)
                },
            )
        )
    return tuple(out)


def read_nvml(doc: Mapping[str, Any]) -> NvmlFacts:
    """The collector's `nvml` object as NvmlFacts; NvmlFactsError names what is malformed."""
    if not isinstance(doc, Mapping):
        raise NvmlFactsError("NVML facts: expected {'gpus': [{...}, ...]}")
    if doc.get("available") is False:
        return NvmlFacts(available=False)  # the collector could not load NVML
    gpus = doc.get("gpus")
    if not isinstance(gpus, list) or not all(isinstance(g, Mapping) for g in gpus):
        raise NvmlFactsError("NVML facts: expected {'gpus': [{...}, ...]}")
    if len(gpus) > MAX_NVML_GPUS:
        raise NvmlFactsError(
            f"NVML facts: gpus lists {len(gpus)} GPUs; at most {MAX_NVML_GPUS} are accepted"
        )
    for key in ("driver_version", "nvml_version", "cuda_driver_version"):
        _short(doc.get(key), key)
    read = tuple(_gpu(g, f"gpus[{n}]") for n, g in enumerate(gpus))
    _distinct_indexes(read)
    return NvmlFacts(
        available=True,
        gpus=read,
        p2p=_p2p(doc.get("p2p"), len(gpus)),
        driver_version=_text(doc.get("driver_version")),
    )


def check_fits(facts: NvmlFacts, gpus: int) -> None:
    """Facts that can describe a topology of `gpus` GPUs: no more GPUs than it has, each
    index one of its GPU<index>."""
    if len(facts.gpus) > gpus:
        raise NvmlFactsError(
            f"NVML facts: gpus lists {len(facts.gpus)} GPUs, but the topology has {gpus}"
        )
    for n, gpu in enumerate(facts.gpus):
        if gpu.index is not None and gpu.index >= gpus:
            raise NvmlFactsError(
                f"NVML facts: gpus[{n}].index is {gpu.index}, but the topology has GPU0 to "
                f"GPU{gpus - 1}"
            )


def smallest_gpu_memory(doc: Any) -> int | None:
    """The smallest `memory_total_bytes` among the collector's GPUs (what a model must fit
    into on every one of them), None when none gives one. Descriptive, like the host facts:
    a GPU without an integer there is passed over, never an error."""
    gpus = doc.get("gpus") if isinstance(doc, Mapping) else None
    totals = [
        g["memory_total_bytes"]
        for g in (gpus if isinstance(gpus, list) else ())
        if isinstance(g, Mapping) and type(g.get("memory_total_bytes")) is int  # not a bool
    ]
    return min(totals) if totals else None


def nvlink_domain(doc: Any) -> str:
    """The multi-node NVLink domain the server's GPUs sit in ("<clusterUuid>/<cliqueId>"),
    when every GPU reports the same one; "" otherwise (no facts, no fabric, or GPUs that
    disagree). Descriptive like `smallest_gpu_memory`: facts ingest would refuse read as ""."""
    try:
        facts = read_nvml(doc)
    except NvmlFactsError:
        return ""
    cliques = {g.clique for g in facts.gpus}
    only = cliques.pop() if len(cliques) == 1 else None
    return f"{only[0]}/{only[1]}" if only else ""


def read_host(doc: Mapping[str, Any] | None) -> HostFacts:
    """The collector's `host` object as HostFacts. Host facts are descriptive only, so
    anything of the wrong shape reads as unknown rather than failing."""
    if not isinstance(doc, Mapping):
        return HostFacts()
    nics = []
    for item in doc.get("rdma_nics") or []:
        if not isinstance(item, Mapping) or not isinstance(item.get("device"), str):
            continue
        port = item.get("port")
        try:
            rate = _float(item.get("rate_gbps"), "rate_gbps")
            numa = _int(item.get("numa_node"), "numa_node")
        except NvmlFactsError:
            rate = numa = None
        nics.append(
            RdmaNic(
                device=item["device"],
                port=port if isinstance(port, int | str) and not isinstance(port, bool) else None,
                rate_gbps=rate,
                state=_text(item.get("state")),
                link_layer=_text(item.get("link_layer")),
                pci_bus_id=_text(item.get("pci_bus_id")),
                numa_node=numa if isinstance(numa, int) else None,
            )
        )
    return HostFacts(
        product_name=_text(doc.get("product_name")),
        sys_vendor=_text(doc.get("sys_vendor")),
        cpu_model=_text(doc.get("cpu_model")),
        kernel=_text(doc.get("kernel")),
        rdma_nics=tuple(nics),
    )
