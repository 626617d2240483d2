"""Page-shaped reads: everything the server page and the compare page show, in one answer each,
decided on the server so that the pages' JavaScript only draws. The server page is its stored
assessment (health.assessment: graph, matrix, device details, curves, findings, computed by
the worker) with the cheap reads beside it (summary, runs, history); the compare table's facts
and verdicts are decided here from stored analyses."""

from __future__ import annotations

from typing import Any

import orjson
from django.http import HttpResponse
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from topoweb.analysis import questions
from topoweb.analysis import selectors as analysis_selectors
from topoweb.analysis.models import Analysis
from topoweb.analysis.serializers import FindingGroupSerializer, FindingSerializer
from topoweb.config.api import READ_ERRORS
from topoweb.config.limits import LimitExceeded
from topoweb.core.gpunames import gpu_family, models_text
from topoweb.core.health.groups import group_documents
from topoweb.core.ledger import Layout
from topoweb.fleet import selectors, work
from topoweb.fleet.models import Benchmark, Server, Snapshot
from topoweb.health import documents
from topoweb.health import selectors as health_selectors
from topoweb.health import services as health_services
from topoweb.health.assessment import step_us

BENCHMARK_ROWS = 12
MiB = 1 << 20
COMPARE_SIZES = (MiB, 64 * MiB, 1024 * MiB)


def _analysis(server: Server) -> Analysis | None:
    return analysis_selectors.current_analysis(server.topology_class_id)


def stored_result(server: Server) -> dict[str, Any]:
    """The class's finished analysis result in this server's GPU numbering ({} if none)."""
    analysis = _analysis(server)
    # A finished result stays served while its class is analysed again (new runs).
    if analysis is None or not analysis.result:
        return {}
    # Stored in the class's canonical GPU order; served in this server's own numbering.
    result = analysis_selectors.analysis_result_for(server, analysis.result)
    return result or {}


def _benchmark_rows(server: Server) -> list[dict[str, Any]]:
    rows = []
    for b in Benchmark.objects.filter(server=server).order_by("-captured_at", "-id")[
        :BENCHMARK_ROWS
    ]:
        doc = b.document or {}
        rows.append(
            {
                "id": b.pk,
                "captured_at": b.captured_at,
                "kind": b.kind,
                "collective": b.collective or doc.get("collective") or None,
                "avg_busbw_gbps": b.avg_busbw_gbps,
                "failed": bool(doc.get("errors")),
            }
        )
    return rows


def _history(server: Server) -> list[dict[str, Any]]:
    snaps = list(selectors.snapshot_history(server)[:50])
    rows = []
    for i, s in enumerate(snaps):
        older = snaps[i + 1] if i + 1 < len(snaps) else None
        changes: list[str] | None = None
        if older is not None:
            changes = []
            if older.gpu_count != s.gpu_count:
                changes.append(f"GPUs {older.gpu_count}→{s.gpu_count}")
            if older.nic_count != s.nic_count:
                changes.append(f"NICs {older.nic_count}→{s.nic_count}")
            if (older.nvlink_summary or "") != (s.nvlink_summary or ""):
                changes.append(
                    f"NVLink {older.nvlink_summary or 'none'}→{s.nvlink_summary or 'none'}"
                )
            if older.topology_class_id != s.topology_class_id:
                changes.append("wiring changed")
        rows.append(
            {
                "id": s.pk,
                "captured_at": s.captured_at,
                "source": s.source,
                "gpu_count": s.gpu_count,
                "nic_count": s.nic_count,
                "nvlink_summary": s.nvlink_summary or "none",
                "changes": changes,
            }
        )
    return rows


def server_page(server: Server) -> bytes:
    """The whole server page in one JSON answer: the server's stored assessment (its text as
    stored, not decoded) joined with the few cheap reads that change between assessments (the
    summary, counts, runs, history)."""
    document, stale, checked = health_selectors.assessment(server)
    # The server's row as the list serves it (its stored summary: one read path per document).
    (summary,) = orjson.loads(
        documents.summary_texts(documents.summaries(Server.objects.filter(pk=server.pk)))
    )
    live = {
        "server": {
            **summary,
            "snapshot_count": server.snapshots.count(),
            "benchmark_count": server.benchmarks.count(),
        },
        "stale": stale,
        "findings_checked": checked,
        "benchmarks": _benchmark_rows(server),
        "history": _history(server),
        "presets": analysis_selectors.model_presets(),
        "gave_up": {
            kind: reason
            for kind, key in ((health_services.HEALTH, server.pk),)
            for reason in work.given_up(kind, [key]).values()
        },
    }
    # Two JSON objects joined: the live one's closing brace and the stored one's opening go.
    head = orjson.dumps(live, default=str, option=orjson.OPT_UTC_Z)
    return head[:-1] + b"," + document.encode()[1:]


