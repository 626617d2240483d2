"""Inputs larger than any fixture, built from the shapes of real ones: `nvidia-smi topo -m`
matrices of many GPUs or NICs, and an nccl-tests output with its table repeated. The
reliability tests and bench/ use them to show where work is bounded and where limits refuse."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

FIXTURES = Path(__file__).resolve().parent / "fixtures"
NCCL_SWEEP = "nccl_06_a100-sxm4-40gb-8gpu-single-proc-g8-full-sweep.txt"


def matrix(names: list[str], cell: Callable[[int, int], str], numa: Callable[[int], int]) -> str:
    """A topo -m matrix as nvidia-smi prints it (tabs, affinity columns on GPU rows, legend)."""
    lines = ["\t" + "\t".join(names) + "\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID"]
    for i, name in enumerate(names):
        cells = [" X " if i == j else cell(i, j) for j in range(len(names))]
        extra = f"\t0-15\t{numa(i)}\t\tN/A" if name.startswith("GPU") else ""
        lines.append(name + "\t" + "\t".join(cells) + extra)
    return "\n".join(lines) + "\n\nLegend:\n\n  X    = Self\n"


def gpu_ring(n: int) -> str:
    """n GPUs in a ring: each NV1 to its two neighbours, SYS to the rest, one NUMA node."""
    return matrix(
        [f"GPU{i}" for i in range(n)],
        lambda i, j: "NV1" if (i - j) % n in (1, n - 1) else "SYS",
        lambda i: 0,
    )


def nvswitch_domain(n: int) -> str:
    """n GPUs all NV18 to each other (an NVL72 rack, or a 576-GPU NVLink domain), two NUMA
    nodes."""
    return matrix([f"GPU{i}" for i in range(n)], lambda i, j: "NV18", lambda i: i % 2)


def many_nics(gpus: int, nics: int) -> str:
    """An NVSwitch box with `nics` NICs, split over two NUMA nodes."""
    names = [f"GPU{i}" for i in range(gpus)] + [f"NIC{i}" for i in range(nics)]

    def side(k: int) -> int:
        return k % 2 if k < gpus else (k - gpus) % 2

    def cell(i: int, j: int) -> str:
        if i < gpus and j < gpus:
            return "NV18"
        return "NODE" if side(i) == side(j) else "SYS"

    return matrix(names, cell, lambda i: i % 2)


def long_nccl(rows: int) -> str:
    """The A100 full sweep with its table repeated until it has `rows` result rows."""
    lines = (FIXTURES / NCCL_SWEEP).read_text(encoding="utf-8").splitlines()
    table = [ln for ln in lines if ln.strip() and ln.strip()[0].isdigit()]
    head = lines[: lines.index(table[0])]
    tail = lines[lines.index(table[-1]) + 1 :]
    body = [table[k % len(table)] for k in range(rows)]
    return "\n".join(head + body + tail) + "\n"


def nccl_xml(gpus: int, nvlinks: int = 18, switched: bool = False) -> str:
    """An NCCL topology XML (the shape of tests/fixtures/ncclxml_01) of `gpus` GPUs on one
    CPU, each with `nvlinks` <nvlink> elements: to the next GPUs, or to NVSwitches."""

    def busid(i: int) -> str:
        return f"{i // 256:04x}:{i % 256:02x}:00.0"

    lines = ['<system version="1">', '  <cpu numaid="0" affinity="ffffffff" arch="x86_64">']
    for i in range(gpus):
        lines.append(f'    <pci busid="{busid(i)}" class="0x030200" link_speed="" link_width="0">')
        lines.append(f'      <gpu dev="{i}" sm="90" rank="{i}" gdr="1">')
        for k in range(nvlinks):
            if switched:
                target, tclass = f"ffff:{k:02x}:00.0", "0x068000"
            else:
                target, tclass = busid((i + 1 + k) % gpus), "0x030200"
            lines.append(f'        <nvlink target="{target}" count="1" tclass="{tclass}"/>')
        lines += ["      </gpu>", "    </pci>"]
    lines += ["  </cpu>", "</system>"]
    return "\n".join(lines) + "\n"
