"""Reads of the fabric between servers: fabrics with their latest capture's summary, one
fabric's stored analysis, its captures (history) and the diff between two of them, and the
leaves a server's HCAs hang off. Nothing here parses or analyses: the worker stored it."""

from __future__ import annotations

from typing import Any

from django.db import connection
from django.db.models import QuerySet
from django.http import Http404

from topoweb.core.fabric import build_fabric, diff_fabrics
from topoweb.core.fabric_exports import FABRIC_EXPORTS, render_fabric_export
from topoweb.core.fabric_paths import FabricPlace
from topoweb.core.formats.ibnet import IbnetCapture
from topoweb.core.scheduling import nvlink_domain_of
from topoweb.fleet.models import Fabric, FabricCapture, Server

SUMMARY_FIELDS = (
    "id",
    "captured_at",
    "received_at",
    "source",
    "hostname",
    "switch_count",
    "ca_count",
    "link_count",
    "warning_count",
    "status",
    "analysed_at",
)


def fabrics() -> QuerySet[Fabric]:
    return Fabric.objects.select_related("latest_capture").defer(
        "latest_capture__raw_text",
        "latest_capture__document",
        "latest_capture__analysis",
        "latest_capture__page",
    )


def fabric_by_name(name: str) -> Fabric:
    try:
        return Fabric.objects.get(name=name)
    except Fabric.DoesNotExist:
        raise Http404(f"no fabric named {name!r}") from None


def capture_summary(capture: FabricCapture | None) -> dict[str, Any] | None:
    if capture is None:
        return None
    return {f: getattr(capture, f) for f in SUMMARY_FIELDS}


def capture_history(fabric: Fabric) -> QuerySet[FabricCapture]:
    return FabricCapture.objects.filter(fabric=fabric).only(*SUMMARY_FIELDS, "fabric")


def fabric_detail(name: str, capture_id: int | None = None) -> dict[str, Any]:
    """The fabric's latest capture (or the one asked for) with what the worker stored; while
    the worker has not run, `status` says so and the analysis is null."""
    fabric = fabric_by_name(name)
    captures = FabricCapture.objects.filter(fabric=fabric)
    if capture_id is not None:
        capture = captures.filter(pk=capture_id).defer("raw_text", "document", "page").first()
        if capture is None:
            raise Http404(f"fabric {name!r} has no capture {capture_id}")
    elif fabric.latest_capture_id is not None:
        capture = captures.defer("raw_text", "document", "page").get(pk=fabric.latest_capture_id)
    else:
        capture = None
    return {
        "name": fabric.name,
        "capture": capture_summary(capture),
        "captures": captures.count(),
        "status": capture.status if capture else "pending",
        "error": capture.error if capture else "",
        "analysis": capture.analysis if capture else None,
    }


def _capture(fabric: Fabric, capture_id: int) -> IbnetCapture:
    row = FabricCapture.objects.filter(fabric=fabric, pk=capture_id).only("document").first()
    if row is None:
        raise Http404(f"fabric {fabric.name!r} has no capture {capture_id}")
    return IbnetCapture.from_document(row.document)


def fabric_diff(name: str, old_id: int, new_id: int) -> dict[str, Any]:
    fabric = fabric_by_name(name)
    old, new = _capture(fabric, old_id), _capture(fabric, new_id)
    return {
        "name": fabric.name,
        "from": old_id,
        "to": new_id,
        **diff_fabrics(build_fabric(old), build_fabric(new)),
    }


