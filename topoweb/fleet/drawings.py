"""What the worker draws once per snapshot and requests serve as drawn: the exports as files
(NCCL XML, Slurm gres.conf, Kubernetes labels: SnapshotExport rows; a topology class's in the
cache) beside the graph (fleet.selectors.warm_graph, in the cache). Drawing either reads the
whole topology, seconds for the largest servers; a request serves the stored file, and draws
one itself only when none is stored for the current snapshot and core (then it also queues
the worker's drawing)."""

from __future__ import annotations

import hashlib
import logging

from django.core.cache import cache
from django.db import transaction
from django.http import Http404

from topoweb.core.ecosystem import EXPORT_FORMATS, Export, render_export
from topoweb.core.model import Topology
from topoweb.fleet import changes
from topoweb.fleet.models import Server, Snapshot, SnapshotExport, TopologyClass
from topoweb.fleet.selectors import (
    CORE_VERSION,
    request_drawing,
    warm_graph,
)

log = logging.getLogger(__name__)

# Past this many devices a request that draws an export (none stored yet) also queues the
# worker's drawing, so that the next one is served stored.
DRAW_EXPORTS_IN_REQUEST_UP_TO_DEVICES = 64


def server_export(server: Server, fmt: str) -> Export:
    """One of core.ecosystem's exports of the server's latest topology, with its NVML and host
    facts (real bus ids, PCIe generation, NIC speeds), as the worker stored it; drawn here
    when it has not been yet. Http404 before any snapshot or for a format that does not
    exist. `server` as fleet.selectors.server_by_hostname reads it (no large columns)."""
    snapshot = server.latest_snapshot
    if snapshot is None:
        raise Http404(f"server {server.hostname!r} has no topology snapshot yet")
    _known_format(fmt)
    stored = (
        SnapshotExport.objects.filter(
            snapshot_id=snapshot.pk, fmt=fmt, code=CORE_VERSION, hostname=server.hostname
        )
        .values_list("body", "content_type", "filename", "warnings")
        .first()
    )
    if stored is not None:
        body, content_type, filename, warnings = stored
        return Export(body, content_type, filename, tuple(warnings))
    if snapshot.gpu_count + snapshot.nic_count > DRAW_EXPORTS_IN_REQUEST_UP_TO_DEVICES:
        request_drawing(server.pk)
    return _draw(server, snapshot, snapshot.to_domain(), fmt)


def topology_class_export(topology_class: TopologyClass, fmt: str) -> Export:
    """The same for a topology class: its canonical document, no host facts (so an NCCL XML
    carries placeholder bus ids, and says so). Kept in the cache once drawn (the worker draws
    them after each report of the class, `warm_class_exports`); a miss draws it here and keeps
    it. `topology_class` may leave its document deferred: it is read only to draw."""
    _known_format(fmt)
    key = _class_export_key(topology_class, fmt)
    found = _kept_export(key)
    if found is not None:
        return found
    export = _draw_class(topology_class, topology_class.to_domain(), fmt)
    _keep(key, export)
    return export


def warm_class_exports(topology_class: TopologyClass) -> int:
    """Draw the class's exports the cache lacks, from its document (worker side); how many."""
    missing = [
        f for f in EXPORT_FORMATS if _kept_export(_class_export_key(topology_class, f)) is None
    ]
    if not missing:
        return 0
    topology = topology_class.to_domain()
    for fmt in missing:
        try:
            export = _draw_class(topology_class, topology, fmt)
        except Exception:  # noqa: BLE001 - as store_exports: a request draws it and answers
            log.warning("%s of class %s not drawn", fmt, topology_class.pk, exc_info=True)
            continue
        _keep(_class_export_key(topology_class, fmt), export)
    return len(missing)


def _draw_class(topology_class: TopologyClass, topology: Topology, fmt: str) -> Export:
    return render_export(
        topology,
        fmt,
        name=f"class-{topology_class.fingerprint[:12]}",
        fingerprint=topology_class.fingerprint,
        gpu_model=topology_class.gpu_model or None,
    )


