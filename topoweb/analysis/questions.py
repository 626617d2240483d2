"""The synchronous questions the REST API answers from a server's cost model (analysis.selectors
builds and keeps it): collective costs, placement, recommendations, GPU selection over one
server or many, jobs over servers, serving and launch affinity; each answer computed once per
model and question (config.answers)."""

from __future__ import annotations

import dataclasses
import hashlib
import logging
from collections.abc import Callable, Sequence
from typing import Any

from django.http import Http404

from topoweb.analysis import selectors
from topoweb.config import limits
from topoweb.config.answers import answer_once
from topoweb.config.limits import LimitExceeded
from topoweb.core.costs import CostModel, collective_cost, options_from_facts, with_options
from topoweb.core.formats.nvml import NvmlFactsError, read_host, read_nvml
from topoweb.core.ledger import PRESETS, Layout, ModelShape
from topoweb.core.placement import (
    DEFAULT_SHAPE,
    SELECTION_BYTES,
    ServerPool,
    affinity,
    place,
    recommend,
    select_gpus,
    select_job,
)
from topoweb.core.placement.serving import serve
from topoweb.core.steptime import GpuSpec, gpu_spec, valid_layout_problem
from topoweb.fleet.fabric_selectors import server_fabric_places
from topoweb.fleet.models import Server, Snapshot
from topoweb.fleet.selectors import models_note

log = logging.getLogger(__name__)

PLACEMENT_BUDGET_S = 0.3  # the synchronous search's budget for servers beyond the exact limit
SELECT_TOP = 5


def _as_is(doc: dict[str, Any]) -> Any:
    """A kept answer's document served as it is (the default `form` of a query)."""
    return doc


def cost_of(
    server: Server,
    collective: str,
    gpus: Sequence[int],
    nbytes: int,
    algorithm: str | None,
    **options: Any,
) -> dict[str, Any]:
    """core.costs.collective_cost's document; ValueError (a 400) for GPUs the server lacks or
    an algorithm that does not apply. `options`: p2p, nodes, nic_gbps, nics_per_node,
    nvlink_nodes, bidirectional; the server's own facts (P2P status, PCIe, NICs) fill what the
    query leaves out."""
    model = selectors.server_cost_model(server)
    facts = _facts_options(server.latest_snapshot)
    nic = options.get("nic_gbps") or facts.get("nic_gbits")
    model = with_options(
        model,
        p2p=options.get("p2p") or "auto",
        p2p_status=facts.get("p2p_status"),
        nodes=options.get("nodes") or 1,
        nic_gbits=nic,
        nics_per_node=options.get("nics_per_node") or facts.get("nics_per_node"),
        nvlink_nodes=bool(options.get("nvlink_nodes")),
        pcie_gen=facts.get("pcie_gen"),
        pcie_width=facts.get("pcie_width"),
    )
    return collective_cost(
        model,
        collective,
        gpus,
        nbytes,
        algorithm,
        bidirectional=bool(options.get("bidirectional")),
    ).to_document()


def _facts_options(snapshot: Snapshot | None) -> dict[str, Any]:
    if snapshot is None:
        return {}
    host = snapshot.host if isinstance(snapshot.host, dict) else None
    topo_p2p = (host or {}).get("topo_p2p")
    text = topo_p2p.get("read") if isinstance(topo_p2p, dict) else None
    try:
        nvml = read_nvml(snapshot.nvml) if isinstance(snapshot.nvml, dict) else None
        host_facts = read_host(host) if host is not None else None
    except NvmlFactsError:
        nvml, host_facts = None, None
    return options_from_facts(nvml, host_facts, text if isinstance(text, str) else None)


def resolve_shape(
    model: str | dict[str, Any] | None, overrides: dict[str, Any] | None = None
) -> ModelShape | None:
    """A preset name or a full shape, with seq / global_batch / micro_batch overrides; None
    for the default preset without overrides."""
    if model is None and not overrides:
        return None
    if model is None:
        model = "llama-7b"
    if isinstance(model, str):
        if model not in PRESETS:
            raise ValueError(
                f"unknown model preset {model!r}; expected one of {', '.join(sorted(PRESETS))}"
            )
        shape = PRESETS[model]
    else:
        shape = ModelShape(**model)
    return dataclasses.replace(shape, **overrides) if overrides else shape


def server_gpu_spec(server: Server, model: CostModel) -> GpuSpec:
    """Peak and memory of the server's GPUs: its GPU model's catalogue entry, NVML's memory
    total where the collector sent one."""
    snapshot = server.latest_snapshot
    name, memory = (snapshot.gpu_model, snapshot.gpu_memory_bytes) if snapshot else ("", None)
    spec = gpu_spec(name or None, model.hardware.generation.name, memory)
    note = models_note(snapshot)
    return dataclasses.replace(spec, assumed=(note, *spec.assumed)) if note else spec


