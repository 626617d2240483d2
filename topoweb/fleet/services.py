"""Writes of the fleet: ingest of reports and uploads (parse with the core, dedupe, store in one
transaction, then tell the apps built on the fleet: after_new_snapshot). Tokens are made in
fleet.access."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.db import DEFAULT_DB_ALIAS, IntegrityError, connection, transaction
from django.db.models import Q, QuerySet, Subquery
from django.utils import timezone

from topoweb.config import limits
from topoweb.config.answers import fleet_changed, server_seen
from topoweb.config.celery_app import enqueue_together
from topoweb.core.analysis import COST_MODEL_VERSION
from topoweb.core.costs import build_model, calibrate_from_nccl, calibrate_from_p2p
from topoweb.core.fingerprint import (
    describe_links,
    fingerprint_of_wiring,
    nvlink_summary,
    wiring_sha256,
)
from topoweb.core.formats import ParseError, detect_format, parse_text
from topoweb.core.formats.nvbandwidth import to_p2p
from topoweb.core.formats.nvml import (
    NvmlFacts,
    check_fits,
    nvlink_domain,
    read_host,
    read_nvml,
    smallest_gpu_memory,
)
from topoweb.core.gpunames import count_models, models_from_text
from topoweb.core.merge import merge_sources
from topoweb.core.model import NcclRun, NvbandwidthRun, P2PResult, Topology
from topoweb.core.steptime import priced_model
from topoweb.fleet import access, changes, statements
from topoweb.fleet.drift import refresh_sku_drift
from topoweb.fleet.models import (
    Benchmark,
    CollectorToken,
    Server,
    Snapshot,
    Source,
    TopologyClass,
)
from topoweb.fleet.selectors import (
    hostname_match,
    mark_used,
    needs_mark,
)

BENCHMARK_KINDS = (
    Benchmark.Kind.NCCL.value,
    Benchmark.Kind.P2P.value,
    Benchmark.Kind.NVBANDWIDTH.value,
)
ParsedBenchmark = NcclRun | P2PResult | NvbandwidthRun


@dataclass(frozen=True)
class BenchmarkInput:
    kind: str
    text: str


@dataclass(frozen=True)
class Ingested:
    """What an ingest stored, or found already stored (`created` False)."""

    server: Server
    created: bool
    snapshot: Snapshot | None = None
    benchmark: Benchmark | None = None
    warnings: tuple[str, ...] | None = None  # the snapshot's reader warnings, where known


# --- what a stored report asks of the apps built on the fleet --------------------------------

# The analysis app asks for its topology class's analysis, the health app for the server's
# evaluation. They register here from their AppConfig.ready() (in INSTALLED_APPS order), so
# that the fleet, which they build on, never imports them: the import-linter layers contract.
# Each hook runs inside the ingest's transaction; what it enqueues waits for the commit.


@dataclass(frozen=True)
class NewSnapshot:
    """A snapshot an ingest stored, with what changed beside it: what the hooks ask of their
    apps follows from it (a class's analysis depends on its document and its servers' runs,
    not on each report of its servers)."""

    server: Server
    snapshot: Snapshot
    new_server: bool  # made by this report: nothing of it is stored elsewhere yet
    new_class: bool  # its class was made by this report
    class_learned: bool  # its class learned the GPU or CPU model it lacked from this report
    runs_changed: bool  # its class's runs: the report carried some, or the server changed class


SnapshotHook = Callable[[NewSnapshot], None]
BenchmarkHook = Callable[[Server, Benchmark], None]
_AFTER_SNAPSHOT: list[SnapshotHook] = []
_AFTER_BENCHMARK: list[BenchmarkHook] = []


def after_new_snapshot(hook: SnapshotHook) -> None:
    """Call `hook(NewSnapshot(...))` whenever an ingest stores a new snapshot."""
    if hook not in _AFTER_SNAPSHOT:
        _AFTER_SNAPSHOT.append(hook)


def after_new_benchmark(hook: BenchmarkHook) -> None:
    """Call `hook(server, benchmark)` whenever an upload stores a new benchmark on its own."""
    if hook not in _AFTER_BENCHMARK:
        _AFTER_BENCHMARK.append(hook)


# --- ingest ----------------------------------------------------------------------------------


def content_sha256(
    topo_text: str,
    nvml: dict[str, Any] | None = None,
    host: dict[str, Any] | None = None,
    benchmarks: Sequence[BenchmarkInput] = (),
    nccl_xml: str = "",
) -> str:
    """What makes two reports "the same": everything measured, not when or by which version."""
    extra = {"nccl_xml": nccl_xml} if nccl_xml else {}  # older digests stay as they were
    canonical = json.dumps(
        {
            "topo_text": topo_text,
            "nvml": nvml,
            "host": host,
            "benchmarks": [[b.kind, b.text] for b in benchmarks],
            **extra,
        },
        sort_keys=True,
        separators=(",", ":"),
    )
    return hashlib.sha256(canonical.encode()).hexdigest()


def ingest_report(
    *,
    hostname: str,
    topo_text: str,
    captured_at: datetime,
    source: str,
    collector_version: str = "",
    nvml: dict[str, Any] | None = None,
    host: dict[str, Any] | None = None,
    benchmarks: Sequence[BenchmarkInput] = (),
    uploaded_by: User | None = None,
    gpu_model_hint: str = "",
    nccl_xml: str = "",
    collector_token: CollectorToken | None = None,
    admit: Callable[[], None] | None = None,
) -> Ingested:
    """Store one topology report with its benchmarks, or find the identical one already stored.

    `topo_text` is `topo -m` output or an NCCL topology XML; with `nccl_xml` beside a matrix,
    the snapshot holds the merge of both (contradictions listed for health). Everything is
    parsed before anything is written, so bad input raises ParseError (message and line from
    the core; for NVML facts, the place in them) with nothing stored. A report already stored
    (the same content for the same host) is recognised first, before any parsing: most of a
    fleet's reports are unchanged since the last one. The `collector_token` that sent it, when
    it is due to be marked used, is marked by that same first statement. `admit` is called
    once the report is known to be new, before anything is parsed: a caller's budget (the
    report endpoint's throttle) refuses it there by raising."""
    limits.check_benchmark_count(len(benchmarks))
    digest = content_sha256(topo_text, nvml, host, benchmarks, nccl_xml)
    stored, first_of_host = _stored_duplicate(hostname, digest, collector_token)
    if stored is not None:
        return stored
    if admit is not None:
        admit()
    limits.check_topology_text(topo_text)
    if nccl_xml:
        limits.check_topology_text(nccl_xml, where="nccl_xml: ")
    topology = parse_text(topo_text, expected="topology")
    assert isinstance(topology, Topology)
    limits.check_topology(topology)
    if nccl_xml:
        try:
            xml = parse_text(nccl_xml, expected="nccl-topology-xml")
        except ParseError as exc:
            raise ParseError("nccl_xml: " + exc.message, exc.line) from exc
        assert isinstance(xml, Topology)
        topology = merge_sources(topology, xml)
    facts = read_nvml(nvml) if nvml is not None else None
    if facts is not None and facts.available:
        check_fits(facts, len(topology.gpus))
    parsed_benchmarks = [_parse_benchmark(i, b) for i, b in enumerate(benchmarks)]
    document = topology.to_document()
    report = _Report(
        hostname=hostname,
        digest=digest,
        topo_text=topo_text,
        nccl_xml=nccl_xml,
        topology=topology,
        document=document,
        wiring=wiring_sha256(document),
        captured_at=captured_at,
        source=source,
        collector_version=collector_version,
        nvml=nvml,
        host=host,
        facts=facts,
        benchmarks=benchmarks,
        parsed_benchmarks=parsed_benchmarks,
        uploaded_by=uploaded_by,
        gpu_model_hint=gpu_model_hint,
    )
    for attempt in (1, 2):
        try:
            # The analysis and the health evaluation the hooks enqueue: one broker round trip.
            with enqueue_together():
                return _store_report(report, first_of_host)
        except IntegrityError:
            # Another request stored this same report, or this host's first one, between the
            # check above and this one's commit: this transaction rolled back whole (no
            # savepoint per insert, each a round trip). The same report is answered as a
            # duplicate; a server that appeared meanwhile is used on the second try.
            stored, first_of_host = _stored_duplicate(hostname, digest)
            if stored is not None:
                return stored
            if attempt == 2:
                raise
    raise AssertionError("unreachable")


