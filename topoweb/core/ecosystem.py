"""Exports for the tools operators already run, by name: an NCCL_TOPO_FILE, Slurm gres.conf,
Kubernetes node labels (JSON map or `kubectl label` command). One entry point for the CLI,
the API and the server page, so all three give the same bytes."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from topoweb.core.fingerprint import topology_fingerprint
from topoweb.core.formats.ncclxml import HostFacts, to_nccl_xml
from topoweb.core.model import Topology
from topoweb.core.scheduling import gres_conf, kubectl_label_lines, node_labels

EXPORT_FORMATS: dict[str, tuple[str, str]] = {
    # name: (content type, file name suffix)
    "nccl-xml": ("application/xml", "nccl-topo.xml"),
    "gres": ("text/plain", "gres.conf"),
    "k8s-labels": ("application/json", "labels.json"),
    "kubectl": ("text/plain", "label.sh"),
}


@dataclass(frozen=True)
class Export:
    body: str
    content_type: str
    filename: str
    warnings: tuple[str, ...] = ()


def host_facts(nvml: Mapping[str, Any] | None, host: Mapping[str, Any] | None) -> HostFacts:
    """What the collector's NVML and host facts say that the XML writer can use."""
    gpus = nvml.get("gpus") if isinstance(nvml, Mapping) and nvml.get("available") else None
    gpu_bus: dict[str, str] = {}
    gens: set[int] = set()
    widths: set[int] = set()
    if isinstance(gpus, list):
        for i, g in enumerate(gpus):
            if not isinstance(g, Mapping):
                continue
            bus = g.get("pci_bus_id")
            if isinstance(bus, str) and ":" in bus:
                gpu_bus[f"GPU{i}"] = bus
            pcie: Mapping[str, Any] = g["pcie"] if isinstance(g.get("pcie"), Mapping) else {}
            if isinstance(pcie.get("max_generation"), int):
                gens.add(pcie["max_generation"])
            if isinstance(pcie.get("max_width"), int):
                widths.add(pcie["max_width"])
    nic_speed: dict[str, int] = {}
    nic_bus: dict[str, str] = {}
    nics = host.get("rdma_nics") if isinstance(host, Mapping) else None
    if isinstance(nics, list):
        for n in nics:
            if isinstance(n, Mapping) and isinstance(n.get("device"), str):
                if isinstance(n.get("rate_gbps"), int | float):
                    nic_speed.setdefault(n["device"], int(n["rate_gbps"] * 1000))
                if isinstance(n.get("pci_bus_id"), str):
                    nic_bus.setdefault(n["device"], n["pci_bus_id"])
    cpu = host.get("cpu_model") if isinstance(host, Mapping) else None
    return HostFacts(
        gpu_bus_ids=gpu_bus,
        nic_bus_ids=nic_bus,
        nic_speed_mbps=nic_speed,
        pcie_gen=gens.pop() if len(gens) == 1 else None,
        pcie_width=widths.pop() if len(widths) == 1 else None,
        cpu_model=cpu if isinstance(cpu, str) else None,
    )


def render_export(
    topo: Topology,
    fmt: str,
    *,
    name: str,
    nvml: Mapping[str, Any] | None = None,
    host: Mapping[str, Any] | None = None,
    fingerprint: str | None = None,
    gpu_model: str | None = None,
) -> Export:
    """The file `fmt` for one server (or a topology class: then `name` is the class and
    `nvml`/`host` are absent). ValueError names an unknown format."""
    if fmt not in EXPORT_FORMATS:
        raise ValueError(f"unknown export format {fmt!r}; expected one of {sorted(EXPORT_FORMATS)}")
    content_type, suffix = EXPORT_FORMATS[fmt]
    filename = f"{_file_stem(name)}-{suffix}"
    if fmt == "nccl-xml":
        facts = host_facts(nvml, host)
        nic_bus = {
            d.id: facts.nic_bus_ids[d.nic_name]
            for d in topo.nics
            if d.nic_name and d.nic_name in facts.nic_bus_ids
        }
        facts = HostFacts(
            gpu_bus_ids=facts.gpu_bus_ids,
            nic_bus_ids=nic_bus,
            nic_speed_mbps=facts.nic_speed_mbps,
            pcie_gen=facts.pcie_gen,
            pcie_width=facts.pcie_width,
            cpu_model=facts.cpu_model,
        )
        body, warnings = to_nccl_xml(topo, facts)
        return Export(body, content_type, filename, tuple(warnings))
    if fmt == "gres":
        hostname = name if nvml is not None or host is not None else None
        body = gres_conf(topo, nvml=nvml, gpu_type=gpu_model or None, hostname=hostname)
        return Export(body, content_type, filename)
    labels = node_labels(
        topo, fingerprint=fingerprint or topology_fingerprint(topo), gpu_model=gpu_model
    )
    if fmt == "k8s-labels":
        return Export(json.dumps(labels, indent=2, sort_keys=True) + "\n", content_type, filename)
    return Export(kubectl_label_lines(name, labels), content_type, filename)


def _file_stem(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "-" for c in name)[:80] or "topology"
