"""Command line over the core: `python -m topoweb.core.cli
parse|cost|place|serve|analyse|export|fabric FILE`.

Contract: a JSON document (for `export`, the exported file itself) on stdout and exit 0, or
one line naming the problem on stderr and exit 2."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, NoReturn

from topoweb.core.analysis import CalibrationInput, analyse
from topoweb.core.costs import OPERATIONS, build_model, collective_cost, p2p_status_from_text
from topoweb.core.ecosystem import EXPORT_FORMATS, render_export
from topoweb.core.fabric import build_fabric
from topoweb.core.fabric_exports import FABRIC_EXPORTS, render_fabric_export
from topoweb.core.fabric_findings import fabric_analysis
from topoweb.core.formats import ParseError, parse_text
from topoweb.core.formats.ibnet import IbnetCapture
from topoweb.core.ledger import PRESETS, Layout, ModelShape
from topoweb.core.merge import merge_sources
from topoweb.core.model import NcclRun, P2PResult, Topology
from topoweb.core.placement import place, recommend
from topoweb.core.placement.serving import DEFAULT_CONCURRENCY, DTYPES, serve
from topoweb.core.scheduling import topology_conf
from topoweb.core.steptime import RECOMPUTE, gpu_spec, valid_layout_problem

EXIT_BAD_INPUT = 2


class UsageError(Exception):
    """A request the core cannot answer (bad file, impossible job); printed as one line."""


def read_input(path: str) -> str:
    try:
        data = Path(path).read_bytes() if path != "-" else sys.stdin.buffer.read()
    except OSError as exc:
        raise UsageError(f"{path}: cannot read: {exc.strerror}") from exc
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise UsageError(f"{path}: line {line}: not UTF-8 text") from exc


def cmd_parse(args: argparse.Namespace) -> dict[str, Any]:
    text = read_input(args.file)
    try:
        return parse_text(text).to_document()
    except ParseError as exc:
        raise UsageError(f"{args.file}: {exc}") from exc


def _topology(path: str) -> Topology:
    text = read_input(path)
    try:
        parsed = parse_text(text, expected="topology")
    except ParseError as exc:
        raise UsageError(f"{path}: {exc}") from exc
    assert isinstance(parsed, Topology)
    return parsed


def cmd_export(args: argparse.Namespace) -> str:
    """The export as the file itself (not JSON); warnings about assumptions go to stderr."""
    if args.format == "topology-conf":
        return _topology_conf(args.file)
    topo = _topology(args.file[0]) if len(args.file) == 1 else None
    if topo is None:
        raise UsageError(f"--format {args.format} takes one topology file")
    if args.with_file:
        other = _topology(args.with_file)
        topo = merge_sources(topo, other)
    name = args.name or Path(args.file[0]).stem
    try:
        out = render_export(topo, args.format, name=name, gpu_model=args.gpu_model)
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    for w in out.warnings:
        print(f"warning: {w}", file=sys.stderr)
    return out.body


def _topology_conf(specs: list[str]) -> str:
    """HOST=DOMAIN pairs (the NVLink domain each server's GPUs belong to) -> topology.conf."""
    domains: dict[str, list[str]] = {}
    for spec in specs:
        host, sep, domain = spec.partition("=")
        if not sep or not host or not domain:
            raise UsageError(f"topology-conf: expected HOST=NVLINK_DOMAIN, got {spec!r}")
        domains.setdefault(domain, []).append(host)
    return topology_conf(domains)


def _index_list(value: str, flag: str) -> list[int]:
    try:
        out = [int(x) for x in value.split(",") if x.strip()]
    except ValueError as exc:
        raise UsageError(f"{flag}: expected comma-separated GPU indices, got {value!r}") from exc
    if not out:
        raise UsageError(f"{flag}: no GPU index given")
    return out


def cmd_cost(args: argparse.Namespace) -> dict[str, Any]:
    topo = _topology(args.file)
    gpus = _index_list(args.gpus, "--gpus")
    status = None
    if args.p2p_status is not None:
        status = p2p_status_from_text(read_input(args.p2p_status))
        if not status:
            raise UsageError(f"{args.p2p_status}: no `nvidia-smi topo -p2p` matrix found")
    try:
        model = build_model(
            topo,
            args.gpu_model,
            p2p=args.p2p,
            p2p_status=status,
            nodes=args.nodes,
            nic_gbits=args.nic_gbps,
            nics_per_node=args.nics_per_node,
            nvlink_nodes=args.nvlink_nodes,
            cpu_model=args.cpu_model,
        )
        cost = collective_cost(
            model,
            args.collective,
            gpus,
            args.bytes,
            bidirectional=args.bidirectional,
            gpus_per_thread=args.gpus_per_thread,
        )
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    return {
        "collective": cost.collective,
        "gpus": gpus,
        "bytes": cost.bytes,
        "time_us": round(cost.time_us, 3),
        "algbw_gbps": round(cost.algbw_gbps, 3),
        "busbw_gbps": round(cost.busbw_gbps, 3),
        "bottleneck": cost.bottleneck,
        "algorithm": cost.algorithm,
        "protocol": cost.protocol,
        "nodes": cost.nodes,
        "transports": list(cost.transports),
        "assumed": list(cost.assumed),
    }


def _cpu_model_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--cpu-model",
        help='the host\'s CPU as /proc/cpuinfo names it, e.g. "AMD EPYC 9654 96-Core Processor": '
        "its socket link (default: the one an NCCL XML's CPUs name, else the GPU generation's "
        "usual platform, assumed)",
    )


