"""The domain model: topologies and benchmark results as frozen dataclasses, with a versioned
JSON document form that the web service stores and the CLI prints."""

from __future__ import annotations

import functools
import itertools
import operator
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from topoweb.core.bulk import collector_paused

DOCUMENT_VERSION = 1

DeviceKind = Literal["gpu", "nic"]

# Nearest to farthest, as nvidia-smi orders them. NV<k> stands for every NVLink bundle size.
LINK_CLASS_ORDER: tuple[str, ...] = ("X", "NV", "PIX", "PXB", "PHB", "NODE", "SYS")
PCIE_CLASSES: tuple[str, ...] = ("PIX", "PXB", "PHB", "NODE", "SYS")

_NV_RE = re.compile(r"^NV(\d+)$")
# Past any real bundle (NV18 today): a count that only a forged report carries.
MAX_NVLINKS = 99
# Linux's limits: CONFIG_NR_CPUS at most 8192, MAX_NUMNODES 1024.
MAX_CPU_ID = 8191
MAX_NUMA_NODE = 1023
# What a device may be called (matrix labels, NIC legend names, NCCL XML net names): the
# spellings real hosts use (GPU0, NIC3, mlx5_bond_0, ibp12s0, eth0, 0000:18:00.0), short
# enough for every export and free of markup.
DEVICE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}\Z")
# Old drivers spell the socket link SOC; today it is SYS.
_ALIASES = {"SOC": "SYS"}


class DocumentError(ValueError):
    """A document does not have the shape this version of topoweb reads."""


# A matrix repeats a handful of spellings thousands of times: parse each once.
@functools.lru_cache(maxsize=256)
def normalise_link_class(token: str) -> str | None:
    """The canonical spelling of a topo -m cell (`SOC` -> `SYS`), or None if it is not one."""
    token = _ALIASES.get(token, token)
    if token in LINK_CLASS_ORDER and token != "NV":
        return token
    match = _NV_RE.match(token)
    if match and 0 < int(match.group(1)) <= MAX_NVLINKS:
        return token
    return None


@functools.lru_cache(maxsize=256)
def nvlink_count(link_class: str) -> int:
    """How many NVLinks a class names: 18 for NV18, 0 for any PCIe class."""
    match = _NV_RE.match(link_class)
    return int(match.group(1)) if match else 0


@functools.lru_cache(maxsize=256)
def link_class_rank(link_class: str) -> int:
    """Position in nearest-to-farthest order; every NV<k> shares the NVLink rank."""
    return LINK_CLASS_ORDER.index("NV" if nvlink_count(link_class) else link_class)


@dataclass(frozen=True)
class Device:
    id: str  # exactly as printed in the matrix header: GPU0, NIC3, mlx5_0
    kind: DeviceKind
    index: int  # position among devices of the same kind, in matrix order
    cpu_affinity: str | None = None
    numa_affinity: str | None = None
    gpu_numa_id: str | None = None
    nic_name: str | None = None  # the RDMA device name (mlx5_0) where known

    def to_document(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "kind": self.kind,
            "index": self.index,
            "cpu_affinity": self.cpu_affinity,
            "numa_affinity": self.numa_affinity,
            "gpu_numa_id": self.gpu_numa_id,
            "nic_name": self.nic_name,
        }

    @classmethod
    def from_document(cls, doc: dict[str, Any]) -> Device:
        kind = doc.get("kind")
        if kind not in ("gpu", "nic"):
            raise DocumentError(f"device {doc.get('id')!r} has unknown kind {kind!r}")
        return cls(
            id=str(doc["id"]),
            kind=kind,
            index=int(doc["index"]),
            cpu_affinity=doc.get("cpu_affinity"),
            numa_affinity=doc.get("numa_affinity"),
            gpu_numa_id=doc.get("gpu_numa_id"),
            nic_name=doc.get("nic_name"),
        )


@dataclass(frozen=True)
class Link:
    a: str
    b: str
    link_class: str  # canonical: NV18, PIX, PXB, PHB, NODE, SYS

    @property
    def nvlinks(self) -> int:
        return nvlink_count(self.link_class)

    @property
    def is_nvlink(self) -> bool:
        return self.nvlinks > 0

    def to_document(self) -> dict[str, Any]:
        return {"a": self.a, "b": self.b, "class": self.link_class, "nvlinks": self.nvlinks}


_LINK_ENDS = operator.attrgetter("a", "b")
_LINK_CLASS = operator.attrgetter("link_class")


