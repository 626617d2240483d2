"""Writes of the fabric between servers: storing an `ibnetdiscover` capture under a fabric's
name (by hand or from a collector), and the worker's analysis of it (core.fabric), which names
each host's server and reads the HCA GUIDs the servers' collectors sent."""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass
from datetime import datetime

from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone

from topoweb.core.fabric import build_fabric, normal_guid
from topoweb.core.fabric_findings import FABRIC_ANALYSIS_VERSION, fabric_analysis
from topoweb.core.fabric_layout import fabric_page
from topoweb.core.fabric_paths import fabric_places
from topoweb.core.formats import parse_text
from topoweb.core.formats.ibnet import IbnetCapture
from topoweb.fleet import work
from topoweb.fleet.models import Fabric, FabricCapture, Server

log = logging.getLogger(__name__)
ANALYSE_TASK = "fleet.analyse_fabric"
FABRIC_WORK = "fabric"  # fleet.work's kind for a capture's analysis
MAX_ATTEMPTS = 3


@dataclass(frozen=True)
class FabricIngested:
    fabric: Fabric
    capture: FabricCapture
    created: bool


def ingest_fabric(
    *,
    name: str,
    text: str,
    source: str,
    uploaded_by: User | None = None,
    hostname: str = "",
    captured_at: datetime | None = None,
) -> FabricIngested:
    """Read, then store in one transaction; the same text again is the stored capture (200).
    ParseError (with the line) when the text is not a readable ibnetdiscover report."""
    parsed = parse_text(text, expected="ibnetdiscover")
    assert isinstance(parsed, IbnetCapture)
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
    when = captured_at or timezone.now()
    with transaction.atomic():
        fabric, _ = Fabric.objects.get_or_create(name=name)
        fabric = Fabric.objects.select_for_update().get(pk=fabric.pk)
        existing = FabricCapture.objects.filter(fabric=fabric, content_sha256=digest).first()
        if existing is not None:
            return FabricIngested(fabric, existing, created=False)
        kinds = [n.kind for n in parsed.nodes.values()]
        capture = FabricCapture.objects.create(
            fabric=fabric,
            content_sha256=digest,
            raw_text=text,
            document=parsed.to_document(),
            source=source,
            uploaded_by=uploaded_by,
            hostname=hostname,
            captured_at=when,
            switch_count=kinds.count("switch"),
            ca_count=kinds.count("ca"),
            link_count=len(parsed.links),
            warning_count=len(parsed.warnings),
        )
        latest = fabric.latest_capture
        if latest is None or (when, capture.pk) >= (latest.captured_at, latest.pk):
            fabric.latest_capture = capture
            fabric.save(update_fields=["latest_capture"])
        request_analysis(capture)
    return FabricIngested(fabric, capture, created=True)


def request_analysis(capture: FabricCapture) -> None:
    """Analyse the capture once the caller's transaction commits (fleet.work: one message out
    per capture, its tries renewed by this new input)."""
    work.request(FABRIC_WORK, [capture.pk], ANALYSE_TASK, renew=True)


def send_analysis(capture_id: int) -> bool:
    """Send the task unless one is out for this capture or it was given up."""
    return work.send(FABRIC_WORK, capture_id, ANALYSE_TASK)


def guid_hosts() -> dict[str, tuple[str, str]]:
    """HCA node GUID -> (hostname, device), from the RDMA NICs in each server's latest host
    facts (the collector reads /sys/class/infiniband/<device>/node_guid)."""
    out: dict[str, tuple[str, str]] = {}
    rows = Server.objects.filter(latest_snapshot__host__has_key="rdma_nics").values_list(
        "hostname", "latest_snapshot__host__rdma_nics"
    )
    for hostname, nics in rows:
        for nic in nics if isinstance(nics, list) else ():
            guid = nic.get("node_guid") if isinstance(nic, dict) else None
            if isinstance(guid, str) and guid:
                out[normal_guid(guid)] = (hostname, str(nic.get("device") or ""))
    return out


