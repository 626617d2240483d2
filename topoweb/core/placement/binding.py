"""Per-GPU affinity: nearest NICs and their class, NUMA node, CPUs, and launch hints."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from topoweb.core.costs import CostModel
from topoweb.core.model import Device, link_class_rank
from topoweb.core.placement.objective import hierarchy_order


@dataclass(frozen=True)
class GpuAffinity:
    gpu: int
    numa_node: str
    cpu_list: str | None
    nearest_nics: tuple[str, ...]
    nic_class: str | None
    warning: str | None

    def to_document(self) -> dict[str, Any]:
        return {
            "gpu": self.gpu,
            "numa_node": self.numa_node,
            "cpu_list": self.cpu_list,
            "nearest_nics": list(self.nearest_nics),
            "nic_class": self.nic_class,
            "warning": self.warning,
        }


@dataclass(frozen=True)
class AffinityAdvice:
    gpus: tuple[GpuAffinity, ...]
    cuda_visible_devices: str
    binding_hints: tuple[str, ...]

    def to_document(self) -> dict[str, Any]:
        return {
            "gpus": [g.to_document() for g in self.gpus],
            "cuda_visible_devices": self.cuda_visible_devices,
            "binding_hints": list(self.binding_hints),
        }


def affinity(model: CostModel) -> AffinityAdvice:
    """Per GPU: nearest NIC(s) and their class, NUMA node, CPUs; an order that keeps
    neighbouring ranks close; numactl / NCCL hints; a warning where no NIC shares the GPU's
    NUMA node (GPUDirect RDMA then crosses the socket link)."""
    topo, h = model.topo, model.hierarchy
    out = []
    hints = []
    for gpu in topo.gpus:
        numa = h.node(h.numa_of(gpu.id))
        nics = topo.nics
        nearest: tuple[str, ...] = ()
        near: list[Device] = []
        cls = None
        if nics:
            best = min(link_class_rank(topo.link_class(gpu.id, n.id)) for n in nics)
            near = [n for n in nics if link_class_rank(topo.link_class(gpu.id, n.id)) == best]
            nearest = tuple(n.nic_name or n.id for n in near)
            cls = topo.link_class(gpu.id, near[0].id)
        warning = None
        if nics and cls == "SYS":
            warning = (
                f"GPU{gpu.index} has no NIC on its NUMA node ({numa.label}): its "
                "network traffic crosses the socket link"
            )
        out.append(GpuAffinity(gpu.index, numa.label, gpu.cpu_affinity, nearest, cls, warning))
        node_no = numa.label.split()[-1] if numa.label.split()[-1].isdigit() else None
        hint = f"GPU{gpu.index}:"
        if node_no is not None:
            hint += f" numactl --cpunodebind={node_no} --membind={node_no}"
        elif gpu.cpu_affinity:
            hint += f" taskset -c {gpu.cpu_affinity}"
        # Only a name the capture gave (its NIC legend): `NIC0` is no RDMA device's name.
        rdma_names = [n.nic_name for n in near]
        if rdma_names and rdma_names[0]:
            hint += f"; NCCL_IB_HCA={rdma_names[0]}"
        hints.append(hint)
    order = hierarchy_order(model, sorted(model.gpu_ids))
    return AffinityAdvice(tuple(out), ",".join(map(str, order)), tuple(hints))
