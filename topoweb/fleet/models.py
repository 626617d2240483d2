"""Tables of the fleet. Thin on purpose: writes live in services.py, reads in selectors.py, and
the parsed topology stays a JSON document that `to_domain()` turns back into core objects."""

from __future__ import annotations

import hashlib
from typing import ClassVar

from django.conf import settings
from django.db import models
from django.utils.crypto import constant_time_compare
from rest_framework_api_key.crypto import KeyGenerator, concatenate, split
from rest_framework_api_key.models import AbstractAPIKey, APIKeyManager

from topoweb.core.formats.nvbandwidth import to_p2p
from topoweb.core.model import NcclRun, NvbandwidthRun, P2PResult, Topology, from_document


class Source(models.TextChoices):
    COLLECTOR = "collector", "collector"
    UPLOAD = "upload", "upload"


class TopologyClass(models.Model):
    """Every server wired the same way (up to device renumbering) shares one of these."""

    fingerprint = models.CharField(max_length=64, unique=True)
    sku_name = models.CharField(max_length=200, blank=True, db_index=True)
    document = models.JSONField()  # the first topology seen with this fingerprint
    gpu_count = models.PositiveIntegerField(default=0)
    nic_count = models.PositiveIntegerField(default=0)
    gpu_model = models.CharField(max_length=200, blank=True)
    # The host CPU of the report that made the class (learned later, as gpu_model, when it
    # named none): its socket link prices the class analysis.
    cpu_model = models.CharField(max_length=200, blank=True, default="")
    nvlink_summary = models.CharField(max_length=200, blank=True)
    description = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["sku_name", "id"]
        verbose_name_plural = "topology classes"

    def __str__(self) -> str:
        return f"{self.sku_name or 'unnamed'} ({self.fingerprint[:12]})"

    def to_domain(self) -> Topology:
        return Topology.from_document(self.document)


class Server(models.Model):
    hostname = models.CharField(max_length=253, unique=True)
    labels = models.JSONField(default=dict, blank=True)  # rack, cluster, sku, ...
    sku_name = models.CharField(max_length=200, blank=True, db_index=True)
    topology_class = models.ForeignKey(
        TopologyClass, null=True, blank=True, on_delete=models.SET_NULL, related_name="servers"
    )
    # The newest snapshot, kept here so that lists filter and sort without a subquery.
    latest_snapshot = models.ForeignKey(
        "Snapshot", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # Wired differently from the usual topology class of its SKU: the one finding this app keeps
    # as a column, so that the health filter stays a plain WHERE clause.
    differs_from_sku = models.BooleanField(default=False, db_index=True)
    created_at = models.DateTimeField(auto_now_add=True)
    last_seen_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["hostname"]

    def __str__(self) -> str:
        return self.hostname


class Snapshot(models.Model):
    """One report of a server's wiring: the raw text verbatim and what the core read from it."""

    server = models.ForeignKey(Server, on_delete=models.CASCADE, related_name="snapshots")
    content_sha256 = models.CharField(max_length=64)
    # core.fingerprint.wiring_sha256 of `document`: servers wired and numbered alike share a
    # cost model by it, whatever else their reports hold. Empty only on a row stored before
    # it existed and not yet filled in (its model is then keyed by its content).
    wiring_sha256 = models.CharField(max_length=64, blank=True, default="")
    raw_text = models.TextField()
    # The NCCL topology XML sent with the matrix (`document` is then the merge of both).
    nccl_xml = models.TextField(blank=True, default="")
    document = models.JSONField()
    source = models.CharField(max_length=16, choices=Source.choices)
    uploaded_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    collector_version = models.CharField(max_length=64, blank=True)
    captured_at = models.DateTimeField()
    received_at = models.DateTimeField(auto_now_add=True)
    nvml = models.JSONField(null=True, blank=True)
    host = models.JSONField(null=True, blank=True)
    topology_class = models.ForeignKey(
        TopologyClass, on_delete=models.PROTECT, related_name="snapshots"
    )
    gpu_count = models.PositiveIntegerField(default=0, db_index=True)
    nic_count = models.PositiveIntegerField(default=0)
    # The one model advice prices (fleet.services._gpu_model): where the GPUs differ, the
    # smallest-memory, slowest of them, and `gpu_models` says what they are:
    # {"models": [[name, count], ...], "source": "nvml" | "benchmark" | "uploader"}, empty when
    # every GPU is one model or no per-GPU names were given.
    gpu_model = models.CharField(max_length=200, blank=True, db_index=True)
    gpu_models = models.JSONField(default=dict, blank=True)
    # The host's CPU model as the collector read it (/proc/cpuinfo, `host.cpu_model`): its
    # socket link (core.catalogue.socket_link_of_cpu) prices the server's model, read without
    # loading the host facts ("" when none was sent).
    cpu_model = models.CharField(max_length=200, blank=True, default="")
    # core.formats.nvml.smallest_gpu_memory of `nvml`: what a model must fit into on each GPU,
    # read by placement questions without loading the facts (None when none was sent).
    gpu_memory_bytes = models.BigIntegerField(null=True, blank=True)
    # core.formats.nvml.nvlink_domain of `nvml`: servers with the same one share an NVLink
    # domain (NVL72), so job placement may span them with TP ("" for none).
    nvlink_domain = models.CharField(max_length=100, blank=True, default="")
    has_nvlink = models.BooleanField(default=False)
    nvlink_summary = models.CharField(max_length=200, blank=True)  # e.g. "NV18 x28"
    warning_count = models.PositiveIntegerField(default=0)  # what the reader had to work around

    class Meta:
        ordering = ["-captured_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["server", "content_sha256"], name="snapshot_unique_content_per_server"
            )
        ]
        # Signed-in people upload only with this (staff grant it in the admin): an upload
        # becomes the host's current topology, so it is a write like a collector's.
        permissions = [("upload_files", "Can upload topology and benchmark files for any host")]

    def __str__(self) -> str:
        return f"{self.server_id}@{self.captured_at:%Y-%m-%dT%H:%M}"

    def to_domain(self) -> Topology:
        return Topology.from_document(self.document)