@dataclass(frozen=True)
class _Report:
    """A report parsed and checked, ready to store."""

    hostname: str
    digest: str
    topo_text: str
    nccl_xml: str
    topology: Topology
    document: dict[str, Any]  # topology.to_document(), built once for the class and snapshot
    wiring: str  # wiring_sha256(document)
    captured_at: datetime
    source: str
    collector_version: str
    nvml: dict[str, Any] | None
    host: dict[str, Any] | None
    facts: NvmlFacts | None
    benchmarks: Sequence[BenchmarkInput]
    parsed_benchmarks: list[ParsedBenchmark]
    uploaded_by: User | None
    gpu_model_hint: str


def _store_report(report: _Report, first_of_host: bool) -> Ingested:
    """One transaction, each write one statement; a unique violation (a race) rolls it back
    whole and raises IntegrityError. `first_of_host`: the duplicate check found no server of
    the host, so none is looked for (a new collector's first report): one made since by
    another request makes this one's insert of it fail, and the retry looks."""
    topology = report.topology
    now = timezone.now()
    with transaction.atomic():
        if first_of_host:
            found = None
        else:
            _one_ingest_per_host_at_a_time(report.hostname)
            found = statements.server_to_store(report.hostname, report.captured_at)
        server, newest = found or (Server(hostname=report.hostname), True)
        class_before = server.topology_class_id
        gpu_model, gpu_models = _gpu_model(
            report.facts, report.gpu_model_hint, report.parsed_benchmarks
        )
        previous = server.latest_snapshot
        if not gpu_model and previous is not None and previous.gpu_count == len(topology.gpus):
            # A re-upload without NVML facts names no model: the GPUs did not change with it.
            gpu_model, gpu_models = previous.gpu_model, previous.gpu_models
        sku_name = _sku_name(server, report.host)
        _one_ingest_per_sku_at_a_time(sku_name)
        summary = nvlink_summary(topology)
        cpu_model = (read_host(report.host).cpu_model or "")[:200]
        if not cpu_model and previous is not None:
            cpu_model = previous.cpu_model  # an upload without host facts: the same host CPU
        topology_class, new_class, class_learned = _topology_class(
            report, sku_name, gpu_model, cpu_model, summary
        )
        snapshot = Snapshot(
            server=server,
            content_sha256=report.digest,
            wiring_sha256=report.wiring,
            raw_text=report.topo_text,
            nccl_xml=report.nccl_xml,
            source=report.source,
            uploaded_by=report.uploaded_by,
            collector_version=report.collector_version,
            captured_at=report.captured_at,
            nvml=report.nvml,
            host=report.host,
            topology_class=topology_class,
            gpu_count=len(topology.gpus),
            nic_count=len(topology.nics),
            gpu_model=gpu_model,
            gpu_models=gpu_models,
            cpu_model=cpu_model,
            gpu_memory_bytes=smallest_gpu_memory(report.nvml),
            nvlink_domain=nvlink_domain(report.nvml),
            has_nvlink=bool(summary),
            nvlink_summary=summary,
            warning_count=len(topology.warnings),
        )
        document = statements.snapshot_document(
            report.document, report.wiring, previous, getattr(server, "previous_warnings", None)
        )
        server.last_seen_at = now
        server.sku_name = sku_name
        # Spooled reports can arrive late: the newest capture, not the newest arrival, is current.
        if newest:
            server.topology_class = topology_class
        if found is None:  # a new collector's first report: written out as the rest
            statements.insert_new_server(server, snapshot, document)
        else:
            update_fields = ["last_seen_at", "sku_name"]
            if newest:
                update_fields += ["latest_snapshot", "topology_class"]
            statements.insert_snapshot_for_server(snapshot, document, server, update_fields)
        snapshot.document = report.document  # as read back
        if new_class:  # its document is the snapshot's: copied in the database, not sent again
            TopologyClass.objects.filter(pk=topology_class.pk).update(
                document=Subquery(Snapshot.objects.filter(pk=snapshot.pk).values("document"))
            )
        _store_report_benchmarks(server, snapshot, report)
        drifted = refresh_sku_drift(sku_name)
        stored = NewSnapshot(
            server,
            snapshot,
            new_server=found is None,
            new_class=new_class,
            class_learned=class_learned,
            # A server made now has no runs but the report's; one that moved class takes its
            # runs along (from no class, for runs uploaded before its first snapshot).
            runs_changed=bool(report.benchmarks)
            or (found is not None and newest and class_before != topology_class.pk),
        )
        for snapshot_hook in _AFTER_SNAPSHOT:
            snapshot_hook(stored)
        # The server's documents are written by its health evaluation, which the hooks asked
        # for; its SKU siblings' (a drift finding) are written now. A server made now has no
        # documents to drop, but every kept read of the fleet is out of date.
        if found is None:
            fleet_changed()
        else:
            changes.servers_outdated([server.pk])
        changes.servers_changed([pk for pk in drifted if pk != server.pk])
    return Ingested(server=server, created=True, snapshot=snapshot)