def server_rails(hostname: str) -> list[dict[str, Any]]:
    """For a server page: in each fabric whose latest analysis names this server, its HCAs
    with the leaf and port each hangs off and the rail."""
    out = []
    analysed = Fabric.objects.filter(latest_capture__status=FabricCapture.Status.DONE)
    if connection.features.supports_json_field_contains:
        # PostgreSQL finds the fabrics naming the server; SQLite (the embedded default) has no
        # JSON containment, and the loop below, which picks the server's hosts, filters alone.
        analysed = analysed.filter(latest_capture__analysis__hosts__contains=[{"server": hostname}])
    analysed = analysed.select_related("latest_capture")
    for fabric in analysed:
        analysis = fabric.latest_capture.analysis if fabric.latest_capture else None
        for host in (analysis or {}).get("hosts", ()):
            if host.get("server") == hostname:
                out.append(
                    {"fabric": fabric.name, "hostname": host["hostname"], "hcas": host["hcas"]}
                )
    return out


class NotAnalysed(Exception):
    """The fabric's latest capture has no stored analysis yet (or its analysis failed)."""


def fabric_export(name: str, fmt: str) -> str:
    """A scheduler's file from the fabric's stored analysis: nodes named as the matched servers,
    NVLink domains from those servers' NVML facts."""
    if fmt not in FABRIC_EXPORTS:
        raise Http404(f"no fabric export {fmt!r}; exports: {', '.join(FABRIC_EXPORTS)}")
    fabric = fabric_by_name(name)
    capture = (
        FabricCapture.objects.filter(fabric=fabric, pk=fabric.latest_capture_id or 0)
        .only("status", "analysis")
        .first()
    )
    if capture is None or capture.status != FabricCapture.Status.DONE or not capture.analysis:
        raise NotAnalysed(f"fabric {name!r} is not analysed yet; try again shortly")
    doc = capture.analysis
    servers = {h["server"] for h in doc["hosts"] if h.get("server")}
    nvlink = {}
    for hostname, nvml in Server.objects.filter(hostname__in=servers).values_list(
        "hostname", "latest_snapshot__nvml"
    ):
        domain = nvlink_domain_of(nvml)
        if domain:
            nvlink[hostname] = domain
    return render_fabric_export(doc, fmt, nvlink=nvlink)


def fabric_page_document(
    name: str, unit: str | None = None, host: str | None = None
) -> dict[str, Any]:
    """What the fabric page draws: the latest capture's stored drawing with its summary,
    findings and warnings (one column, not the analysis of every host). A large fabric's
    drawing starts folded: its hosts come per unit (`unit`, or the unit of `host`; `*` all)."""
    fabric = fabric_by_name(name)
    row = (
        FabricCapture.objects.filter(fabric=fabric, pk=fabric.latest_capture_id or 0)
        .defer("raw_text", "document", "analysis")
        .first()
    )
    done = row is not None and row.status == FabricCapture.Status.DONE and row.page is not None
    page = dict(row.page) if done and row is not None and row.page else {}
    if unit is not None or host is not None:
        hosts = page.get("hosts", [])
        if host is not None:
            unit = next((h["unit"] for h in hosts if host in (h["hostname"], h["server"])), "")
        return {"unit": unit, "hosts": [h for h in hosts if unit in ("*", h["unit"])]}
    if page.get("collapsed"):
        page["hosts"] = None  # asked for per unit
    return {
        "name": fabric.name,
        "capture": capture_summary(row),
        "status": row.status if row else "pending",
        "summary": page.pop("summary", None),
        "findings": page.pop("findings", []),
        "warnings": page.pop("warnings", []),
        "page": page or None,
    }


def server_fabric_places(hostnames: set[str]) -> dict[str, FabricPlace]:
    """Where each of these servers sits in the fabrics whose latest capture is analysed (the
    first fabric by name for a server in two): what placement over servers reads."""
    out: dict[str, FabricPlace] = {}
    rows = (
        Fabric.objects.filter(latest_capture__status=FabricCapture.Status.DONE)
        .order_by("name")
        .values_list("name", "latest_capture__analysis__places")
    )
    for name, places in rows:
        for node, row in (places or {}).items():
            if node in hostnames and node not in out:
                out[node] = FabricPlace.from_document(name, row)
    return out