def _positive_int(value: str) -> int:
    try:
        out = int(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {value!r}") from exc
    if out < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {out}")
    return out


def _positive_float(value: str) -> float:
    try:
        out = float(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected a number, got {value!r}") from exc
    if not out > 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {value}")
    return out


def _shape(args: argparse.Namespace) -> ModelShape:
    """The preset named by --model with --seq, --global-batch and --micro-batch applied."""
    shape = PRESETS[args.model]
    changes = {
        k: v
        for k, v in (
            ("seq", args.seq),
            ("global_batch", args.global_batch),
            ("micro_batch", args.micro_batch),
        )
        if v is not None
    }
    try:
        return replace(shape, **changes)
    except ValueError as exc:
        raise UsageError(str(exc)) from exc


def cmd_place(args: argparse.Namespace) -> dict[str, Any]:
    topo = _topology(args.file)
    free = _index_list(args.free, "--free") if args.free is not None else None
    shape = _shape(args)
    given = [x is not None for x in (args.tp, args.pp, args.dp)]
    if any(given) and not all(given):
        raise UsageError("--tp, --pp and --dp go together (or leave all three out to rank layouts)")
    if args.ep > 1 and not shape.moe_layers:
        raise UsageError(
            f"--ep {args.ep}: {shape.name} has no MoE layers; pick an MoE model "
            f"({', '.join(k for k, v in PRESETS.items() if v.moe_layers)})"
        )
    try:
        model = build_model(topo, args.gpu_model, cpu_model=args.cpu_model)
        spec = gpu_spec(args.gpu_model, model.hardware.generation.name)
        if not any(given):
            return recommend(
                model, shape, free, spec=spec, zero=args.zero, recompute=args.recompute
            ).to_document()
        layout = Layout(args.tp, args.pp, args.dp, args.ep)
        problem = valid_layout_problem(shape, layout, len(model.gpu_ids))
        if problem is not None:
            raise UsageError(f"{shape.name}: {problem}")
        result = place(
            model, layout, free, shape, spec=spec, zero=args.zero, recompute=args.recompute
        )
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    doc = result.to_document()
    doc["groups"] = {k: v for k, v in doc["groups"].items() if k != "ep" or args.ep > 1}
    return doc


def cmd_serve(args: argparse.Namespace) -> dict[str, Any]:
    topo = _topology(args.file)
    free = _index_list(args.free, "--free") if args.free is not None else None
    try:
        model = build_model(topo, args.gpu_model, cpu_model=args.cpu_model)
        spec = gpu_spec(args.gpu_model, model.hardware.generation.name)
        return serve(
            model,
            PRESETS[args.model],
            args.context,
            args.concurrency,
            args.dtype,
            spec=spec,
            free=free,
        ).to_document()
    except ValueError as exc:
        raise UsageError(str(exc)) from exc


def cmd_analyse(args: argparse.Namespace) -> dict[str, Any]:
    topo = _topology(args.file)
    benchmarks: list[CalibrationInput] = []
    for path in args.benchmark or []:
        try:
            run = parse_text(read_input(path))
        except ParseError as exc:
            raise UsageError(f"{path}: {exc}") from exc
        if not isinstance(run, NcclRun | P2PResult):
            raise UsageError(
                f"{path}: expected nccl-tests or p2pBandwidthLatencyTest output, got a topology"
            )
        benchmarks.append((topo, args.gpu_model or "", run))
    try:
        # As stored: GPU indices in the class's canonical order (see "gpu_numbering").
        return analyse(
            topo, args.gpu_model or "", benchmarks, cpu_model=args.cpu_model or ""
        ).to_document()
    except ValueError as exc:
        raise UsageError(str(exc)) from exc


def cmd_fabric(args: argparse.Namespace) -> dict[str, Any] | str:
    """An ibnetdiscover capture: switches with their tiers, links, hosts with their rails,
    findings and the reader's warnings; with --export, a scheduler's file made from it."""
    text = read_input(args.file)
    try:
        capture = parse_text(text, expected="ibnetdiscover")
    except ParseError as exc:
        raise UsageError(f"{args.file}: {exc}") from exc
    assert isinstance(capture, IbnetCapture)
    doc = fabric_analysis(build_fabric(capture))
    if args.export is None:
        return doc
    nvlink: dict[str, str] = {}
    for spec in args.nvlink or []:
        host, sep, domain = spec.partition("=")
        if not sep or not host or not domain:
            raise UsageError(f"--nvlink: expected HOST=CLUSTER_UUID.CLIQUE_ID, got {spec!r}")
        nvlink[host] = domain
    return render_fabric_export(doc, args.export, nvlink=nvlink)


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line on stderr and exit 2, like every other error."""

    def error(self, message: str) -> NoReturn:
        print(f"{self.prog}: {message}", file=sys.stderr)
        sys.exit(EXIT_BAD_INPUT)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="python -m topoweb.core.cli", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser(
        "parse",
        help="parse topo -m, NCCL topology XML, nccl-tests, p2p or nvbandwidth output into JSON",
    )
    p.add_argument("file", help="path to the output file, or - for standard input")
    p.set_defaults(handler=cmd_parse)

    c = sub.add_parser("cost", help="predict one collective (or a peer copy) on a set of GPUs")
    c.add_argument("file", help="nvidia-smi topo -m output, or - for standard input")
    c.add_argument("--collective", required=True, choices=OPERATIONS)
    c.add_argument("--gpus", required=True, help="comma-separated GPU indices, e.g. 0,1,2,3")
    c.add_argument("--bytes", required=True, type=int, help="message size as nccl-tests counts")
    c.add_argument("--gpu-model", help='NVML GPU name, e.g. "NVIDIA H100 80GB HBM3"')
    _cpu_model_option(c)
    c.add_argument(
        "--bidirectional",
        action="store_true",
        help="copy: both directions at once; algbw is the two rates summed",
    )
    c.add_argument(
        "--p2p",
        choices=("auto", "on", "off"),
        default="auto",
        help="P2P between GPUs: auto infers it per pair (NCCL up to PXB, no PCIe P2P on "
        "GeForce), on/off force it",
    )
    c.add_argument("--p2p-status", help="`nvidia-smi topo -p2p r` output for this server")
    c.add_argument(
        "--nodes",
        type=_positive_int,
        default=1,
        help="servers wired like FILE; GPU indices then run 0..N*g-1, node-major",
    )
    c.add_argument("--nic-gbps", type=_positive_float, help="one NIC's rate in Gb/s")
    c.add_argument(
        "--nvlink-nodes",
        action="store_true",
        help="the nodes share one NVLink domain (NVL72 trays of one fabric clique)",
    )
    c.add_argument(
        "--nics-per-node",
        type=_positive_int,
        help="RDMA NICs per server (default: the NICs in FILE, else one per GPU)",
    )
    c.add_argument(
        "--gpus-per-thread",
        type=_positive_int,
        default=1,
        help="GPUs one host thread drives (nccl-tests -g N); each extra adds a launch",
    )
    c.set_defaults(handler=cmd_cost)

    pl = sub.add_parser(
        "place",
        help="best GPUs and rank-to-GPU mapping for a TP x PP x DP (x EP) job by predicted "
        "step time; without --tp/--pp/--dp, every layout ranked",
    )
    pl.add_argument("file", help="nvidia-smi topo -m output, or - for standard input")
    for flag in ("--tp", "--pp", "--dp"):
        pl.add_argument(flag, type=int)
    pl.add_argument("--ep", type=int, default=1, help="expert parallel (MoE models)")
    pl.add_argument("--free", help="comma-separated free GPU indices (default: all)")
    pl.add_argument("--gpu-model", help="NVML GPU name")
    _cpu_model_option(pl)
    pl.add_argument("--model", choices=sorted(PRESETS), default="llama-7b")
    pl.add_argument("--seq", type=int, help="sequence length (default: the preset's)")
    pl.add_argument("--global-batch", type=int, help="sequences per step")
    pl.add_argument("--micro-batch", type=int, help="sequences per micro-batch")
    pl.add_argument("--zero", type=int, choices=(0, 1, 2, 3), default=1, help="ZeRO stage over DP")
    pl.add_argument(
        "--recompute",
        choices=RECOMPUTE,
        default="selective",
        help="activation recomputation (selective: attention scores, as flash attention)",
    )
    pl.set_defaults(handler=cmd_place)

    sv = sub.add_parser(
        "serve",
        help="GPUs per replica (TP x PP), replicas, memory per GPU, the largest context and "
        "concurrency that fit, time per output token and to the first token",
    )
    sv.add_argument("file", help="nvidia-smi topo -m output, or - for standard input")
    sv.add_argument("--model", choices=sorted(PRESETS), required=True)
    sv.add_argument("--context", type=_positive_int, required=True, help="tokens per sequence")
    sv.add_argument(
        "--concurrency",
        type=_positive_int,
        default=DEFAULT_CONCURRENCY,
        help=f"sequences each replica serves at once (default {DEFAULT_CONCURRENCY})",
    )
    sv.add_argument("--dtype", choices=DTYPES, default="bf16", help="weights' data type")
    sv.add_argument("--gpu-model", help='NVML GPU name, e.g. "NVIDIA H100 80GB HBM3"')
    _cpu_model_option(sv)
    sv.add_argument("--free", help="comma-separated free GPU indices (default: all)")
    sv.set_defaults(handler=cmd_serve)

    a = sub.add_parser("analyse", help="everything the service stores for a topology class")
    a.add_argument("file", help="nvidia-smi topo -m output, or - for standard input")
    a.add_argument("--gpu-model", help="NVML GPU name")
    _cpu_model_option(a)
    a.add_argument(
        "--benchmark",
        action="append",
        help="nccl-tests or p2pBandwidthLatencyTest output measured on this topology "
        "(repeatable), for calibrated figures",
    )
    a.set_defaults(handler=cmd_analyse)

    e = sub.add_parser(
        "export",
        help="write an NCCL_TOPO_FILE, Slurm gres.conf/topology.conf or Kubernetes labels",
    )
    e.add_argument(
        "file",
        nargs="+",
        help="topo -m output or NCCL topology XML (- for standard input); for topology-conf, "
        "HOST=NVLINK_DOMAIN pairs",
    )
    e.add_argument("--format", required=True, choices=[*EXPORT_FORMATS, "topology-conf"])
    e.add_argument("--with", dest="with_file", help="a second source of the same server to merge")
    e.add_argument("--name", help="node name for labels and file names (default: the file's)")
    e.add_argument("--gpu-model", help="GPU name, for gres Type= and the gpu.product label")
    e.set_defaults(handler=cmd_export)

    f = sub.add_parser(
        "fabric",
        help="read an ibnetdiscover capture: switch tiers, links, hosts' rails and findings",
    )
    f.add_argument("file", help="ibnetdiscover output, or - for standard input")
    f.add_argument(
        "--export",
        choices=FABRIC_EXPORTS,
        help="print this file instead of the JSON: Slurm topology.conf (tree), topology.yaml "
        "(tree and block), Kubernetes labels (labels.json, or label.sh: kubectl commands)",
    )
    f.add_argument(
        "--nvlink",
        action="append",
        metavar="HOST=DOMAIN",
        help="a host's multi-node NVLink domain (NVML clusterUuid.cliqueId), repeatable: the "
        "accelerator level of the labels and the blocks of topology.yaml",
    )
    f.set_defaults(handler=cmd_fabric)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    handler: Callable[[argparse.Namespace], dict[str, Any] | str] = args.handler
    try:
        result = handler(args)
    except UsageError as exc:
        print(str(exc).replace("\n", " "), file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        if isinstance(result, str):
            sys.stdout.write(result)
        else:
            json.dump(result, sys.stdout, indent=2)
            sys.stdout.write("\n")
        sys.stdout.flush()
    except BrokenPipeError:
        # The reader went away (`cli parse FILE | head`): no traceback. What is still buffered
        # goes to /dev/null, or the interpreter's own flush at exit fails the same way (the
        # recipe of Python's signal module documentation).
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