def _store_report_benchmarks(server: Server, snapshot: Snapshot, report: _Report) -> None:
    """The report's benchmarks in one insert; one this server already has stays as it is
    (linked to the snapshot it came with), as do repeats within the report."""
    if not report.benchmarks:
        return
    Benchmark.objects.bulk_create(
        [
            Benchmark(
                server=server,
                content_sha256=hashlib.sha256(item.text.encode()).hexdigest(),
                **_benchmark_fields(
                    snapshot,
                    item.kind,
                    item.text,
                    parsed,
                    report.source,
                    report.uploaded_by,
                    report.captured_at,
                    report.topology,
                ),
            )
            for item, parsed in zip(report.benchmarks, report.parsed_benchmarks, strict=True)
        ],
        ignore_conflicts=True,
    )


def _duplicate(hostname: str, digest: str) -> tuple[Any, ...] | None:
    found = Snapshot.objects.filter(server__hostname=hostname, content_sha256=digest)
    return found.values_list(
        "id", "server_id", "document__warnings", "server__last_seen_at"
    ).first()


def _stored_duplicate(
    hostname: str, digest: str, token: CollectorToken | None = None
) -> tuple[Ingested | None, bool]:
    """The stored snapshot with this content for this host (its id, server and the reader's
    warnings, what the answer shows), found in one query, its server marked seen, and `token`
    marked used if it is due (with the audit event of its use); None when the report is new.
    Second: whether no server of this host was stored (known on PostgreSQL only; False
    elsewhere)."""
    now = timezone.now()
    if token is not None and not needs_mark(token, now):
        token = None
    if connection.vendor == "postgresql":
        found, first_of_host = statements.mark_duplicate(hostname, digest, now, token)
        if token is not None:
            token.last_used_at = now
        if found is None:
            return None, first_of_host
        server_id, snapshot_id, warnings, seen_before = found
    else:
        mark_used(token)
        if token is not None:
            access.record_use(token)
        row = _duplicate(hostname, digest)
        if row is None:
            return None, False
        snapshot_id, server_id, warnings, seen_before = row
        Server.objects.filter(pk=server_id).update(last_seen_at=now)
    server_seen(seen_before, now)  # kept reads show its last_seen_at
    server = Server.from_db(
        DEFAULT_DB_ALIAS, ["id", "hostname", "last_seen_at"], [server_id, hostname, now]
    )
    snapshot = Snapshot.from_db(DEFAULT_DB_ALIAS, ["id", "server_id"], [snapshot_id, server_id])
    warned = tuple(warnings or ())
    return Ingested(server=server, created=False, snapshot=snapshot, warnings=warned), False