def _class_rows(devices: tuple[Device, ...], links: tuple[Link, ...]) -> dict[str, dict[str, str]]:
    """Per device, the class of its link to every device ("X" to itself): the one index of a
    Topology's pairs. A pair given twice keeps its last link (__post_init__ counts them)."""
    rows: dict[str, dict[str, str]] = {d.id: {d.id: "X"} for d in devices}
    for lnk in links:
        rows[lnk.a][lnk.b] = lnk.link_class
        rows[lnk.b][lnk.a] = lnk.link_class
    return rows


def _valid_link_class(link_class: str) -> bool:
    """A canonical class a link can have: not `X` (a device to itself), not an alias."""
    return normalise_link_class(link_class) == link_class and link_class != "X"


@dataclass(frozen=True)
class Topology:
    """One server's devices and the link class of every unordered pair of them."""

    devices: tuple[Device, ...]
    links: tuple[Link, ...]
    warnings: tuple[str, ...] = ()
    # What a richer source adds beyond the class matrix (NCCL topology XML: PCIe link speed and
    # width per hop, NIC ports and speeds, NVLink targets, CPU placement) and where two sources
    # disagree. Not part of equality or the fingerprint: the wiring is the matrix.
    details: dict[str, Any] = field(default_factory=dict, compare=False, hash=False, repr=False)

    def __post_init__(self) -> None:
        ids = [d.id for d in self.devices]
        if len(set(ids)) != len(ids):
            raise DocumentError(f"duplicate device ids in {ids}")
        known = set(ids)
        # Checked column-wise in C (a matrix has n(n-1)/2 links); only links that fail are
        # walked one by one, to name the first bad one.
        ends = list(map(_LINK_ENDS, self.links))
        if not (
            known.issuperset(itertools.chain.from_iterable(ends))
            and not any(itertools.starmap(operator.eq, ends))
            and all(_valid_link_class(c) for c in set(map(_LINK_CLASS, self.links)))
        ):
            for link in self.links:
                if link.a not in known or link.b not in known or link.a == link.b:
                    raise DocumentError(
                        f"link {link.a}-{link.b} does not join two distinct devices"
                    )
                if not _valid_link_class(link.link_class):
                    raise DocumentError(
                        f"link {link.a}-{link.b} has invalid class {link.link_class!r}"
                    )
        rows = _class_rows(self.devices, self.links)
        expected = len(ids) * (len(ids) - 1) // 2
        # Each row holds the device itself and one entry per distinct partner.
        distinct = (sum(map(len, rows.values())) - len(ids)) // 2
        if distinct != expected or len(self.links) != expected:
            raise DocumentError(
                f"{len(ids)} devices need {expected} distinct links, got {len(self.links)}"
            )
        self.__dict__["_class_rows"] = rows  # built to count distinct pairs: keep it

    @classmethod
    def from_checked(
        cls, devices: tuple[Device, ...], links: tuple[Link, ...], warnings: tuple[str, ...]
    ) -> Topology:
        """A Topology from a reader that has itself guaranteed everything __post_init__
        checks (distinct device ids, one link of a valid class per pair of them): the checks
        and the class rows were half the cost of reading an 8-GPU 12-NIC matrix, and the
        rows are built on first look-up instead. Every other caller goes through the checks."""
        self = object.__new__(cls)
        # The fields __init__ would set, as it would set them (frozen: straight into __dict__).
        self.__dict__.update(devices=devices, links=links, warnings=warnings, details={})
        return self

    @property
    def gpus(self) -> tuple[Device, ...]:
        return tuple(d for d in self.devices if d.kind == "gpu")

    @property
    def nics(self) -> tuple[Device, ...]:
        return tuple(d for d in self.devices if d.kind == "nic")

    def device(self, device_id: str) -> Device:
        for d in self.devices:
            if d.id == device_id:
                return d
        raise KeyError(device_id)

    def gpu(self, index: int) -> Device:
        found = self._gpu_by_index.get(index)
        if found is None:
            raise KeyError(f"GPU index {index}")
        return found

    @functools.cached_property
    def _gpu_by_index(self) -> dict[int, Device]:
        # Looked up once per GPU pair by the acceptance report: a scan of the GPUs each time
        # made it cubic on large servers.
        found: dict[int, Device] = {}
        for d in self.gpus:
            found.setdefault(d.index, d)  # the first, as the scan found
        return found

    def link(self, a: str, b: str) -> Link:
        """The link between two distinct devices, facing from `a` to `b`; KeyError for a device
        this topology lacks, or for a device with itself (no link)."""
        if a == b:
            raise KeyError((a, b))
        return Link(a, b, self._class_rows[a][b])

    def link_class(self, a: str, b: str) -> str:
        return "X" if a == b else self._class_rows[a][b]

    def class_row(self, a: str) -> Mapping[str, str]:
        """The link class from device `a` to every device ("X" to itself), the row link_class
        reads: for a caller that walks whole rows (the matrix, each GPU's peers)."""
        return self._class_rows[a]

    @functools.cached_property
    def _class_rows(self) -> dict[str, dict[str, str]]:
        # Set by __post_init__; built here only for a Topology made by from_checked.
        return _class_rows(self.devices, self.links)

    def gpu_links(self) -> Iterator[Link]:
        return iter(self._gpu_links)

    @functools.cached_property
    def _gpu_links(self) -> tuple[Link, ...]:
        # Asked for by every cost model and catalogue look-up; a 576-GPU rack has 660k links.
        gpu_ids = {d.id for d in self.gpus}
        return tuple(lnk for lnk in self.links if lnk.a in gpu_ids and lnk.b in gpu_ids)

    def to_document(self) -> dict[str, Any]:
        with collector_paused():  # a dict per link, none in a cycle
            links = _links_document(self.links)
        doc: dict[str, Any] = {
            "kind": "topology",
            "version": DOCUMENT_VERSION,
            "devices": [d.to_document() for d in self.devices],
            "links": links,
            "warnings": list(self.warnings),
        }
        if self.details:
            doc["details"] = self.details
        return doc

    @classmethod
    def from_document(cls, doc: dict[str, Any]) -> Topology:
        _check_header(doc, "topology")
        try:
            devices = tuple(Device.from_document(d) for d in doc["devices"])
            with collector_paused():  # an object per link, none in a cycle
                links = tuple(Link(str(x["a"]), str(x["b"]), str(x["class"])) for x in doc["links"])
        except (KeyError, TypeError, ValueError) as exc:
            raise DocumentError(f"malformed topology document: {exc}") from exc
        details = doc.get("details") or {}
        if not isinstance(details, dict):
            raise DocumentError("malformed topology document: details is not an object")
        return cls(
            devices=devices,
            links=links,
            warnings=tuple(doc.get("warnings", ())),
            details=details,
        )