class SnapshotExport(models.Model):
    """One export of a snapshot as a file (NCCL XML, gres.conf, Kubernetes labels), drawn by
    the worker once per snapshot (fleet.drawings) and served as stored: drawing one reads the
    whole topology, seconds for the largest servers. Served only while `code` is the core's
    current version and `hostname` the server's name, which the file carries."""

    snapshot = models.ForeignKey(Snapshot, on_delete=models.CASCADE, related_name="exports")
    fmt = models.CharField(max_length=16)
    code = models.CharField(max_length=16)  # fleet.selectors.CORE_VERSION that drew it
    hostname = models.CharField(max_length=253)
    filename = models.CharField(max_length=120)
    content_type = models.CharField(max_length=64)
    body = models.TextField()
    warnings = models.JSONField(default=list)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["snapshot", "fmt"], name="snapshot_export_one_per_fmt")
        ]

    def __str__(self) -> str:
        return f"{self.fmt} of snapshot {self.snapshot_id}"


# The large columns of a server's latest snapshot and class, for reads of servers that leave
# them out (`.defer(*LARGE_COLUMNS)`) and load them on first use only.
LARGE_COLUMNS = (
    "latest_snapshot__raw_text",
    "latest_snapshot__document",
    "latest_snapshot__nvml",
    "latest_snapshot__host",
    "topology_class__document",
)


class Benchmark(models.Model):
    class Kind(models.TextChoices):
        NCCL = "nccl-tests", "nccl-tests"
        P2P = "p2p-bandwidth-latency", "p2p-bandwidth-latency"
        NVBANDWIDTH = "nvbandwidth", "nvbandwidth"

    server = models.ForeignKey(Server, on_delete=models.CASCADE, related_name="benchmarks")
    # The snapshot current when the benchmark was taken; none when it came before any topology.
    snapshot = models.ForeignKey(
        Snapshot, null=True, blank=True, on_delete=models.SET_NULL, related_name="benchmarks"
    )
    kind = models.CharField(max_length=32, choices=Kind.choices)
    content_sha256 = models.CharField(max_length=64)
    raw_text = models.TextField()
    document = models.JSONField()
    source = models.CharField(max_length=16, choices=Source.choices)
    uploaded_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    captured_at = models.DateTimeField()
    received_at = models.DateTimeField(auto_now_add=True)
    collective = models.CharField(max_length=64, blank=True)
    avg_busbw_gbps = models.FloatField(null=True, blank=True)
    gpu_count = models.PositiveIntegerField(null=True, blank=True)
    # What the cost model takes from this run, fitted once at ingest on the topology it ran
    # on (core.costs.Calibration's document, or {"skipped": why}); null for rows stored before
    # this existed, or before their server had a topology: those are fitted when read.
    calibration = models.JSONField(null=True, blank=True)

    class Meta:
        ordering = ["-captured_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["server", "content_sha256"], name="benchmark_unique_content_per_server"
            )
        ]

    def __str__(self) -> str:
        return f"{self.kind} on {self.server_id}"

    def to_domain(self) -> NcclRun | P2PResult:
        """nvbandwidth is read as the p2pBandwidthLatencyTest matrices it measures, so health
        and calibration take either."""
        parsed = from_document(self.document)
        assert not isinstance(parsed, Topology)
        return to_p2p(parsed) if isinstance(parsed, NvbandwidthRun) else parsed