def ingest_benchmark(
    *,
    hostname: str,
    kind: str,
    text: str,
    captured_at: datetime,
    source: str,
    uploaded_by: User | None = None,
) -> Ingested:
    """Store one benchmark output for a server, linked to its current snapshot if it has one."""
    parsed = _parse_benchmark(None, BenchmarkInput(kind, text))
    digest = hashlib.sha256(text.encode()).hexdigest()
    with transaction.atomic():
        # The previous snapshot comes with the server: one query, not two.
        server, _ = Server.objects.select_related("latest_snapshot").get_or_create(
            hostname=hostname
        )
        existing = Benchmark.objects.filter(server=server, content_sha256=digest).first()
        if existing is not None:
            return Ingested(server=server, created=False, benchmark=existing)
        benchmark, created = _store_benchmark(
            server, server.latest_snapshot, kind, text, parsed, source, uploaded_by, captured_at
        )
        server.last_seen_at = timezone.now()
        server.save(update_fields=["last_seen_at"])
        if created:  # the same output uploaded twice at once is stored, and judged, once
            _learn_gpu_model(server.latest_snapshot, parsed)
            for benchmark_hook in _AFTER_BENCHMARK:
                benchmark_hook(server, benchmark)
        changes.servers_changed([server.pk])
    return Ingested(server=server, created=created, benchmark=benchmark)