# A class's document never changes; its GPU model may be learned later (part of the key), and
# a deploy that changes the core draws anew. Only space expires a drawing.
CLASS_EXPORT_CACHE_S = 7 * 24 * 3600


def _class_export_key(topology_class: TopologyClass, fmt: str) -> str:
    model = hashlib.sha256(topology_class.gpu_model.encode()).hexdigest()[:16]
    return f"class-export:{CORE_VERSION}:{topology_class.fingerprint}:{model}:{fmt}"


def _kept_export(key: str) -> Export | None:
    try:
        found = cache.get(key)
    except Exception:  # noqa: BLE001 - a cache that is down costs a drawing, never an answer
        return None
    return found if isinstance(found, Export) else None


def _keep(key: str, export: Export) -> None:
    try:
        cache.set(key, export, timeout=CLASS_EXPORT_CACHE_S)
    except Exception:  # noqa: BLE001
        log.warning("class export not kept: the cache is unreachable", exc_info=True)


def _known_format(fmt: str) -> None:
    if fmt not in EXPORT_FORMATS:
        raise Http404(f"no export format {fmt!r}; formats: {', '.join(EXPORT_FORMATS)}")


def _draw(server: Server, snapshot: Snapshot, topology: Topology, fmt: str) -> Export:
    return render_export(
        topology,
        fmt,
        name=server.hostname,
        nvml=snapshot.nvml,
        host=snapshot.host,
        fingerprint=snapshot.topology_class.fingerprint,
        gpu_model=snapshot.gpu_model or None,
    )


def store_exports(server: Server, snapshot: Snapshot, topology: Topology) -> int:
    """Draw and store every export of the snapshot not stored yet by this core (worker side);
    how many were drawn (its class's, kept in the cache, are drawn too where missing).
    `topology`: the snapshot's, already read by the caller. An export that cannot be drawn is
    left unstored: a request then draws it and answers as it did."""
    have = set(
        SnapshotExport.objects.filter(
            snapshot=snapshot, code=CORE_VERSION, hostname=server.hostname
        ).values_list("fmt", flat=True)
    )
    rows = []
    for fmt in EXPORT_FORMATS:
        if fmt in have:
            continue
        try:
            export = _draw(server, snapshot, topology, fmt)
        except Exception:  # noqa: BLE001 - one bad export must not cost the server the others
            log.warning("%s of %s not stored", fmt, server.hostname, exc_info=True)
            continue
        rows.append(
            SnapshotExport(
                snapshot=snapshot,
                fmt=fmt,
                code=CORE_VERSION,
                hostname=server.hostname,
                filename=export.filename,
                content_type=export.content_type,
                body=export.body,
                warnings=list(export.warnings),
            )
        )
    if rows:
        with transaction.atomic():
            # Under the server's row lock, as its other writers (fleet.changes): a deletion of
            # the server that took it first has committed, and the snapshot is gone; a later
            # one waits for these files and deletes them with it.
            changes.lock_servers([server.pk])
            if not Snapshot.objects.filter(pk=snapshot.pk).exists():
                return 0
            # Replaces a file an older core drew; two workers drawing at once write the same.
            SnapshotExport.objects.bulk_create(
                rows,
                update_conflicts=True,
                unique_fields=["snapshot", "fmt"],
                update_fields=["code", "hostname", "filename", "content_type", "body", "warnings"],
            )
            # Only the current snapshot's files are ever served: the older ones go.
            SnapshotExport.objects.filter(snapshot__server_id=server.pk).exclude(
                snapshot=snapshot
            ).delete()
    if snapshot.topology_class is not None:
        warm_class_exports(snapshot.topology_class)
    return len(rows)


def draw_latest(server_id: int) -> bool:
    """The worker's drawings of the server's latest snapshot, graph and exports, where a
    request found them missing (fleet.selectors.request_drawing); whether there was one."""
    server = (
        Server.objects.select_related("latest_snapshot__topology_class")
        .filter(pk=server_id)
        .first()
    )
    snapshot = server.latest_snapshot if server is not None else None
    if server is None or snapshot is None:
        return False
    topology = snapshot.to_domain()
    warm_graph(snapshot, topology)
    store_exports(server, snapshot, topology)
    return True
