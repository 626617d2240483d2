"""What was computed for a topology class, under which cost-model version, and how far it got."""

from __future__ import annotations

from django.db import models

from topoweb.fleet.models import TopologyClass


class Analysis(models.Model):
    class Status(models.TextChoices):
        PENDING = "pending", "pending"
        RUNNING = "running", "running"
        DONE = "done", "done"
        FAILED = "failed", "failed"

    topology_class = models.ForeignKey(
        TopologyClass, on_delete=models.CASCADE, related_name="analyses"
    )
    cost_model_version = models.PositiveIntegerField()
    status = models.CharField(
        max_length=16, choices=Status.choices, default=Status.PENDING, db_index=True
    )
    error = models.TextField(blank=True)
    result = models.JSONField(null=True, blank=True)
    attempts = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    claimed_at = models.DateTimeField(null=True, blank=True)  # set by the worker that runs it
    # Renewed by the running worker every TOPOWEB_ANALYSIS_HEARTBEAT_S: a claim whose heartbeat
    # (or, before the first beat, whose claim) is older than TOPOWEB_STALE_CLAIM_AFTER_S lost
    # its worker, and is taken over.
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    duration_s = models.FloatField(null=True, blank=True)
    # The class's measured runs it was computed from (analysis.selectors.class_benchmark_set):
    # when they change (a run added or removed), the class is analysed again.
    benchmark_set = models.CharField(max_length=200, blank=True, default="")

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name_plural = "analyses"
        constraints = [
            # One analysis per class and version: a re-run overwrites, never duplicates.
            models.UniqueConstraint(
                fields=["topology_class", "cost_model_version"],
                name="analysis_one_per_class_and_version",
            )
        ]

    def __str__(self) -> str:
        return f"analysis {self.pk} of class {self.topology_class_id}: {self.status}"