def _server_names(hostnames: set[str]) -> dict[str, str]:
    """Each NodeDescription hostname -> the server it is: the same hostname, else the one
    server whose short name (before the first dot) it is."""
    exact = set(Server.objects.filter(hostname__in=hostnames).values_list("hostname", flat=True))
    out = {h: h for h in exact}
    rest = hostnames - exact
    if rest:
        by_short: dict[str, list[str]] = {}
        for full in Server.objects.filter(hostname__contains=".").values_list(
            "hostname", flat=True
        ):
            by_short.setdefault(full.split(".", 1)[0], []).append(full)
        for h in rest:
            if len(by_short.get(h, [])) == 1:
                out[h] = by_short[h][0]
    return out


def analysis_key(capture: FabricCapture, known: dict[str, tuple[str, str]]) -> str:
    """What an analysis was made from: the capture, the GUIDs collectors sent, the version."""
    digest = hashlib.sha256()
    digest.update(f"{FABRIC_ANALYSIS_VERSION}:{capture.content_sha256}:".encode())
    digest.update(json.dumps(sorted(known.items())).encode())
    return digest.hexdigest()


def analyse_capture(capture_id: int) -> str:
    """The worker's job: 'done', 'skipped' (already done from the same inputs, or gone), or
    'failed' (kept with the error; a capture that fails MAX_ATTEMPTS times is not retried)."""
    known = guid_hosts()
    with transaction.atomic():
        capture = (
            FabricCapture.objects.select_for_update()
            .select_related("fabric")
            .filter(pk=capture_id)
            .first()
        )
        if capture is None:
            return "skipped"
        key = analysis_key(capture, known)
        if capture.status == FabricCapture.Status.DONE and capture.analysis_key == key:
            return "skipped"
        if capture.status == FabricCapture.Status.FAILED and capture.attempts >= MAX_ATTEMPTS:
            return "skipped"
        capture.attempts += 1
        try:
            fabric = build_fabric(IbnetCapture.from_document(capture.document), known)
            servers = _server_names({h.hostname for h in fabric.hosts if h.hostname})
            # A host's siblings are its SKU's hosts where the service knows the server.
            sku_of = dict(
                Server.objects.filter(hostname__in=set(servers.values()))
                .exclude(sku_name="")
                .values_list("hostname", "sku_name")
            )
            skus = {h: sku_of[s] for h, s in servers.items() if s in sku_of}
            doc = fabric_analysis(fabric, skus)
        except (ValueError, KeyError, TypeError) as exc:  # a stored document gone bad
            log.exception("fabric capture %s could not be analysed", capture_id)
            capture.status, capture.error = FabricCapture.Status.FAILED, str(exc)[:2000]
            capture.save(update_fields=["status", "error", "attempts"])
            return "failed"
        for host in doc["hosts"]:
            host["server"] = servers.get(host["hostname"]) if host["hostname"] else None
        doc["summary"]["servers"] = len(set(servers.values()))
        # Where each known server sits, compact, for placement questions (core.fabric_paths).
        doc["places"] = {
            node: place.to_document()
            for node, place in fabric_places(capture.fabric.name, doc).items()
            if node in set(servers.values())
        }
        capture.analysis, capture.analysis_key = doc, key
        # The page reads this one column: the drawing with what is written beside it.
        capture.page = {
            **fabric_page(doc),
            "summary": doc["summary"],
            "findings": doc["findings"],
            "warnings": doc["warnings"],
        }
        capture.status, capture.error = FabricCapture.Status.DONE, ""
        capture.analysed_at = timezone.now()
        capture.save(
            update_fields=[
                "analysis",
                "page",
                "analysis_key",
                "status",
                "error",
                "analysed_at",
                "attempts",
            ]
        )
    return "done"


def stale_captures() -> list[int]:
    """Latest captures not analysed yet (the broker was down), failed with tries left, or
    analysed from other HCA GUIDs than the servers' collectors send now."""
    latest = FabricCapture.objects.filter(pk__in=Fabric.objects.values("latest_capture")).exclude(
        pk__in=work.given_up_keys(FABRIC_WORK)
    )
    known: dict[str, tuple[str, str]] | None = None
    out = []
    for pk, status, attempts, key, sha in latest.values_list(
        "pk", "status", "attempts", "analysis_key", "content_sha256"
    ):
        if status == FabricCapture.Status.DONE:
            known = guid_hosts() if known is None else known
            if key != analysis_key(FabricCapture(content_sha256=sha), known):
                out.append(pk)
        elif attempts < MAX_ATTEMPTS:
            out.append(pk)
    return out