def check_layout(server: Server, layout: Layout, shape: ModelShape | None) -> None:
    """ValueError naming why the layout cannot run the model on this server (TP not dividing
    the heads, PP the layers, TP or EP not fitting whole in the server), before any search."""
    snapshot = server.latest_snapshot
    gpus = snapshot.gpu_count if snapshot is not None else layout.size
    problem = valid_layout_problem(shape or DEFAULT_SHAPE, layout, gpus)
    if problem is not None:
        raise ValueError(f"{(shape or DEFAULT_SHAPE).name}: {problem}")


def placement_for(
    server: Server,
    layout: Layout,
    free: Sequence[int] | None,
    shape: ModelShape | None,
    zero: int = 1,
    form: Callable[[dict[str, Any]], Any] = _as_is,
) -> Any:
    """The placement document, in the `form` the caller serves it (a module-level function:
    it is part of the cache key), computed once per model and question."""
    key = selectors.model_key(server)

    def compute() -> Any:
        model = selectors.cached_model(key)
        spec = server_gpu_spec(server, model)
        budget = PLACEMENT_BUDGET_S
        placed = place(model, layout, free, shape, budget, spec=spec, zero=zero, pull_levers=True)
        return form(placed.to_document())

    free_key = tuple(free) if free is not None else None
    # It also reads the GPUs' memory and models (server_gpu_spec), not in the model key.
    memory = server.latest_snapshot.gpu_memory_bytes  # type: ignore[union-attr]  # model_key: set
    gpus = (memory, models_note(server.latest_snapshot))
    return answer_once(("placement", key, gpus, layout, free_key, shape, zero, form), compute)


def recommendation_for(
    server: Server, free: Sequence[int] | None, shape: ModelShape | None, zero: int = 1
) -> dict[str, Any]:
    model = selectors.server_cost_model(server)
    doc = recommend(
        model,
        shape,
        free,
        spec=server_gpu_spec(server, model),
        zero=zero,
        time_budget_s=PLACEMENT_BUDGET_S,
    ).to_document()
    return {"hostname": server.hostname, **doc}


def selection(
    k: int,
    wanted: Sequence[tuple[str, Sequence[int] | None]] | None,
    collective: str,
    form: Callable[[dict[str, Any]], Any] = _as_is,
) -> Any:
    """The best k GPUs over the named servers (free masks) or every server with a topology
    (all GPUs free), ranked by predicted bus bandwidth of `collective` at 256 MiB, in the
    `form` the caller serves it; computed once per servers' models and question. The core
    ranks by all_reduce with a fragmentation tie-break; another collective re-ranks its
    shortlist."""
    candidates: list[tuple[Server, Sequence[int] | None]]
    if wanted is None:
        candidates = [(s, None) for s in selectors.servers_for_questions(None)]
    elif len(wanted) == 1:
        candidates = [(selectors.server_for_questions(wanted[0][0]), wanted[0][1])]
    else:
        found = selectors.servers_for_questions([name for name, _ in wanted])
        candidates = [(server, free) for server, (_, free) in zip(found, wanted, strict=True)]
    # Each server's model key, or why it is left out (too large, no topology yet).
    asked: list[tuple[str, selectors.ModelKey | str, Sequence[int] | None]] = []
    for server, free in candidates:
        try:
            if server.latest_snapshot is not None:
                limits.check_select_gpus(server.hostname, server.latest_snapshot.gpu_count)
            asked.append((server.hostname, selectors.model_key(server), free))
        except LimitExceeded as exc:
            asked.append((server.hostname, exc.message, free))
        except Http404 as exc:
            asked.append((server.hostname, str(exc), free))

    def compute() -> Any:
        return form(_select(asked, k, collective))

    question = tuple(
        (name, key, tuple(free) if free is not None else None) for name, key, free in asked
    )
    # Kept under a digest of the question: the answer is small, but a question over a
    # thousand servers is a model key and free set a server, each key holding its server, and
    # a scheduler asks a new one every time. The repr shows everything a key compares.
    digest = hashlib.sha256(repr(question).encode()).hexdigest()
    return answer_once(("selection", k, collective, digest, form), compute)


def _select(
    asked: list[tuple[str, selectors.ModelKey | str, Sequence[int] | None]], k: int, collective: str
) -> dict[str, Any]:
    skipped: list[dict[str, str]] = []
    pools: dict[str, tuple[CostModel, Sequence[int] | None]] = {}
    for hostname, key, free in asked:
        if isinstance(key, str):
            skipped.append({"hostname": hostname, "reason": key})
            continue
        # One server whose model cannot be built (bad stored data) is reported and left out;
        # it never breaks the answer about the others.
        try:
            model = selectors.cached_model(key)
        except Exception as exc:
            log.exception("selection: the cost model of %s failed", hostname)
            skipped.append({"hostname": hostname, "reason": f"its cost model failed: {exc}"})
            continue
        pools[hostname] = (model, free)  # None: all its GPUs
    shortlist = select_gpus(
        pools, k, top=SELECT_TOP * 4 if collective != "all_reduce" else SELECT_TOP
    )
    ranked = []
    for rank, choice in enumerate(shortlist):
        model = pools[choice.server][0]
        doc = choice.to_document()
        doc["hostname"] = doc.pop("server")
        cost = (
            collective_cost(model, collective, choice.gpus, SELECTION_BYTES).to_document()
            if k >= 2
            else None
        )
        doc["cost"] = cost
        ranked.append((-(cost["busbw_gbps"] if cost else 0.0), rank, doc))
    ranked.sort(key=lambda item: (item[0], item[1]))
    return {
        "k": k,
        "collective": collective,
        "bytes": SELECTION_BYTES,
        "selections": [doc for _, _, doc in ranked[:SELECT_TOP]],
        "skipped": skipped,
    }