class ServerPageSerializer(serializers.Serializer):
    server = serializers.DictField(help_text="The server's summary (as in the server list)")
    stale = serializers.BooleanField(
        help_text="The stored assessment is older than one of its inputs; a newer one is queued"
    )
    analysis = serializers.DictField(
        allow_null=True,
        help_text="The class analysis: status, error, finished_at, cost_model_version, current, "
        "calibrated_by (the benchmark ids that calibrated it)",
    )
    expectations = serializers.DictField(
        allow_null=True,
        help_text="Each GPU pair's one expectation: basis, thresholds, gpus, records (gbps, "
        "floor_gbps, source, host_staged) and grid (record number per ordered pair), busbw_gbps",
    )
    findings = FindingSerializer(many=True)
    groups = FindingGroupSerializer(
        many=True, help_text="The findings grouped by cause, most severe first, with their pairs"
    )
    findings_checked = serializers.BooleanField(
        help_text="The health checks have judged the current snapshot: only then does an "
        "empty `findings` mean nothing was found"
    )
    reader_warnings = serializers.ListField(
        child=serializers.CharField(), help_text="What the topo -m reader guessed or repaired"
    )
    graph = serializers.DictField(allow_null=True, help_text="As GET servers/{hostname}/graph/")
    matrix = serializers.DictField(
        allow_null=True,
        help_text="devices, labels, classes, and per measured direction the measured GB/s, "
        "expected GB/s, ratio and grade of every pair",
    )
    devices = serializers.DictField(
        allow_null=True, help_text="Per device id: rows (name, value), warning, hint"
    )
    affinity = serializers.DictField(allow_null=True, help_text="As GET .../affinity")
    benchmarks = serializers.ListField(child=serializers.DictField())
    plot = serializers.DictField(help_text="series (label, kind, dashed, points) and a note")
    history = serializers.ListField(
        child=serializers.DictField(), help_text="Snapshots, newest first, with what changed"
    )
    best_layouts = serializers.ListField(child=serializers.DictField())
    recommendations = serializers.DictField(
        help_text="Per preset: the recommended layout or why none fits"
    )
    step_assumptions = serializers.CharField()
    presets = serializers.ListField(child=serializers.DictField())
    left_out = serializers.DictField(
        child=serializers.CharField(),
        help_text="Parts of the page not given for this server (e.g. `affinity` before the "
        "class analysis, `assessment` before the first one), each with the reason; empty when "
        "the page is whole",
    )
    gave_up = serializers.DictField(
        child=serializers.CharField(),
        help_text="Worker tasks for this server that had their tries and were given up "
        "(`health`: its evaluation), each with the reason; asked again by its next report",
    )


class ServerPageApi(APIView):
    """Everything the server page shows, in one answer."""

    @extend_schema(
        operation_id="servers_page_retrieve",
        responses={200: ServerPageSerializer, **READ_ERRORS},
    )
    def get(self, request: Request, hostname: str) -> HttpResponse:
        body = server_page(selectors.server_by_hostname(hostname))
        return HttpResponse(body, content_type="application/json")


# --- compare --------------------------------------------------------------------------------


def _resolve(name: str, skus: set[str]) -> dict[str, Any]:
    """A SKU stands for its first member server with a finished analysis (else its first
    member); any other name is a hostname."""
    if name in skus:
        members = list(selectors.sku_members(name))
        chosen = next((m for m in members if stored_result(m)), members[0] if members else None)
        return {"kind": "SKU", "name": name, "server": chosen, "count": len(members)}
    return {"kind": "server", "name": name, "server": selectors.server_by_hostname(name)}


def _busbw_at(costs: dict[str, Any] | None, gpus: int | None, nbytes: int) -> float | None:
    table = ((costs or {}).get("table") or {}).get("all_reduce")
    columns = (costs or {}).get("table_columns")
    if not table or not columns:
        return None
    col = {c: i for i, c in enumerate(columns)}
    for row in table:
        if row[col["group_size"]] == gpus and row[col["bytes"]] == nbytes:
            value: float = row[col["busbw_gbps"]]
            return value
    return None