def _links_document(links: tuple[Link, ...]) -> list[dict[str, Any]]:
    """Link.to_document of every link, with each distinct class's NVLink count looked up
    once: a 576-GPU domain has 165,600 links and a handful of classes."""
    counts = {c: nvlink_count(c) for c in set(map(_LINK_CLASS, links))}
    return [
        {"a": lnk.a, "b": lnk.b, "class": lnk.link_class, "nvlinks": counts[lnk.link_class]}
        for lnk in links
    ]


def _check_header(doc: Any, kind: str) -> None:
    if not isinstance(doc, dict) or doc.get("kind") != kind:
        raise DocumentError(f"not a {kind} document")
    version = doc.get("version", DOCUMENT_VERSION)
    if version != DOCUMENT_VERSION:
        raise DocumentError(f"{kind} document version {version} is not supported")


# --- nccl-tests --------------------------------------------------------------------------


@dataclass(frozen=True)
class NcclMeasurement:
    time_us: float | None
    algbw_gbps: float | None
    busbw_gbps: float | None
    wrong: int | None  # None where validation was off (N/A); old versions print an error value
    error: float | None = None

    def to_document(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "time_us": self.time_us,
            "algbw_gbps": self.algbw_gbps,
            "busbw_gbps": self.busbw_gbps,
            "wrong": self.wrong,
        }
        if self.error is not None:
            doc["error"] = self.error
        return doc

    @classmethod
    def from_document(cls, doc: dict[str, Any]) -> NcclMeasurement:
        return cls(
            time_us=doc.get("time_us"),
            algbw_gbps=doc.get("algbw_gbps"),
            busbw_gbps=doc.get("busbw_gbps"),
            wrong=doc.get("wrong"),
            error=doc.get("error"),
        )


@dataclass(frozen=True)
class NcclRow:
    bytes: int
    count: int
    type: str
    redop: str | None
    root: int | None
    out_of_place: NcclMeasurement
    in_place: NcclMeasurement

    def to_document(self) -> dict[str, Any]:
        return {
            "bytes": self.bytes,
            "count": self.count,
            "type": self.type,
            "redop": self.redop,
            "root": self.root,
            "out_of_place": self.out_of_place.to_document(),
            "in_place": self.in_place.to_document(),
        }

    @classmethod
    def from_document(cls, doc: dict[str, Any]) -> NcclRow:
        return cls(
            bytes=int(doc["bytes"]),
            count=int(doc["count"]),
            type=str(doc["type"]),
            redop=doc.get("redop"),
            root=doc.get("root"),
            out_of_place=NcclMeasurement.from_document(doc["out_of_place"]),
            in_place=NcclMeasurement.from_document(doc["in_place"]),
        )