class UnknownServer(LookupError):
    """An upload names a server that does not exist and did not ask to create it."""

    def __init__(self, hostname: str, suggestion: str | None = None) -> None:
        mean = f"did you mean {suggestion!r}? " if suggestion else "Check the spelling, or "
        ask = "ask" if suggestion is None else "or ask"
        super().__init__(
            f"No server named {hostname!r}: {mean}{ask} for a new server "
            '(the upload page\'s "new server" box, `create: true` in the API).'
        )
        self.hostname = hostname
        self.suggestion = suggestion


def ingest_upload(
    *,
    hostname: str,
    text: str,
    uploaded_by: User | None,
    gpu_model_hint: str = "",
    create: bool = False,
) -> Ingested:
    """A file a person hands in: topology, nccl-tests, p2p or nvbandwidth output, or an NCCL
    topology XML, told apart by the core. An XML for a server whose latest capture is a
    `topo -m` matrix is stored merged with that matrix. A mistyped hostname must not become a
    new server: a new one needs `create`."""
    kind = detect_format(text)
    if kind == "ibnetdiscover":
        raise ParseError(
            "an ibnetdiscover capture describes a fabric, not one server: upload it as a fabric "
            "(the Fabrics page or POST /api/v1/fabrics/)"
        )
    if not create and not Server.objects.filter(hostname=hostname).exists():
        raise UnknownServer(hostname, hostname_match(hostname)["suggestion"])
    now = timezone.now()
    if kind == "nccl-topology-xml":
        latest = (  # what the merge reads, not the stored document (10 MB at 576 GPUs)
            Snapshot.objects.filter(server__hostname=hostname)
            .only("raw_text", "nvml", "host", "gpu_model")
            .order_by("-captured_at", "-id")
            .first()
        )
        if latest is not None and detect_format(latest.raw_text) == "topology":
            return ingest_report(
                hostname=hostname,
                topo_text=latest.raw_text,
                nccl_xml=text,
                captured_at=now,
                source=Source.UPLOAD,
                uploaded_by=uploaded_by,
                nvml=latest.nvml,
                host=latest.host,
                gpu_model_hint=gpu_model_hint or latest.gpu_model,
            )
    if kind in ("topology", "nccl-topology-xml"):
        return ingest_report(
            hostname=hostname,
            topo_text=text,
            captured_at=now,
            source=Source.UPLOAD,
            uploaded_by=uploaded_by,
            gpu_model_hint=gpu_model_hint,
        )
    return ingest_benchmark(
        hostname=hostname,
        kind=kind,
        text=text,
        captured_at=now,
        source=Source.UPLOAD,
        uploaded_by=uploaded_by,
    )