def _nvlinks_per_gpu(graph: dict[str, Any] | None) -> int:
    if graph is None:
        return 0
    per: dict[str, int] = {}
    for e in graph["elements"]:
        d = e["data"]
        if e["group"] == "edges" and d.get("nvlinks"):
            for end in (d["source"], d["target"]):
                if end.startswith("GPU"):
                    per[end] = per.get(end, 0) + d["nvlinks"]
    return max(per.values(), default=0)


def _fmt(v: float, digits: int = 1) -> str:
    return f"{v:,.{digits}f}".rstrip("0").rstrip(".") if digits else f"{v:,.0f}"


def _fmt_time(us: float) -> str:
    if us >= 1e6:
        return f"{_fmt(us / 1e6, 2)} s"
    if us >= 1e3:
        return f"{_fmt(us / 1e3, 2)} ms"
    return f"{_fmt(us, 1)} µs"


def _gpu_model_text(snap: Snapshot | None, model: str | None, guess: str) -> dict[str, Any]:
    """The GPU model row of one side: the part's one name, as the fleet list gives it (each
    model with its count where the GPUs differ), the names as reported in `detail`."""
    mixed = [
        (str(n), int(c)) for n, c in ((snap.gpu_models if snap else None) or {}).get("models", ())
    ]
    if mixed:
        return {"text": models_text(mixed, family=True), "detail": models_text(mixed)}
    if model:
        return {"text": gpu_family(model), "detail": model}
    return {"text": f"not reported ({guess}, assumed)" if guess else None}


