"""The one call every write makes when it changed what a server's stored read documents show
(its list row and detail: health.documents writes them, registered at start-up by
HealthConfig.ready, since their shape reads the apps above the fleet)."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from django.db import transaction

from topoweb.config.answers import fleet_changed
from topoweb.fleet.models import Server

DocumentWriter = Callable[[list[int]], None]
_WRITERS: list[DocumentWriter] = []
_DROPPERS: list[DocumentWriter] = []


def writes_documents(writer: DocumentWriter, dropper: DocumentWriter) -> None:
    """Call `writer(server_ids)` whenever a write changed what these servers' documents show,
    and `dropper(server_ids)` when a worker will write them (servers_outdated)."""
    if writer not in _WRITERS:
        _WRITERS.append(writer)
    if dropper not in _DROPPERS:
        _DROPPERS.append(dropper)


def servers_changed(server_ids: Iterable[int]) -> None:
    """These servers' stored documents are written again now, inside the caller's transaction
    (a reader never sees the change without its document)."""
    ids = sorted(set(server_ids))
    if not ids:
        return
    for writer in _WRITERS:
        writer(ids)
    fleet_changed()  # reads kept whole (config.answers) are computed again


def servers_outdated(server_ids: Iterable[int]) -> None:
    """These servers' stored documents no longer hold, and the caller has asked for the work
    that writes them again: the health evaluation a new snapshot requests ends by writing
    them (health.services.evaluate_server). They are dropped now, inside the caller's
    transaction, and until the worker writes them a read builds them from what is stored
    (health.documents), so a reader never sees the change without its document. An ingest
    then leaves the documents' build to the worker, which builds them anyway once its
    assessment is stored, instead of building them twice."""
    ids = sorted(set(server_ids))
    if not ids:
        return
    for dropper in _DROPPERS:
        dropper(ids)
    fleet_changed()


def lock_servers(server_ids: Iterable[int]) -> None:
    """Lock these servers' rows for the rest of the caller's transaction, in one order. A
    writer that changes a server's health rows and then its documents takes the server's row
    first, as an ingest does (its server row, then the health rows it marks stale), so that
    the two never wait on each other in a circle."""
    ids = sorted(set(server_ids))
    if ids:
        list(Server.objects.select_for_update().filter(pk__in=ids).order_by("pk").values("pk"))


def delete_servers(server_ids: Iterable[int]) -> None:
    """Delete these servers (with their snapshots, runs and files) as every writer of their
    rows goes: their rows locked first, so that a worker storing one's files (fleet.drawings)
    either committed before, and its files go with the server, or waits and finds it gone;
    then the reads that showed them follow (servers_changed)."""
    ids = sorted(set(server_ids))
    if not ids:
        return
    with transaction.atomic():
        lock_servers(ids)
        Server.objects.filter(pk__in=ids).delete()
        servers_changed(ids)