def _one_ingest_per_host_at_a_time(hostname: str) -> None:
    """Which snapshot is current is decided from the previous one's capture time: two reports
    of one host stored at once would each compare against the same previous one, and the
    later commit would win whatever its capture time. A transaction-scoped advisory lock per
    host, taken first (before the SKU's lock and any row), makes each read what the one
    before it committed. SQLite's IMMEDIATE transactions already run one at a time."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", [f"host:{hostname}"])


def _one_ingest_per_sku_at_a_time(sku_name: str) -> None:
    """Ingests of one SKU re-flag each other's servers (refresh_sku_drift) while each holds its
    own server's row: two at once can lock those rows in opposite orders and deadlock. A
    transaction-scoped advisory lock per SKU, taken before any server row, orders them.
    SQLite needs none: its IMMEDIATE transactions already run one at a time."""
    if sku_name and connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", [f"sku:{sku_name}"])


def _parse_benchmark(index: int | None, item: BenchmarkInput) -> ParsedBenchmark:
    where = f"benchmarks[{index}] ({item.kind}): " if index is not None else ""
    if item.kind not in BENCHMARK_KINDS:
        raise ParseError(f"{where}unknown benchmark kind; expected one of {list(BENCHMARK_KINDS)}")
    limits.check_benchmark_text(item.text, where)
    try:
        parsed = parse_text(item.text, expected=item.kind)
    except ParseError as exc:
        raise ParseError(where + exc.message, exc.line) from exc
    assert isinstance(parsed, NcclRun | P2PResult | NvbandwidthRun)
    limits.check_benchmark(parsed, where)
    return parsed


def _store_benchmark(
    server: Server,
    snapshot: Snapshot | None,
    kind: str,
    text: str,
    parsed: ParsedBenchmark,
    source: str,
    uploaded_by: User | None,
    captured_at: datetime,
) -> tuple[Benchmark, bool]:
    return Benchmark.objects.get_or_create(
        server=server,
        content_sha256=hashlib.sha256(text.encode()).hexdigest(),
        defaults=_benchmark_fields(snapshot, kind, text, parsed, source, uploaded_by, captured_at),
    )


def _benchmark_fields(
    snapshot: Snapshot | None,
    kind: str,
    text: str,
    parsed: ParsedBenchmark,
    source: str,
    uploaded_by: User | None,
    captured_at: datetime,
    topology: Topology | None = None,
) -> dict[str, Any]:
    """A parsed benchmark output's row, less its server and digest: calibrated on the
    topology it ran on."""
    if isinstance(parsed, NcclRun):
        extra: dict[str, Any] = {
            "collective": (parsed.collective or "")[:64],  # the column; the document keeps all
            "avg_busbw_gbps": parsed.avg_busbw_gbps,
            "gpu_count": parsed.n_gpus,
        }
    elif isinstance(parsed, NvbandwidthRun):
        extra = {"gpu_count": len(to_p2p(parsed).gpus) or None}
    else:
        extra = {"gpu_count": len(parsed.gpus)}
    return {
        "calibration": calibration_document(snapshot, parsed, topology),
        "snapshot": snapshot,
        "kind": kind,
        "raw_text": text,
        "document": parsed.to_document(),
        "source": source,
        "uploaded_by": uploaded_by,
        "captured_at": captured_at,
        **extra,
    }


def calibration_document(
    snapshot: Snapshot | None, parsed: ParsedBenchmark, topology: Topology | None = None
) -> dict[str, Any] | None:
    """The run reduced to what the cost model takes from it (a Calibration: per-class scale
    and latency), fitted once on the topology it ran on, so that no request parses the run
    again; {"skipped": why} when it cannot calibrate; None without a topology to fit on.
    Stamped with the cost model's version: a newer model fits it again (refit_calibrations)."""
    if snapshot is None:
        return None
    if isinstance(parsed, NvbandwidthRun):
        parsed = to_p2p(parsed)
    stamp = {"cost_model_version": COST_MODEL_VERSION}
    if snapshot.gpu_count > settings.TOPOWEB_MAX_QUERY_GPUS:
        return {"skipped": "no cost questions are answered for this many GPUs"} | stamp
    try:
        base = build_model(
            topology or snapshot.to_domain(),
            snapshot.gpu_model or None,
            cpu_model=snapshot.cpu_model or None,
        )
        if isinstance(parsed, NcclRun):
            calibration = calibrate_from_nccl(base, parsed)
        else:
            calibration = calibrate_from_p2p(base, parsed)
    except ValueError as exc:
        return {"skipped": str(exc)} | stamp
    return calibration.to_document() | stamp


def refit_calibrations(benchmarks: QuerySet[Benchmark]) -> int:
    """Fit again the runs whose stored calibration an older cost model fitted (the analysis
    worker calls it for a class before calibrating its analysis, so no request fits one and no
    answer mixes two models' fits). Returns how many were fitted again."""
    older = ~Q(calibration__has_key="cost_model_version") | ~Q(
        calibration__cost_model_version=COST_MODEL_VERSION
    )
    stale = benchmarks.exclude(calibration=None).filter(older).select_related("snapshot")
    refitted = 0
    for benchmark in stale:
        document = calibration_document(benchmark.snapshot, benchmark.to_domain())
        refitted += Benchmark.objects.filter(pk=benchmark.pk).update(calibration=document)
    if refitted:
        fleet_changed()  # kept questions were answered with the older fits
    return refitted