def _facts(side: dict[str, Any]) -> list[dict[str, Any]]:
    """The table's rows for one side: label, text, and a value with the direction that is
    better (+1 higher, -1 lower) where a comparison makes sense."""
    server: Server | None = side["server"]
    result = stored_result(server) if server is not None else {}
    summary = result.get("summary") or {}
    hw = result.get("hardware") or {}
    snap = server.latest_snapshot if server is not None else None
    gpus = summary.get("gpu_count", snap.gpu_count if snap else None)
    nics = summary.get("nic_count", snap.nic_count if snap else None)
    links = side["nvlinks"]
    per_gpu = links * hw.get("nvlink_per_link_gbps_per_direction", 0) if links and hw else 0
    if not hw:
        nvlink_text = None
    elif per_gpu:
        line = links * (hw.get("nvlink_line_rate_per_link_gbps_per_direction") or 0)
        nvlink_text = (
            f"{_fmt(per_gpu, 0)} GB/s effective, {_fmt(line, 0)} line rate "
            f"({links} × {hw.get('nvlink') or 'NVLink'} link{'' if links == 1 else 's'})"
        )
    else:
        nvlink_text = "none (PCIe only)"
    nearest: dict[str, int] = {}
    for cls in (summary.get("nearest_nic_class") or {}).values():
        if cls:
            nearest[cls] = nearest.get(cls, 0) + 1
    nic_classes = (
        next(iter(nearest))
        if len(nearest) == 1
        else ", ".join(f"{c} ×{n}" for c, n in nearest.items())
    )
    largest = summary.get("largest_nvlink_domain")
    placement = side.get("placement")
    # What the catalogue's figures rest on, said where a row shows one of its guesses.
    assumption = str(hw.get("assumption") or "")
    # The server's own GPUs first: its class (every server wired alike: H100 and H200 boards)
    # names the GPU of the server its analysis priced.
    model = (snap.gpu_model if snap else None) or summary.get("gpu_model")
    guess = assumption.split("; ")[1] if assumption.startswith("no GPU name given; ") else ""
    pcie_assumed = (
        ", assumed from the GPU generation" if "assumed from the gen" in assumption else ""
    )
    rows: list[dict[str, Any]] = [
        {"label": "GPU model", **_gpu_model_text(snap, model, guess)},
        {"label": "GPU count", "text": gpus, "value": gpus, "better": 1},
        {
            "label": "Links",
            "text": summary.get("description") or (snap.nvlink_summary if snap else None),
        },
        {
            "label": "NVLink per GPU per direction",
            "text": nvlink_text,
            "value": per_gpu if hw else None,
            "better": 1,
        },
        {
            "label": "PCIe generation",
            "text": (
                f"{hw['pcie']} · {_fmt(hw['pcie_gbps_per_direction'])} GB/s effective per "
                f"direction ({_fmt(hw['pcie_line_rate_gbps_per_direction'])} line rate)"
                f"{pcie_assumed}"
                if hw.get("pcie")
                else None
            ),
        },
        {
            "label": "NICs per GPU (nearest class)",
            "text": None
            if nics is None or not gpus
            else f"{_fmt(nics / gpus, 2)} ({nics} NICs; nearest {nic_classes})"
            if nics
            else "none",
            "value": nics / gpus if nics is not None and gpus else None,
            "better": 1,
        },
        {
            "label": "Largest NVLink domain",
            "text": None
            if largest is None
            else f"{largest} GPUs"
            if largest > 1
            else "none (no NVLink)",
            "value": largest,
            "better": 1,
        },
    ]
    for n in COMPARE_SIZES:
        v = _busbw_at(result.get("costs"), gpus, n)
        size = f"{n // (1 << 30)} GiB" if n >= 1 << 30 else f"{n // MiB} MiB"
        rows.append(
            {
                "label": f"AllReduce busbw @ {size}",
                "text": None if v is None else f"{_fmt(v)} GB/s",
                "value": v,
                "better": 1,
            }
        )
    if placement is not None:
        layout = placement["layout"]
        rows.append(
            {
                "label": "Best layout",
                "text": f"TP{layout['tp']} × PP{layout['pp']} × DP{layout['dp']}",
            }
        )
        rows.append(
            {
                "label": "Step time",
                "text": _fmt_time(step_us(placement)),
                "value": step_us(placement),
                "better": -1,
            }
        )
        rows.append(
            {
                "label": "Comm time per step",
                "text": _fmt_time(placement["predicted_step_comm_us"]),
                "value": placement["predicted_step_comm_us"],
                "better": -1,
            }
        )
        rows.append(
            {"label": "Fits in memory", "text": "no" if placement.get("fits") is False else "yes"}
        )
    else:
        error = side.get("placement_error")
        rows.append({"label": "Best layout", "text": "–" if error else None})
        rows.append({"label": "Step time", "text": error})
        rows.append({"label": "Comm time per step", "text": "–" if error else None})
        rows.append({"label": "Fits in memory", "text": "no" if error else None})
    findings = health_selectors.server_findings(server) if server is not None else None
    rows.append(
        {
            "label": "Findings",
            "text": str(len(group_documents(findings))) if findings is not None else None,
            "value": len(group_documents(findings)) if findings is not None else None,
            "better": -1,
        }
    )
    return rows


def _place(side: dict[str, Any], preset: str, asked: Layout | None) -> None:
    server = side["server"]
    if server is None or server.latest_snapshot is None:
        return
    try:
        shape = questions.resolve_shape(preset or None)
        if asked is not None:
            side["placement"] = questions.placement_for(server, asked, None, shape)
            return
        # The layout the API recommends: the fastest that fits in memory, if any does.
        rec = questions.recommendation_for(server, None, shape)
        if rec.get("recommended"):
            side["placement"] = rec["recommended"]
        else:
            side["placement_error"] = (rec.get("no_fit") or {}).get("message") or "fits no layout"
    except ValueError as exc:
        side["placement_error"] = f"not possible: {exc}"
    except LimitExceeded as exc:  # past TOPOWEB_MAX_QUERY_GPUS: this row only, with the reason
        side["placement_error"] = exc.message