# --- tokens ----------------------------------------------------------------------------------
# Both kinds are djangorestframework-api-key keys ("<prefix>.<secret>", SHA-512 of the whole key
# kept, looked up by the unique prefix): the package's manager makes and verifies them,
# fleet.selectors looks them up (through fleet.cached_tokens), fleet.authentication reads the
# Bearer header.

# Tokens issued before the package ("twc_" / "twa_" + 43 urlsafe characters, no ".") are
# configured on collectors and schedulers in the field, and only their SHA-256 was kept.
# Migration 0015 carried each over with its characters 5 to 12 as its prefix and
# "sha256$$<hex>" as its hashed key; such a token is presented to the package as
# "<prefix>.<token>" (legacy_key) and verified against that digest. Nothing else about them
# differs, and no new token is made so.
LEGACY_HASH = "sha256$$"


def legacy_key(key: str) -> str:
    """The key as the package reads it: a token of the old format prefixed with the prefix its
    row was given; any other key as it is."""
    return key if "." in key else concatenate(key[4:12], key)


class _KeyGenerator(KeyGenerator):
    def verify(self, key: str, hashed_key: str) -> bool:
        if hashed_key.startswith(LEGACY_HASH):
            digest = hashlib.sha256(split(key)[1].encode()).hexdigest()
            return constant_time_compare(hashed_key, LEGACY_HASH + digest)
        return super().verify(key, hashed_key)

    def using_preferred_hasher(self, hashed_key: str) -> bool:
        # Not upgraded on use: AbstractAPIKey.is_valid would save the whole row from the
        # request (from a copy kept in the cache, stale columns and all). A SHA-256 of 256
        # random bits needs no stronger hash.
        return hashed_key.startswith(LEGACY_HASH) or super().using_preferred_hasher(hashed_key)


class TokenManager(APIKeyManager):
    key_generator = _KeyGenerator()


class ApiTokenManager(TokenManager):
    def get_usable_keys(self) -> models.QuerySet[ApiToken]:
        # The user comes with the token, and only an active user's token is usable.
        return super().get_usable_keys().select_related("user").filter(user__is_active=True)


class CollectorToken(AbstractAPIKey):
    """A secret that lets one collector write reports for one hostname; only its hash is kept."""

    hostname = models.CharField(max_length=253, db_index=True)
    last_used_at = models.DateTimeField(null=True, blank=True)

    objects: ClassVar[TokenManager] = TokenManager()
    # The audit event of this request's use, when this request marks the token used: set by
    # the authentication, written by the report's first statement with the mark (one round
    # trip for both). Never stored with the row.
    unrecorded_use: AuditEvent | None = None

    class Meta(AbstractAPIKey.Meta):
        verbose_name = "collector token"
        verbose_name_plural = "collector tokens"

    def __str__(self) -> str:
        return f"{self.prefix}... for {self.hostname}"


class ApiToken(AbstractAPIKey):
    """A secret with which a scheduler or script reads the API as one user; hash only. A token
    made with the upload scope also uploads files, as a person with the upload permission."""

    class Scope(models.TextChoices):
        READ = "read", "read"
        UPLOAD = "upload", "read and upload"

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens"
    )
    scope = models.CharField(max_length=16, choices=Scope.choices, default=Scope.READ)
    last_used_at = models.DateTimeField(null=True, blank=True)

    objects: ClassVar[ApiTokenManager] = ApiTokenManager()

    class Meta(AbstractAPIKey.Meta):
        verbose_name = "API token"
        verbose_name_plural = "API tokens"

    def __str__(self) -> str:
        return f"{self.prefix}... for {self.user_id}"


