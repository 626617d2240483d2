"""Jobs over several servers: which servers and GPUs a job of k GPUs or a TP x PP x DP
layout takes when no one server holds it, and what crossing the network costs."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from topoweb.core.costs import CostModel, collective_cost, slowest_group_us, with_options
from topoweb.core.fabric_paths import FabricPlace, NetworkPath, network_path
from topoweb.core.ledger import Layout, ModelShape
from topoweb.core.placement.binding import affinity
from topoweb.core.placement.mapping import place
from topoweb.core.placement.objective import DEFAULT_SHAPE, hierarchy_order, rank_groups
from topoweb.core.placement.selection import SELECTION_BYTES, best_group, select_gpus
from topoweb.core.steptime import (
    GpuSpec,
    MemoryFit,
    Settings,
    first_fit,
    gpu_spec,
    lever_steps,
    step_plan,
    valid_layout_problem,
)

# What a network transfer reaches of the NICs' line rate, and how much less crossing the spine
# between rail groups gets (a 2:1 oversubscribed spine): stated assumptions, used where no
# fabric capture says where the servers sit (with one, the path's own link rate and its
# leaves' oversubscription replace them: core.fabric_paths.NetworkPath).
NET_EFFICIENCY = 0.92
SPINE_OVERSUBSCRIPTION = 2.0


@dataclass(frozen=True)
class ServerPool:
    """One server a job may use: its cost model, free GPUs and rail group (the servers whose
    NIC i sits on the same leaf switch i: its leaf group in a fabric capture, else the
    topology class), and its place in the fabric when a capture has it."""

    model: CostModel
    free: tuple[int, ...]
    rail_group: str
    spec: GpuSpec | None = None
    fabric: FabricPlace | None = None
    # The multi-node NVLink domain (NVML's clusterUuid/cliqueId: core.formats.nvml
    # .nvlink_domain) the server's GPUs share with other servers; "" for none.
    nvlink_domain: str = ""


@dataclass(frozen=True)
class ServerPart:
    server: str
    gpus: tuple[int, ...]
    nics: tuple[str, ...]  # nearest NICs of those GPUs: what the job's traffic leaves through

    def to_document(self) -> dict[str, Any]:
        return {"server": self.server, "gpus": list(self.gpus), "nics": list(self.nics)}


@dataclass(frozen=True)
class JobSelection:
    parts: tuple[ServerPart, ...]
    same_rails: bool
    predicted_us: float  # the all_reduce of `nbytes` (k GPUs) or the step time (a layout)
    what: str  # what predicted_us is
    layout: Layout | None
    inter_node_us: float  # the part of it spent between servers
    fits: bool
    reason: str
    # What crosses the network per step: per dimension, the groups that span servers, the
    # bytes each moves between servers per step, and the time that takes.
    network: tuple[dict[str, Any], ...] = ()
    # A layout's memory levers pulled (in practitioners' order) and its memory per GPU.
    levers: tuple[str, ...] = ()
    memory: MemoryFit | None = None

    def to_document(self) -> dict[str, Any]:
        return {
            "servers": [p.to_document() for p in self.parts],
            "server_count": len(self.parts),
            "same_rails": self.same_rails,
            "predicted_us": round(self.predicted_us, 3),
            "predicted": self.what,
            "inter_node_us": round(self.inter_node_us, 3),
            "layout": self.layout.__dict__ if self.layout else None,
            "fits": self.fits,
            "reason": self.reason,
            "network": list(self.network),
            "levers": list(self.levers),
            "memory": self.memory.to_document() if self.memory else None,
        }


def _nics_of(model: CostModel, gpus: Sequence[int]) -> tuple[str, ...]:
    near = {g.gpu: g.nearest_nics for g in affinity(model).gpus}
    return tuple(sorted({n for g in gpus for n in near.get(g, ())}))


def inter_node_all_reduce_us(
    parts: Sequence[tuple[CostModel, int, int]],
    nbytes: float,
    same_rails: bool,
    path: NetworkPath | None = None,
) -> float:
    """All-reduce of `nbytes` between servers after each reduced it inside (hierarchical, as
    NCCL does over nodes): a ring over the servers, each carrying its share over the NICs of
    the GPUs it uses. `parts`: (model, GPUs used, NICs used) per server. With the fabric's
    `path`, its link rate and (through the spines) its leaves' oversubscription; else the NIC
    line rate and SPINE_OVERSUBSCRIPTION across rail groups."""
    n = len(parts)
    if n < 2:
        return 0.0
    if path is not None:  # the HCAs each server has on the fabric, at the path's rate
        per_node = min(max(1, min(nics, path.nics)) for _m, _g, nics in parts) * (
            path.nic_gbps / 8 * NET_EFFICIENCY
        )
    else:
        per_node = min(max(1, nics) * m.hardware.nic_gbps * NET_EFFICIENCY for m, _g, nics in parts)
    if path is not None:
        per_node /= path.oversubscription
    elif not same_rails:
        per_node /= SPINE_OVERSUBSCRIPTION
    alpha = dict(parts[0][0].hardware.latency_us).get("network", 3.0)
    return 2 * (n - 1) * alpha + 2 * (n - 1) / n * nbytes / (per_node * 1e3)


def _joined_model(
    servers: Mapping[str, ServerPool],
    names: Sequence[str],
    same_rails: bool,
    path: NetworkPath | None = None,
) -> tuple[CostModel, dict[tuple[str, int], int]] | None:
    """One cost model of the servers `names` over the network (costs.with_options's nodes) and
    where each (server, GPU) sits in it: node k holds the k-th server's GPUs. None unless every
    server is numbered and wired like the first (one model serves them all). Through the
    spines, each NIC keeps what its leaves' oversubscription leaves it: the fabric path's,
    else the assumed spine's between rail groups."""
    alike = _wired_alike(servers, names)
    if alike is None:
        return None
    first, at = alike
    if path is not None:
        rate: float | None = path.nic_gbps / path.oversubscription
    elif not same_rails:
        rate = first.hardware.nic_gbps * 8 / SPINE_OVERSUBSCRIPTION
    else:
        rate = None
    try:
        job = with_options(
            first, nodes=len(names), nic_gbits=rate, nics_per_node=path.nics if path else None
        )
    except ValueError:
        return None
    return job, at


def _wired_alike(
    servers: Mapping[str, ServerPool], names: Sequence[str]
) -> tuple[CostModel, dict[tuple[str, int], int]] | None:
    """The first server's model and where each (server, GPU) sits once the servers' GPUs are
    numbered as one job (node k holds the k-th server's); None unless every server is numbered
    and wired like the first (one model serves them all)."""
    first = servers[names[0]].model
    if any(servers[n].model.topo != first.topo for n in names[1:]):
        return None
    local = sorted(first.gpu_ids)
    return first, {
        (n, x): k * len(local) + i for k, n in enumerate(names) for i, x in enumerate(local)
    }


def select_job(
    servers: Mapping[str, ServerPool],
    k: int | None = None,
    layout: Layout | None = None,
    shape: ModelShape | None = None,
    nbytes: int = SELECTION_BYTES,
    top: int = 5,
    *,
    allow_tp_across_servers: bool = False,
) -> list[JobSelection]:
    """Where a job of k GPUs (or a TP x PP x DP layout) should run: on one server when any
    has enough free GPUs (best first, see `select_gpus` and `place`); otherwise over the
    fewest servers, those of one rail group (leaf group) first, then of one spine group, each
    part the best-connected of that server's free GPUs. A layout keeps each TP (and TP x EP)
    group inside a server (unless the caller allows TP across servers: its all-reduces then
    cross the network every layer) or inside one multi-node NVLink domain (servers of one
    `nvlink_domain`, tried first: their all-reduces stay on NVLink); its pipeline stages and
    DP replicas span servers (`_layout_over_servers`)."""
    if (k is None) == (layout is None):
        raise ValueError("ask for k GPUs or for a TP x PP x DP layout, not both")
    size = layout.size if layout else int(k or 0)
    if size < 1:
        raise ValueError("k must be at least 1")
    shape = shape or DEFAULT_SHAPE
    if layout is not None:
        # Heads, KV heads, layers and experts; where the groups sit is settled below.
        problem = valid_layout_problem(shape, layout, layout.size)
        if problem is not None:
            raise ValueError(f"{shape.name}: {problem}")
    single = [name for name, pool in servers.items() if len(pool.free) >= size]
    if single:
        return sorted(
            (_one_server(name, servers[name], size, layout, shape, nbytes) for name in single),
            key=lambda j: (not j.fits, j.predicted_us, j.parts[0].server),
        )[:top]
    # TP and EP groups stay inside a server; pipeline stages and DP replicas may span them.
    unit = layout.tp * layout.ep if layout and not allow_tp_across_servers else 1
    groups: dict[str, list[str]] = {}
    spines: dict[str, list[str]] = {}
    domains: dict[str, list[str]] = {}
    for name, pool in servers.items():
        if pool.nvlink_domain:
            domains.setdefault(pool.nvlink_domain, []).append(name)
        groups.setdefault(pool.rail_group, []).append(name)
        if pool.fabric is not None and pool.fabric.spine_group:
            spines.setdefault(f"{pool.fabric.fabric}:{pool.fabric.spine_group}", []).append(name)
    found = []
    # One NVLink domain (where TP and EP may span its servers), then one rail group (leaf
    # group), then one spine group, then any servers.
    plans = [
        *((names, 1) for names in domains.values() if len(names) > 1),
        *((names, unit) for names in [*groups.values(), *spines.values(), list(servers)]),
    ]
    seen: set[tuple[str, ...]] = set()
    for names, plan_unit in plans:
        picked = _fewest_servers(servers, names, size, plan_unit)
        if picked is None or tuple(sorted(picked)) in seen:
            continue
        seen.add(tuple(sorted(picked)))
        same_rails = len({servers[n].rail_group for n in picked}) == 1
        if layout is not None:
            found.append(
                _layout_over_servers(servers, picked, layout, shape, same_rails, plan_unit)
            )
        else:
            found.append(_over_servers(servers, picked, size, nbytes, same_rails))
    if not found:
        total = sum(len(p.free) // unit * unit for p in servers.values())
        raise ValueError(
            f"the servers have {total} usable free GPUs"
            + (f" in whole TP x EP blocks of {unit}" if unit > 1 else "")
            + f"; the job needs {size}"
        )
    found.sort(
        key=lambda j: (
            not _one_domain(servers, [p.server for p in j.parts]),
            len(j.parts),
            not j.same_rails,
            _path_rank(servers, j.parts),
            not j.fits,
            j.predicted_us,
        )
    )
    return found[:top]


_LEVELS = {"leaf": 0, "spine": 1, "core": 2}


def _one_domain(servers: Mapping[str, ServerPool], names: Sequence[str]) -> str:
    """The multi-node NVLink domain all of `names` share, "" when they share none."""
    found = {servers[n].nvlink_domain for n in names}
    return found.pop() if len(found) == 1 else ""


def _nvlink_model(
    servers: Mapping[str, ServerPool], names: Sequence[str]
) -> tuple[CostModel, dict[tuple[str, int], int]] | None:
    """The cost model of servers of one NVLink domain as one machine (their GPUs joined over
    NVLink: costs.with_options's nvlink_nodes) and where each (server, GPU) sits in it; None
    when they share no domain or are not all wired like the first (one model serves them)."""
    alike = _wired_alike(servers, names) if _one_domain(servers, names) else None
    if alike is None:
        return None
    first, at = alike
    try:
        joined = with_options(first, nodes=len(names), nvlink_nodes=True)
    except ValueError:  # GPUs without NVLink cannot share a domain
        return None
    return joined, at


def _path_rank(servers: Mapping[str, ServerPool], parts: Sequence[ServerPart]) -> int:
    """Leaf-local before one spine group before the core; servers outside any fabric last."""
    path = network_path(servers[p.server].fabric for p in parts)
    return _LEVELS.get(path.level, 3) if path else 3


def _one_server(
    name: str,
    pool: ServerPool,
    size: int,
    layout: Layout | None,
    shape: ModelShape,
    nbytes: int,
) -> JobSelection:
    model = pool.model
    if layout is not None:
        placed = place(model, layout, pool.free, shape, spec=pool.spec, pull_levers=True)
        part = ServerPart(name, placed.gpus, _nics_of(model, placed.gpus))
        fits = placed.memory.fits
        levers = f" ({', '.join(placed.levers)})" if placed.levers else ""
        return JobSelection(
            (part,), True, placed.step_us, "step time", layout, 0.0, fits,
            f"one server; {placed.choice or 'all its free GPUs'}{levers}",
            (), placed.levers, placed.memory,
        )  # fmt: skip
    best = select_gpus({name: (model, pool.free)}, size, top=1)[0]
    us = collective_cost(model, "all_reduce", best.gpus, nbytes).time_us if size >= 2 else 0.0
    part = ServerPart(name, best.gpus, _nics_of(model, best.gpus))
    return JobSelection(
        (part,), True, us, f"all_reduce of {nbytes} bytes", None, 0.0, True,
        "one server; " + best.reason,
    )  # fmt: skip


def _fewest_servers(
    servers: Mapping[str, ServerPool], names: Sequence[str], size: int, unit: int
) -> list[str] | None:
    """Servers with the most usable free GPUs first, until the job fits."""
    ranked = sorted(names, key=lambda n: (-(len(servers[n].free) // unit), n))
    picked, have = [], 0
    for n in ranked:
        usable = len(servers[n].free) // unit * unit
        if not usable:
            continue
        picked.append(n)
        have += usable
        if have >= size:
            return picked
    return None


def _over_servers(
    servers: Mapping[str, ServerPool],
    picked: Sequence[str],
    size: int,
    nbytes: int,
    same_rails: bool,
) -> JobSelection:
    """A job of k GPUs over several servers: each part the best-connected of that server's
    free GPUs, the all_reduce of `nbytes` reduced inside each, then between them."""
    left = size
    counts = []
    for n in picked:
        take = min(left, len(servers[n].free))
        counts.append(take)
        left -= take
    parts, inter_parts = [], []
    local_us = 0.0
    for n, take in zip(picked, counts, strict=True):
        model, pool = servers[n].model, servers[n]
        gpus = best_group(model, take, pool.free) if take < len(pool.free) else pool.free
        if take >= 2:
            local = collective_cost(model, "reduce_scatter", gpus, nbytes).time_us
            local_us = max(local_us, 2 * local)  # reduce-scatter, then all-gather
        nics = _nics_of(model, gpus)
        parts.append(ServerPart(n, tuple(gpus), nics))
        inter_parts.append((model, len(gpus), len(nics) or len(gpus)))
    path = network_path(servers[n].fabric for n in picked)
    rails = _rails_text(same_rails, path)
    names = [p.server for p in parts]
    nvlink = _nvlink_model(servers, names)
    # Servers wired alike: the cost model prices the job, over their shared NVLink domain, on
    # one leaf or through the spine (so crossing it never comes out faster); a ring over the
    # NICs only for servers wired differently, which no one model describes.
    joined = nvlink or _joined_model(servers, names, same_rails, path)
    total = None
    if joined is not None:
        model, at = joined
        members = [at[(p.server, g)] for p in parts for g in p.gpus]
        try:
            total = collective_cost(model, "all_reduce", members, nbytes).time_us
        except ValueError:  # more GPUs than the model answers for: the ring below
            total, nvlink = None, None
    if nvlink is not None and total is not None:
        inter, how = 0.0, "over their shared NVLink domain, no network"
        rails = f"one NVLink domain ({_one_domain(servers, names)})"
    elif total is not None:
        # What spanning servers adds: beyond the same all_reduce inside the largest part.
        largest = max(parts, key=lambda p: len(p.gpus))
        alone = (
            collective_cost(servers[largest.server].model, "all_reduce", largest.gpus, nbytes)
            if len(largest.gpus) >= 2
            else None
        )
        inter = max(0.0, total - (alone.time_us if alone else 0.0))
        how = "priced by the multi-node cost model"
    else:
        inter = inter_node_all_reduce_us(inter_parts, nbytes / max(counts), same_rails, path)
        total, how = local_us + inter, "inside each server, then a ring over their NICs"
    return JobSelection(
        tuple(parts), same_rails, total, f"all_reduce of {nbytes} bytes",
        None, inter, True,
        f"no server has {size} free GPUs: {len(parts)} servers on {rails}; {how}",
    )  # fmt: skip


def _rails_text(same_rails: bool, path: NetworkPath | None) -> str:
    if path is not None:
        return path.describe()
    return "the same rail group" if same_rails else "different rail groups (through the spine)"


def stage_order(servers: Mapping[str, ServerPool], picked: Sequence[str]) -> list[str]:
    """The order in which a job's pipeline stages (and then DP replicas) are laid over the
    picked servers: consecutive stages on neighbours in it, so each pipeline hop between
    servers crosses the network once: servers of one spine group, then of one rail (leaf)
    group, next to each other; then the most free GPUs, then the name."""

    def key(n: str) -> tuple[str, str, int, str]:
        place = servers[n].fabric
        spine = f"{place.fabric}:{place.spine_group}" if place and place.spine_group else ""
        return (spine, servers[n].rail_group, -len(servers[n].free), n)

    return sorted(picked, key=key)


def _network_hop_us(
    model: CostModel,
    gpu: int,
    nbytes: float,
    sharing: int,
    same_rails: bool,
    path: NetworkPath | None = None,
) -> float:
    """One send of `nbytes` from `gpu` to a GPU of another server through its nearest NIC,
    which `sharing` such sends use at once (at the fabric path's rate when there is one)."""
    nic = path.nic_gbps / 8 if path else model.hardware.nic_gbps  # GB/s, as the hardware's
    rate = nic * NET_EFFICIENCY / max(1, sharing)
    if path is not None:
        rate /= path.oversubscription
    elif not same_rails:
        rate /= SPINE_OVERSUBSCRIPTION
    alpha = dict(model.hardware.latency_us).get("network", 3.0)
    return alpha + nbytes / (rate * 1e3)


def _layout_over_servers(
    servers: Mapping[str, ServerPool],
    picked: Sequence[str],
    layout: Layout,
    shape: ModelShape,
    same_rails: bool,
    unit: int,
) -> JobSelection:
    """A TP x PP x DP (x EP) job over several servers. Ranks in Megatron order (TP fastest,
    then DP, then PP) fill blocks of TP x EP GPUs, each block the neighbours of one server's
    free GPUs in its hierarchy order, servers taken in `stage_order`: TP and EP groups never
    leave a server, a stage's DP replicas share servers where they fit, and pipeline hops or
    DP groups between servers go through each GPU's nearest NIC. Each collective is priced
    inside a server by its cost model and between servers by NIC rate (NET_EFFICIENCY, the
    spine's SPINE_OVERSUBSCRIPTION across rail groups); the step time follows
    steptime.StepPlan."""
    path = network_path(servers[n].fabric for n in picked)
    nvlink = _nvlink_model(servers, picked)  # one NVLink domain: no network between them
    where: list[tuple[str, int]] = []  # rank -> (server, GPU)
    for name in stage_order(servers, picked):
        pool = servers[name]
        order = hierarchy_order(pool.model, list(pool.free))
        usable = len(order) // unit * unit
        where.extend((name, g) for g in order[:usable])
        if len(where) >= layout.size:
            break
    where = where[: layout.size]
    spec = _weakest_spec([servers[n] for n in dict.fromkeys(n for n, _g in where)])
    settings = _levers_for(shape, layout, spec)
    plan = step_plan(settings.shape, layout, spec, recompute=settings.recompute, zero=settings.zero)
    groups = rank_groups(tuple(range(layout.size)), layout)
    # How many crossing sends each NIC carries at once, per dimension (NIC affinity per GPU).
    nic_of = {
        (name, g): (_nics_of(servers[name].model, [g]) or (f"GPU{g}",))[0] for name, g in where
    }
    each: dict[tuple[str, str], float] = {}
    network: list[dict[str, Any]] = []
    inter_us = 0.0
    for dim, coll, nbytes, count in plan.collectives:
        per_step = count * (1 if dim == "dp" else plan.micro_batches)
        slowest, crossing, moved, net_us = 0.0, 0, 0.0, 0.0
        chains = dim == "pp"
        hops = [
            (grp[i], grp[i + 1]) if chains else grp
            for grp in groups.get(dim, [])
            if len(grp) > 1
            for i in range(len(grp) - 1 if chains else 1)
        ]
        if not hops:
            continue
        crossing_hops = [h for h in hops if len({where[r][0] for r in h}) > 1]
        load: dict[str, int] = {}
        for h in crossing_hops:
            for r in h[:1] if chains else h:
                load[nic_of[where[r]]] = load.get(nic_of[where[r]], 0) + 1
        if chains:
            for grp in groups[dim]:
                t = 0.0
                for a, b in zip(grp, grp[1:], strict=False):
                    (sa, ga), (sb, gb) = where[a], where[b]
                    if sa == sb:
                        hop = slowest_group_us(servers[sa].model, coll, [(ga, gb)], nbytes, True)
                    elif nvlink is not None:
                        joined, at = nvlink
                        pair = [(at[(sa, ga)], at[(sb, gb)])]
                        hop = slowest_group_us(joined, coll, pair, nbytes, True)
                    else:
                        # Each TP rank sends its 1/TP of the activation (Megatron scatters
                        # pipeline tensors over the TP group and gathers them after the hop).
                        share = nbytes / layout.tp
                        hop = _network_hop_us(
                            servers[sa].model, ga, share, load[nic_of[(sa, ga)]], same_rails, path
                        )
                        crossing += 1
                        moved += share * per_step
                        net_us += hop * per_step
                    t = max(t, hop)
                slowest = max(slowest, t)
        else:
            for grp in groups[dim]:
                if len(grp) < 2:
                    continue
                by_server: dict[str, list[int]] = {}
                for r in grp:
                    by_server.setdefault(where[r][0], []).append(where[r][1])
                if len(by_server) == 1:
                    ((name, gpus),) = by_server.items()
                    t = slowest_group_us(servers[name].model, coll, [tuple(gpus)], nbytes)
                elif nvlink is not None:  # over the domain's NVLink, as inside one server
                    joined, at = nvlink
                    members = tuple(at[where[r]] for r in grp)
                    t = slowest_group_us(joined, coll, [members], nbytes)
                else:
                    # Reduced inside each server, then a ring over the servers' NICs.
                    local = max(
                        slowest_group_us(servers[n].model, coll, [tuple(g)], nbytes)
                        if len(g) > 1
                        else 0.0
                        for n, g in by_server.items()
                    )
                    ring = [
                        (servers[n].model, len(g), len({nic_of[(n, x)] for x in g}))
                        for n, g in by_server.items()
                    ]
                    share = nbytes / max(len(g) for g in by_server.values())
                    net = inter_node_all_reduce_us(ring, share, same_rails, path)
                    t = local + net
                    crossing += 1
                    n_srv = len(by_server)
                    moved += 2 * (n_srv - 1) / n_srv * nbytes * per_step
                    net_us += net * per_step
                slowest = max(slowest, t)
        each[(dim, coll)] = slowest
        if crossing:
            inter_us += net_us / max(1, crossing)
            network.append(
                {
                    "dimension": dim,
                    "collective": coll,
                    "groups_crossing": crossing,
                    "bytes_per_step": int(moved),
                    "network_us_per_step": round(net_us / max(1, crossing), 1),
                }
            )
    step = plan.step(each)
    memory = settings.fit(layout, spec)
    fits = memory.fits
    levers = f" ({', '.join(settings.levers)})" if settings.levers and fits else ""
    parts = []
    for name in dict.fromkeys(n for n, _g in where):
        taken = tuple(sorted(g for n, g in where if n == name))
        parts.append(ServerPart(name, taken, _nics_of(servers[name].model, taken)))
    rails = _rails_text(same_rails, path)
    spans = [d["dimension"].upper() for d in network] or ["nothing"]
    return JobSelection(
        tuple(parts), same_rails, step.total_us, "step time", layout, inter_us, fits,
        f"no server has {layout.size} free GPUs: "
        + (f"TP{' x EP' if layout.ep > 1 else ''} inside each server, "
           if unit == layout.tp * layout.ep
           else "TP inside one NVLink domain, "
           if _one_domain(servers, picked)
           else "TP across servers (allowed by the caller), ")
        + f"{' and '.join(spans)} between {len(parts)} servers on {rails}{levers}",
        tuple(network), settings.levers if fits else (), memory,
    )  # fmt: skip


def _weakest_spec(pools: Sequence[ServerPool]) -> GpuSpec:
    """The GPU a job over these servers is judged by: the least usable memory (every rank
    holds the same share) and the slowest peak (a synchronous step waits for the slowest)."""
    specs = [p.spec or gpu_spec(None, p.model.hardware.generation.name) for p in pools]
    least = min(specs, key=lambda s: s.memory_bytes * (1 - s.reserve))
    return replace(least, peak_tflops=min(s.peak_tflops for s in specs))


def _levers_for(shape: ModelShape, layout: Layout, spec: GpuSpec) -> Settings:
    """The memory levers practitioners pull, in order, until the layout fits (the settings as
    asked when none makes it fit)."""
    steps = lever_steps(shape)
    return (first_fit(steps, [layout], spec) or (steps[0], []))[0]