def compare_page(a: str, b: str, preset: str = "", asked: Layout | None = None) -> dict[str, Any]:
    """Both sides' graphs and curves, and the point-by-point table with each difference and
    which side is ahead decided here."""
    skus = {row["sku_name"] for row in selectors.sku_list()}
    out: dict[str, Any] = {
        "skus": [
            {"name": row["sku_name"], "server_count": row["server_count"]}
            for row in selectors.sku_list()
        ],
        "presets": analysis_selectors.model_presets(),
        "sides": [],
        "rows": [],
        "differences": 0,
        "layout_note": "",
    }
    if not a or not b:
        return out
    sides = [_resolve(a, skus), _resolve(b, skus)]
    for side in sides:
        server = side["server"]
        snap = server.latest_snapshot if server is not None else None
        try:
            side["graph"] = selectors.graph_elements(snap) if snap is not None else None
        except selectors.GraphNotDrawn:
            side["graph"] = None  # a large server's, until the worker has drawn it
        side["nvlinks"] = _nvlinks_per_gpu(side["graph"])
        _place(side, preset, asked)
    facts = [_facts(s) for s in sides]
    differences = 0
    for ra, rb in zip(facts[0], facts[1], strict=True):
        ta = "–" if ra["text"] in (None, "") else str(ra["text"])
        tb = "–" if rb["text"] in (None, "") else str(rb["text"])
        ahead = None
        if ta != tb and ra.get("better") and ra.get("value") is not None:
            if rb.get("value") is not None and ra["value"] != rb["value"]:
                ahead = "a" if (ra["value"] - rb["value"]) * ra["better"] > 0 else "b"
        differences += ta != tb
        out["rows"].append(
            {
                "label": ra["label"],
                "a": ta,
                "b": tb,
                # The names as reported, where the row shows one name for several spellings.
                "detail": {"a": ra.get("detail", ""), "b": rb.get("detail", "")},
                "differs": ta != tb,
                "ahead": ahead,
                "ahead_mark": None
                if ahead is None
                else ("▲ higher" if ra["better"] > 0 else "▼ lower"),
            }
        )
    out["differences"] = differences
    preset_name = next(
        (s["placement"]["model"] for s in sides if s.get("placement")), "default preset"
    )
    out["layout_note"] = (
        f"Layout TP{asked.tp} × PP{asked.pp} × DP{asked.dp} as asked, for {preset_name}."
        if asked is not None
        else "Best layout: the lowest predicted step time that fits in memory (compute, exposed "
        f"communication and pipeline bubble), for {preset_name}."
    )
    for side in sides:
        server = side["server"]
        costs = stored_result(server).get("costs") if server is not None else None
        curve = ((costs or {}).get("curves") or {}).get("all_reduce")
        side_out = {
            "kind": side["kind"],
            "name": side["name"],
            "hostname": server.hostname if server is not None else None,
            "count": side.get("count"),
            "title": (
                f"SKU {side['name']} — e.g. {server.hostname if server else 'no server'}"
                if side["kind"] == "SKU"
                else f"Server {side['name']}"
            ),
            "heading": (
                f"{side['name']} (SKU, via {server.hostname if server else 'no server'})"
                if side["kind"] == "SKU"
                else f"{side['name']} (server)"
            ),
            "graph": side["graph"],
            "curve": [list(p) for p in zip(costs["sizes"], curve["busbw_gbps"], strict=True)]  # type: ignore[index]
            if curve
            else [],
        }
        out["sides"].append(side_out)
    return out


class ComparePageSerializer(serializers.Serializer):
    skus = serializers.ListField(child=serializers.DictField(), help_text="name, server_count")
    presets = serializers.ListField(child=serializers.DictField())
    sides = serializers.ListField(
        child=serializers.DictField(),
        help_text="Per side: kind, name, hostname, title, heading, graph, curve",
    )
    rows = serializers.ListField(
        child=serializers.DictField(),
        help_text="label, a, b, detail (each side's names as reported), differs, ahead, ahead_mark",
    )
    differences = serializers.IntegerField()
    layout_note = serializers.CharField()


class ComparePageApi(APIView):
    """Everything the compare page shows for two SKUs or servers, in one answer."""

    @extend_schema(
        operation_id="compare_page_retrieve",
        parameters=[
            OpenApiParameter("a", str, description="SKU or hostname"),
            OpenApiParameter("b", str, description="SKU or hostname"),
            OpenApiParameter("model", str, description="model preset key"),
            OpenApiParameter("tp", int),
            OpenApiParameter("pp", int),
            OpenApiParameter("dp", int),
        ],
        responses={200: ComparePageSerializer, **READ_ERRORS},
    )
    def get(self, request: Request) -> Response:
        q = request.query_params
        dims = []
        for k in ("tp", "pp", "dp"):
            v = q.get(k, "")
            dims.append(int(v) if v.isdigit() and 0 < int(v) <= 4096 else 0)
        asked = Layout(*dims) if all(dims) else None
        model = q.get("model", "")
        return Response(compare_page(q.get("a", ""), q.get("b", ""), model, asked))