class Fabric(models.Model):
    """An InfiniBand fabric between servers, known by the name its uploader gave it; its
    captures are its history (`ibnetdiscover` runs), the newest one its current state."""

    name = models.CharField(max_length=200, unique=True)
    latest_capture = models.ForeignKey(
        "FabricCapture", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class FabricCapture(models.Model):
    """One `ibnetdiscover` report of a fabric: the raw text verbatim, what the reader read, and
    what the worker made of it (`analysis`: switches with their tiers, hosts with their rails
    and servers, findings), keyed by the inputs it was made from (`analysis_key`)."""

    class Status(models.TextChoices):
        PENDING = "pending", "pending"
        DONE = "done", "done"
        FAILED = "failed", "failed"

    fabric = models.ForeignKey(Fabric, on_delete=models.CASCADE, related_name="captures")
    content_sha256 = models.CharField(max_length=64)
    raw_text = models.TextField()
    document = models.JSONField()  # core.formats.ibnet.IbnetCapture.to_document()
    source = models.CharField(max_length=16, choices=Source.choices)
    uploaded_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    hostname = models.CharField(max_length=253, blank=True)  # the collector's host, if one sent it
    captured_at = models.DateTimeField()
    received_at = models.DateTimeField(auto_now_add=True)
    switch_count = models.PositiveIntegerField(default=0)
    ca_count = models.PositiveIntegerField(default=0)
    link_count = models.PositiveIntegerField(default=0)
    warning_count = models.PositiveIntegerField(default=0)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    analysis = models.JSONField(null=True, blank=True)
    # The fabric page's drawing (core.fabric_layout.fabric_page), made with the analysis so
    # that a page of a large fabric reads one compact column.
    page = models.JSONField(null=True, blank=True)
    analysis_key = models.CharField(max_length=64, blank=True)
    attempts = models.PositiveIntegerField(default=0)
    error = models.TextField(blank=True)
    analysed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-captured_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["fabric", "content_sha256"], name="fabric_capture_unique_content"
            )
        ]

    def __str__(self) -> str:
        return f"{self.fabric_id}@{self.captured_at:%Y-%m-%dT%H:%M}"


class QueuedWork(models.Model):
    """One kind of worker task for one object (a server's health evaluation, a class's
    analysis): whether a message for it is queued now (at most one is), the attempts made
    since its input last changed, and, once it has had its tries, why it was given up.
    Written only through fleet.work."""

    kind = models.CharField(max_length=40)
    key = models.BigIntegerField()  # the id the task takes
    queued_at = models.DateTimeField(null=True, blank=True)  # a message is out since then
    attempts = models.PositiveIntegerField(default=0)
    gave_up = models.TextField(blank=True)  # why; empty while it may still run
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["kind", "key"], name="queued_work_one_per_object")
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.key}: {self.attempts} attempt(s)"


class AuditEvent(models.Model):
    """Who did what, when, from where: uploads, tokens made and used, sign-ins. Written by
    fleet.access; read by staff in the admin and as JSON lines (GET /api/v1/audit/)."""

    class Kind(models.TextChoices):
        UPLOAD = "upload", "upload"
        TOKEN_CREATED = "token_created", "token created"
        TOKEN_USED = "token_used", "token used"
        SIGN_IN = "sign_in", "sign-in"
        SIGN_IN_FAILED = "sign_in_failed", "failed sign-in"

    at = models.DateTimeField(db_index=True)
    kind = models.CharField(max_length=32, choices=Kind.choices, db_index=True)
    # A username, "collector <hostname>", "enrollment" or "system" (a management command).
    actor = models.CharField(max_length=300)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    # The peer's address as the web server saw it (the proxy's behind one; `detail` keeps the
    # X-Forwarded-For it sent).
    address = models.GenericIPAddressField(null=True, blank=True)
    subject = models.CharField(max_length=300, blank=True)  # a hostname or a token's prefix
    detail = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["-at", "-id"]

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%dT%H:%M:%S} {self.kind} by {self.actor}"

    def to_document(self) -> dict[str, object]:
        return {
            "at": self.at.isoformat(),
            "kind": self.kind,
            "actor": self.actor,
            "address": self.address,
            "subject": self.subject,
            "detail": self.detail,
        }
