"""Tables of the health checks: what staff expect of a SKU (versioned), and the findings and
acceptance report last computed for each server. Logic lives in services.py and core.health."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from topoweb.core.health import KINDS, SEVERITIES, Expectations, Thresholds, expectations_by_class
from topoweb.core.model import Topology
from topoweb.fleet.models import Server, Snapshot

_DEFAULTS = Thresholds()


class SkuExpectation(models.Model):
    """Thresholds and expected figures for the servers of one SKU, edited by staff. Every
    change bumps `version`; each server's health record keeps the version (and figures) it was
    judged by."""

    sku_name = models.CharField(max_length=200, unique=True)
    version = models.PositiveIntegerField(default=1, editable=False)
    bandwidth_ratio = models.FloatField(
        default=_DEFAULTS.bandwidth_ratio,
        help_text="Measured under this fraction of expected: a finding.",
    )
    sku_median_ratio = models.FloatField(
        default=_DEFAULTS.sku_median_ratio,
        help_text="Measured under this fraction of the SKU median: a finding.",
    )
    large_message_bytes = models.BigIntegerField(
        default=_DEFAULTS.large_message_bytes,
        help_text="nccl-tests rows from this size on are the plateau.",
    )
    p2p_min_gain = models.FloatField(
        default=_DEFAULTS.p2p_min_gain,
        help_text="P2P=Enabled must beat P2P=Disabled by more than this factor.",
    )
    p2p_gbps_by_class = models.JSONField(
        default=dict,
        blank=True,
        help_text='P2P GB/s per direction by class: {"NV18": 370}',
    )
    busbw_gbps = models.JSONField(
        default=dict,
        blank=True,
        help_text='busbw GB/s over all GPUs: {"all_reduce": 360}',
    )
    notes = models.TextField(blank=True)
    updated_at = models.DateTimeField(auto_now=True)
    updated_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )

    class Meta:
        ordering = ["sku_name"]

    def __str__(self) -> str:
        return f"{self.sku_name} v{self.version}"

    def thresholds(self) -> Thresholds:
        return Thresholds(
            bandwidth_ratio=self.bandwidth_ratio,
            sku_median_ratio=self.sku_median_ratio,
            large_message_bytes=self.large_message_bytes,
            p2p_min_gain=self.p2p_min_gain,
        )

    def to_domain(self, topology: Topology) -> Expectations:
        """Staff's figures alone (services fill the rest from the cost model)."""
        return expectations_by_class(
            topology,
            {str(k): float(v) for k, v in (self.p2p_gbps_by_class or {}).items()},
            {str(k): float(v) for k, v in (self.busbw_gbps or {}).items()},
            self.thresholds(),
            basis=f"SKU {self.sku_name} expectations v{self.version}",
        )


class ServerHealth(models.Model):
    """A server's assessment: the latest evaluation of one server (replaced, never appended),
    computed by the health worker from everything it depends on, and read as stored by every
    page, export and API answer about the server (no request builds a cost model).

    `requested_at` later than `computed_at` means an input changed since (a report, a run, a
    sibling's figures, the class analysis): the stored one is served marked `stale` while the
    queued evaluation runs. `computed_at` is when the worker began reading its inputs, so an
    input changed while it ran keeps it stale."""

    server = models.OneToOneField(Server, on_delete=models.CASCADE, related_name="health")
    snapshot = models.ForeignKey(Snapshot, null=True, on_delete=models.SET_NULL, related_name="+")
    computed_at = models.DateTimeField()
    expectation_version = models.PositiveIntegerField(null=True, blank=True)
    expectations = models.JSONField(null=True, blank=True)  # the figures it was judged by
    acceptance = models.JSONField()  # core.health.acceptance_report
    # The page-shaped document (health.assessment.ASSESSMENT_KEYS), stored as JSON text: a
    # page reads it as bytes, never decoding it.
    document = models.TextField(default="{}")
    requested_at = models.DateTimeField(null=True, blank=True)
    cost_model_version = models.PositiveIntegerField(null=True, blank=True)
    critical_count = models.PositiveIntegerField(default=0, db_index=True)
    warning_count = models.PositiveIntegerField(default=0)
    # core.health.server_gauges: what /metrics says of this server (GPUs, bandwidth figures).
    gauges = models.JSONField(null=True, blank=True)

    def __str__(self) -> str:
        return f"health of {self.server_id} at {self.computed_at:%Y-%m-%dT%H:%M}"


class ServerDocument(models.Model):
    """What the API serves about a server, stored as the JSON text it is served as: its row in
    the server list (`summary`) and its detail (`detail`), each written by health.documents
    whenever something it shows changes, and read as bytes (no serializer, no model objects).

    Left out, filled in when served: `last_seen_at` (every duplicate report moves it; in the
    list it is the row's last key), and in the detail the latest snapshot's stored texts
    (`document`, `raw_text`, `nvml`, `host`, null here) and the class analysis (kept per
    analysis version, api.reads)."""

    server = models.OneToOneField(
        Server, primary_key=True, on_delete=models.CASCADE, related_name="documents"
    )
    summary = models.TextField()
    detail = models.TextField()
    written_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"documents of {self.server_id}"


class HealthFinding(models.Model):
    """One finding of a server's latest evaluation; a row each so the fleet list filters on it."""

    server = models.ForeignKey(Server, on_delete=models.CASCADE, related_name="health_findings")
    kind = models.CharField(max_length=40, choices=[(k, k) for k in KINDS], db_index=True)
    severity = models.CharField(max_length=16, choices=[(s, s) for s in SEVERITIES], db_index=True)
    devices = models.JSONField(default=list)
    evidence = models.JSONField(default=dict)
    advice = models.TextField(blank=True)
    message = models.TextField()

    class Meta:
        ordering = ["server_id", "id"]

    def __str__(self) -> str:
        return f"{self.kind} ({self.severity}) on {self.server_id}"

    def to_document(self) -> dict[str, object]:
        return {
            "kind": self.kind,
            "severity": self.severity,
            "devices": self.devices,
            "evidence": self.evidence,
            "advice": self.advice,
            "message": self.message,
        }