def _gpu_model(
    facts: NvmlFacts | None, hint: str, benchmarks: Sequence[ParsedBenchmark]
) -> tuple[str, dict[str, Any]]:
    """The GPU model, and what the GPUs are where they differ (Snapshot.gpu_models): NVML's
    names, then those the capture's own benchmarks print, then a person's hint, which may
    write a mix ("6x A + 1x B"); never a SKU or platform name. A mix is priced on its
    smallest-memory, slowest part (steptime.priced_model)."""
    named = [(list(facts.gpu_names), "nvml")] if facts is not None else []
    named += [(_benchmark_gpu_names(parsed), "benchmark") for parsed in benchmarks]
    names, source = next(((n, s) for n, s in named if n), ([], "uploader"))
    models = count_models(names) or models_from_text(hint)
    # Free text from the driver or a pasted file: cut to the column (TopologyClass's too).
    if len(models) < 2:
        return (models[0][0] if models else hint)[:200], {}
    mixed = {"models": [[name[:200], n] for name, n in models], "source": source}
    return priced_model([name for name, _ in models])[:200], mixed


def _benchmark_gpu_names(parsed: ParsedBenchmark) -> list[str]:
    if isinstance(parsed, NvbandwidthRun):
        parsed = to_p2p(parsed)
    if isinstance(parsed, P2PResult):
        return [g.name for g in parsed.gpus if g.name and g.name != "unknown"]
    return [r.name for r in parsed.ranks if r.name]


def _learn_gpu_model(snapshot: Snapshot | None, parsed: ParsedBenchmark) -> None:
    """A benchmark run on a snapshot that names no GPU model names it (the GPUs it printed)."""
    if snapshot is None or snapshot.gpu_model:
        return
    model, models = _gpu_model(None, "", [parsed])
    if not model:
        return
    Snapshot.objects.filter(pk=snapshot.pk, gpu_model="").update(gpu_model=model, gpu_models=models)
    TopologyClass.objects.filter(pk=snapshot.topology_class_id, gpu_model="").update(
        gpu_model=model
    )


def _sku_name(server: Server, host: dict[str, Any] | None) -> str:
    """An operator's `sku` label wins over the DMI product name the collector reports."""
    label = server.labels.get("sku") if isinstance(server.labels, dict) else None
    if label:
        return str(label)
    product = read_host(host).product_name
    if product:
        return product[:200]
    return server.sku_name


def _topology_class(
    report: _Report, sku_name: str, gpu_model: str, cpu_model: str, summary: str
) -> tuple[TopologyClass, bool, bool]:
    """The report's class, whether it is new (then its document is a placeholder until the
    caller copies the snapshot's into it, in the same transaction) and whether it learned a
    GPU or CPU model it lacked from the report."""
    topology, document = report.topology, report.document
    fingerprint = fingerprint_of_wiring(topology, report.wiring)
    found = statements.topology_class_names(fingerprint)
    if found is not None:
        topology_class, created = found, False
    else:
        topology_class, created = TopologyClass.objects.get_or_create(
            fingerprint=fingerprint,
            defaults={
                "sku_name": sku_name,
                "document": {},
                "gpu_count": len(topology.gpus),
                "nic_count": len(topology.nics),
                "gpu_model": gpu_model,
                "cpu_model": cpu_model,
                "nvlink_summary": summary,
                "description": describe_links(topology),
            },
        )
        if created:
            topology_class.document = document  # the value, not the expression it was sent as
    # A class first seen through an anonymous upload learns its names from later reports.
    missing = {
        name: value
        for name, value in (
            ("sku_name", sku_name),
            ("gpu_model", gpu_model),
            ("cpu_model", cpu_model),
        )
        if value and not getattr(topology_class, name)
    }
    if not created and missing:
        for name, value in missing.items():
            setattr(topology_class, name, value)
        topology_class.save(update_fields=list(missing))
    return topology_class, created, not created and bool(missing.keys() & _PRICED_NAMES)


# The names of a class its analysis prices with (its SKU name is a label only).
_PRICED_NAMES = {"gpu_model", "cpu_model"}