def rail_group(server: Server) -> str:
    """Servers whose NIC i sits on the same leaf switch, where no fabric capture places the
    server (job_selection reads its leaf group then): the `rail_group` label (or `pod`) where
    the fleet sets one, else servers of one topology class are taken as cabled alike."""
    labels = server.labels if isinstance(server.labels, dict) else {}
    for key in ("rail_group", "pod"):
        if labels.get(key):
            return f"{key}={labels[key]}"
    fingerprint = server.topology_class.fingerprint if server.topology_class else ""
    return f"class={fingerprint[:12]}"


def job_selection(
    wanted: Sequence[tuple[str, Sequence[int] | None]] | None,
    k: int | None,
    layout: Layout | None,
    shape: ModelShape | None,
    *,
    allow_tp_across_servers: bool = False,
) -> dict[str, Any]:
    """Where a job of k GPUs or a TP x PP x DP layout runs over the named servers (free
    masks) or the whole fleet: one server if any can hold it, else the fewest servers of one
    rail group; each answer names servers, GPUs, NICs and the predicted cost."""
    chosen: list[tuple[Server, Sequence[int] | None]]
    if wanted is None:
        chosen = [(s, None) for s in selectors.servers_for_questions(None, rails=True)]
    else:
        found = selectors.servers_for_questions([name for name, _ in wanted], rails=True)
        chosen = [(server, free) for server, (_, free) in zip(found, wanted, strict=True)]
    pools = {}
    places = server_fabric_places({server.hostname for server, _ in chosen})
    for server, free in chosen:
        model = selectors.server_cost_model(server)
        place = places.get(server.hostname)
        pools[server.hostname] = ServerPool(
            model,
            tuple(sorted(model.check_gpus(free if free is not None else sorted(model.gpu_ids)))),
            f"leaf={place.fabric}:{place.leaf_group}" if place else rail_group(server),
            server_gpu_spec(server, model),
            fabric=place,
            nvlink_domain=server.latest_snapshot.nvlink_domain if server.latest_snapshot else "",
        )
    picks = select_job(
        pools, k=k, layout=layout, shape=shape, allow_tp_across_servers=allow_tp_across_servers
    )
    return {
        "k": k if layout is None else layout.size,
        "layout": layout.__dict__ if layout else None,
        "selections": [p.to_document() for p in picks],
        # What each server's answer guessed (GPU model, generation, memory), by server.
        "assumed": [
            f"{name}: {guess}"
            for name, pool in pools.items()
            for guess in (pool.spec.assumed if pool.spec else ())
        ],
    }


def serving_for(
    server: Server,
    shape: ModelShape | None,
    context: int | None,
    concurrency: int,
    dtype: str,
    free: Sequence[int] | None = None,
) -> dict[str, Any]:
    """How the server would serve the model (core.placement.serving), computed once per model
    and question."""
    key = selectors.model_key(server)

    def compute() -> dict[str, Any]:
        model = selectors.cached_model(key)
        spec = server_gpu_spec(server, model)
        return serve(model, shape, context, concurrency, dtype, spec=spec, free=free).to_document()

    memory = server.latest_snapshot.gpu_memory_bytes  # type: ignore[union-attr]  # model_key: set
    gpus = (memory, models_note(server.latest_snapshot))
    free_key = tuple(free) if free is not None else None
    question = ("serving", key, gpus, shape, context, concurrency, dtype, free_key)
    return {"hostname": server.hostname, **answer_once(question, compute)}


def fleet_serving(
    wanted: Sequence[tuple[str, Sequence[int] | None]] | None,
    shape: ModelShape | None,
    context: int | None,
    concurrency: int,
    dtype: str,
) -> dict[str, Any]:
    """Serving over the named servers (free masks) or the whole fleet: each server's answer,
    those holding the most replicas first, then the shortest time per output token."""
    chosen: list[tuple[Server, Sequence[int] | None]]
    if wanted is None:
        chosen = [(s, None) for s in selectors.servers_for_questions(None)]
    else:
        found = selectors.servers_for_questions([name for name, _ in wanted])
        chosen = [(server, free) for server, (_, free) in zip(found, wanted, strict=True)]
    answers = [serving_for(s, shape, context, concurrency, dtype, free) for s, free in chosen]

    def rank(doc: dict[str, Any]) -> tuple[Any, ...]:
        best = doc["recommended"] or {}
        return (
            best == {},
            -best.get("replicas", 0),
            best.get("time_per_output_token_ms", 0.0),
            doc["hostname"],
        )

    answers.sort(key=rank)
    return {"servers": answers}


def affinity_of(server: Server) -> dict[str, Any]:
    model = selectors.server_cost_model(server)
    return {"hostname": server.hostname, **affinity(model).to_document()}