@dataclass(frozen=True)
class NcclRank:
    rank: int
    group: int | None
    pid: int | None
    host: str | None
    device: int | None
    bus_id: str | None
    name: str | None

    def to_document(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "group": self.group,
            "pid": self.pid,
            "host": self.host,
            "device": self.device,
            "bus_id": self.bus_id,
            "name": self.name,
        }


@dataclass(frozen=True)
class NcclRun:
    """One nccl-tests run: the header facts, every table row and any failure it reported."""

    collective: str | None  # all_reduce, all_gather, ... as nccl-tests names its binaries
    rows: tuple[NcclRow, ...]
    avg_busbw_gbps: float | None = None
    errors: tuple[str, ...] = ()
    nccl_version: str | None = None
    tests_version: str | None = None
    n_threads: int | None = None
    n_gpus: int | None = None
    ranks: tuple[NcclRank, ...] = ()
    command: str | None = None
    warnings: tuple[str, ...] = ()  # what the reader guessed or skipped; not failures

    @property
    def failed(self) -> bool:
        return bool(self.errors)

    def to_document(self) -> dict[str, Any]:
        return {
            "kind": "nccl-tests",
            "version": DOCUMENT_VERSION,
            "collective": self.collective,
            "nccl_version": self.nccl_version,
            "tests_version": self.tests_version,
            "n_threads": self.n_threads,
            "n_gpus": self.n_gpus,
            "ranks": [r.to_document() for r in self.ranks],
            "command": self.command,
            "rows": [r.to_document() for r in self.rows],
            "avg_busbw_gbps": self.avg_busbw_gbps,
            "errors": list(self.errors),
            "warnings": list(self.warnings),
        }

    @classmethod
    def from_document(cls, doc: dict[str, Any]) -> NcclRun:
        _check_header(doc, "nccl-tests")
        try:
            return cls(
                collective=doc.get("collective"),
                rows=tuple(NcclRow.from_document(r) for r in doc["rows"]),
                avg_busbw_gbps=doc.get("avg_busbw_gbps"),
                errors=tuple(doc.get("errors", ())),
                nccl_version=doc.get("nccl_version"),
                tests_version=doc.get("tests_version"),
                n_threads=doc.get("n_threads"),
                n_gpus=doc.get("n_gpus"),
                ranks=tuple(NcclRank(**r) for r in doc.get("ranks", ())),
                command=doc.get("command"),
                warnings=tuple(doc.get("warnings", ())),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise DocumentError(f"malformed nccl-tests document: {exc}") from exc


# --- p2pBandwidthLatencyTest ---------------------------------------------------------------

P2P_MATRIX_NAMES: tuple[str, ...] = (
    "unidirectional_p2p_disabled_gbps",
    "unidirectional_p2p_enabled_gbps",
    "bidirectional_p2p_disabled_gbps",
    "bidirectional_p2p_enabled_gbps",
    "latency_gpu_p2p_disabled_us",
    "latency_cpu_p2p_disabled_us",
    "latency_gpu_p2p_enabled_us",
    "latency_cpu_p2p_enabled_us",
)

Matrix = tuple[tuple[float, ...], ...]


@dataclass(frozen=True)
class P2PGpu:
    index: int
    name: str
    pci_bus_id: str | None
    pci_domain_id: str | None = None
    pci_device_id: str | None = None

    def to_document(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "name": self.name,
            "pci_bus_id": self.pci_bus_id,
            "pci_domain_id": self.pci_domain_id,
            "pci_device_id": self.pci_device_id,
        }


@dataclass(frozen=True)
class P2PResult:
    """The matrices of one p2pBandwidthLatencyTest run; a matrix the output lacks is absent."""

    gpus: tuple[P2PGpu, ...]
    p2p_access: tuple[tuple[bool, ...], ...] | None
    matrices: dict[str, Matrix] = field(default_factory=dict, hash=False)
    warnings: tuple[str, ...] = ()

    def to_document(self) -> dict[str, Any]:
        return {
            "kind": "p2p-bandwidth-latency",
            "version": DOCUMENT_VERSION,
            "gpus": [g.to_document() for g in self.gpus],
            "p2p_access": [list(r) for r in self.p2p_access] if self.p2p_access else None,
            "matrices": {k: [list(r) for r in m] for k, m in self.matrices.items()},
            "warnings": list(self.warnings),
        }

    @classmethod
    def from_document(cls, doc: dict[str, Any]) -> P2PResult:
        _check_header(doc, "p2p-bandwidth-latency")
        try:
            access = doc.get("p2p_access")
            return cls(
                gpus=tuple(P2PGpu(**g) for g in doc["gpus"]),
                p2p_access=tuple(tuple(bool(c) for c in r) for r in access) if access else None,
                matrices={
                    k: tuple(tuple(float(c) for c in r) for r in m)
                    for k, m in doc.get("matrices", {}).items()
                    if k in P2P_MATRIX_NAMES
                },
                warnings=tuple(doc.get("warnings", ())),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise DocumentError(f"malformed p2p document: {exc}") from exc


# --- nvbandwidth ----------------------------------------------------------------------------

NvbMatrix = tuple[tuple[float | None, ...], ...]


@dataclass(frozen=True)
class NvbTestcase:
    """One nvbandwidth testcase: its matrix as printed (None for N/A), rows and columns as the
    description names them (`memcpy CE GPU(row) <- GPU(column) bandwidth (GB/s)`)."""

    name: str
    status: str  # Passed, Waived, Error, Not Found (as nvbandwidth spells them)
    description: str = ""
    matrix: NvbMatrix = ()
    sum: float | None = None

    def to_document(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "status": self.status,
            "description": self.description,
            "matrix": [list(r) for r in self.matrix],
            "sum": self.sum,
        }

    @classmethod
    def from_document(cls, doc: dict[str, Any]) -> NvbTestcase:
        return cls(
            name=str(doc["name"]),
            status=str(doc.get("status", "")),
            description=str(doc.get("description", "")),
            matrix=tuple(
                tuple(None if c is None else float(c) for c in r) for r in doc.get("matrix", ())
            ),
            sum=doc.get("sum"),
        )


@dataclass(frozen=True)
class NvbandwidthRun:
    """One nvbandwidth run (text or `-j` JSON): header facts and every testcase it reported."""

    testcases: tuple[NvbTestcase, ...]
    version: str | None = None
    driver_version: str | None = None
    cuda_runtime_version: str | None = None
    devices: tuple[str, ...] = ()  # "NVIDIA A100-SXM4-80GB (00000000:34:00)" per CUDA device
    errors: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()

    def testcase(self, name: str) -> NvbTestcase | None:
        for t in self.testcases:
            if t.name == name and t.matrix:
                return t
        return None

    def to_document(self) -> dict[str, Any]:
        return {
            "kind": "nvbandwidth",
            "version": DOCUMENT_VERSION,
            "nvbandwidth_version": self.version,
            "driver_version": self.driver_version,
            "cuda_runtime_version": self.cuda_runtime_version,
            "devices": list(self.devices),
            "testcases": [t.to_document() for t in self.testcases],
            "errors": list(self.errors),
            "warnings": list(self.warnings),
        }

    @classmethod
    def from_document(cls, doc: dict[str, Any]) -> NvbandwidthRun:
        _check_header(doc, "nvbandwidth")
        try:
            return cls(
                testcases=tuple(NvbTestcase.from_document(t) for t in doc["testcases"]),
                version=doc.get("nvbandwidth_version"),
                driver_version=doc.get("driver_version"),
                cuda_runtime_version=doc.get("cuda_runtime_version"),
                devices=tuple(doc.get("devices", ())),
                errors=tuple(doc.get("errors", ())),
                warnings=tuple(doc.get("warnings", ())),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise DocumentError(f"malformed nvbandwidth document: {exc}") from exc


Parsed = Topology | NcclRun | P2PResult | NvbandwidthRun


def from_document(doc: dict[str, Any]) -> Parsed:
    """Rebuild whichever model object a stored document describes."""
    readers: dict[str, Callable[[dict[str, Any]], Parsed]] = {
        "topology": Topology.from_document,
        "nccl-tests": NcclRun.from_document,
        "p2p-bandwidth-latency": P2PResult.from_document,
        "nvbandwidth": NvbandwidthRun.from_document,
    }
    kind = doc.get("kind") if isinstance(doc, dict) else None
    if kind not in readers:
        raise DocumentError(f"unknown document kind {kind!r}")
    return readers[kind](doc)
