"""Typed shapes of the documents the analysis app serves: findings, cost tables, placement
documents and the stored analysis of a topology class. They describe (OpenAPI, so that
schemathesis checks every response) documents core.analysis already computed; the views
shape nothing here."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from topoweb.analysis.models import Analysis
from topoweb.core.health import KINDS, SEVERITIES


class CoreDocumentSerializer(serializers.Serializer):
    """The schema of a document the core computed: served as computed (a field the core adds
    is not silently dropped), described here field by field for OpenAPI and schemathesis."""

    def to_representation(self, instance: Any) -> Any:
        return instance


class FindingSerializer(serializers.Serializer):
    """core.health.Finding: one thing worth a look, where, why and what to do."""

    kind = serializers.ChoiceField(choices=list(KINDS))
    severity = serializers.ChoiceField(choices=list(SEVERITIES))
    devices = serializers.ListField(child=serializers.CharField(), help_text="device ids")
    evidence = serializers.DictField(help_text="what was measured or seen; keys vary by kind")
    advice = serializers.CharField(allow_blank=True)
    message = serializers.CharField()


class FindingGroupSerializer(serializers.Serializer):
    """core.health.groups.FindingGroup: one cause, with the findings (pairs) it explains."""

    cause = serializers.CharField(help_text="stable key: kind, severity and mechanism")
    kind = serializers.ChoiceField(choices=list(KINDS))
    severity = serializers.ChoiceField(choices=list(SEVERITIES))
    title = serializers.CharField(help_text="one sentence for the cause, with its count")
    count = serializers.IntegerField()
    pairs = serializers.ListField(
        child=serializers.ListField(child=serializers.CharField()),
        help_text="each member finding's devices (a GPU pair, or one device)",
    )
    devices = serializers.ListField(child=serializers.CharField())
    advice = serializers.CharField(allow_blank=True)
    findings = FindingSerializer(many=True)


# --- placement -------------------------------------------------------------------------------


class DimensionSerializer(serializers.Serializer):
    dimension = serializers.CharField()
    collective = serializers.CharField()
    bytes = serializers.IntegerField()
    count = serializers.IntegerField(help_text="per step")
    each_us = serializers.FloatField()
    total_us = serializers.FloatField()
    bottleneck = serializers.CharField()
    bottleneck_class = serializers.CharField(allow_null=True)


class LayoutSerializer(serializers.Serializer):
    tp = serializers.IntegerField()
    pp = serializers.IntegerField()
    dp = serializers.IntegerField()
    ep = serializers.IntegerField()


class LayoutAdviceSerializer(serializers.Serializer):
    """A placement as stored with an analysis (its assumption is stored once, with the
    hardware)."""

    layout = LayoutSerializer()
    model = serializers.CharField(help_text="the model shape's name")
    gpus = serializers.ListField(child=serializers.IntegerField(), help_text="the GPUs taken")
    predicted_step_time_us = serializers.FloatField(help_text="compute + exposed comm + bubble")
    naive_step_time_us = serializers.FloatField(help_text="GPU index order, TP fastest")
    breakdown = serializers.JSONField(
        help_text="compute_us, exposed_comm_us per dimension, dp_reduction_us, dp_hidden_us, "
        "bubble_us, micro_batches"
    )
    memory = serializers.JSONField(help_text="per GPU: weights, gradients, optimizer, activations")
    fits = serializers.BooleanField(help_text="fits in GPU memory")
    gpu = serializers.JSONField(help_text="peak TFLOP/s and memory used, with their source")
    uniform = serializers.BooleanField(help_text="every mapping of these GPUs costs the same")
    free = serializers.ListField(child=serializers.IntegerField())
    leftover = serializers.ListField(
        child=serializers.IntegerField(), help_text="free GPUs the job leaves"
    )
    leftover_busbw_gbps = serializers.FloatField()
    choice = serializers.CharField(
        allow_blank=True, help_text="why these GPUs, for a job smaller than the free set"
    )
    mapping = serializers.ListField(child=serializers.IntegerField(), help_text="GPU of each rank")
    groups = serializers.DictField(
        child=serializers.ListField(child=serializers.ListField(child=serializers.IntegerField())),
        help_text="tp/dp/pp/ep -> the GPU groups of that dimension",
    )
    predicted_step_comm_us = serializers.FloatField()
    naive_step_comm_us = serializers.FloatField(help_text="GPU index order, TP fastest")
    improvement = serializers.FloatField(help_text="fraction of the naive time saved")
    per_dimension = DimensionSerializer(many=True)
    search = serializers.CharField()
    calibrated = serializers.BooleanField()


class PlacementDocumentSerializer(LayoutAdviceSerializer):
    assumption = serializers.CharField()
    levers = serializers.ListField(
        child=serializers.CharField(),
        required=False,
        help_text="memory levers pulled, in practitioners' order, for the layout to fit",
    )
    assumed = serializers.ListField(
        child=serializers.CharField(),
        required=False,
        help_text="what was guessed rather than read: GPU model, generation, memory",
    )


# --- cost tables -----------------------------------------------------------------------------


class CostCurveSerializer(serializers.Serializer):
    """One collective on all GPUs, a value per message size of the tables' `sizes`."""

    time_us = serializers.ListField(child=serializers.FloatField())
    algbw_gbps = serializers.ListField(child=serializers.FloatField())
    busbw_gbps = serializers.ListField(child=serializers.FloatField())
    algorithm = serializers.ListField(child=serializers.CharField())
    bottleneck = serializers.CharField()
    bottleneck_class = serializers.CharField(allow_null=True)


class CostTablesSerializer(CoreDocumentSerializer):
    calibrated = serializers.BooleanField()
    sizes = serializers.ListField(child=serializers.IntegerField(), help_text="bytes")
    curve_gpus = serializers.ListField(child=serializers.IntegerField())
    curves = serializers.DictField(child=CostCurveSerializer(), help_text="by collective")
    groups = serializers.DictField(
        child=serializers.ListField(child=serializers.IntegerField()),
        help_text="group size -> the best-connected GPUs of that size",
    )
    table_columns = serializers.ListField(child=serializers.CharField())
    table = serializers.DictField(
        child=serializers.ListField(child=serializers.ListField(child=serializers.JSONField())),
        help_text="by collective: rows of `table_columns` per group size at 1 MiB, 64 MiB, 1 GiB",
    )


# --- the stored analysis ---------------------------------------------------------------------


class SummarySerializer(serializers.Serializer):
    gpu_model = serializers.CharField(allow_blank=True)
    gpu_count = serializers.IntegerField()
    nic_count = serializers.IntegerField()
    gpu_pair_classes = serializers.DictField(
        child=serializers.IntegerField(), help_text="link class -> GPU pairs, best first"
    )
    largest_nvlink_domain = serializers.IntegerField()
    nearest_nic_class = serializers.DictField(
        child=serializers.CharField(allow_null=True), help_text="GPU id -> class of nearest NIC"
    )
    description = serializers.CharField()


class StructureNodeSerializer(serializers.Serializer):
    id = serializers.CharField()
    kind = serializers.CharField()
    parent = serializers.CharField(allow_null=True)  # type: ignore[assignment]  # a field
    devices = serializers.ListField(child=serializers.CharField())
    label = serializers.CharField()  # type: ignore[assignment]  # a field, not Field.label


class NvlinkDomainSerializer(serializers.Serializer):
    gpus = serializers.ListField(child=serializers.CharField())
    fabric = serializers.CharField()
    port_links = serializers.IntegerField(allow_null=True)
    reason = serializers.CharField()


class StructureSerializer(serializers.Serializer):
    """The PCIe/NUMA tree and NVLink fabric recovered from the matrix (core.hierarchy)."""

    nodes = StructureNodeSerializer(many=True)
    parent = serializers.DictField(  # type: ignore[assignment]  # a field, not Field.parent
        child=serializers.CharField(allow_null=True)
    )
    nvlink_domains = NvlinkDomainSerializer(many=True)
    findings = serializers.ListField(child=serializers.DictField())


class GpuAffinitySerializer(serializers.Serializer):
    gpu = serializers.IntegerField()
    numa_node = serializers.CharField()
    cpu_list = serializers.CharField(allow_null=True)
    nearest_nics = serializers.ListField(child=serializers.CharField())
    nic_class = serializers.CharField(allow_null=True)
    warning = serializers.CharField(allow_null=True)


class AffinityDocumentSerializer(serializers.Serializer):
    gpus = GpuAffinitySerializer(many=True)
    cuda_visible_devices = serializers.CharField()
    binding_hints = serializers.ListField(child=serializers.CharField())


class P2PPredictionSerializer(serializers.Serializer):
    unidirectional_gbps = serializers.ListField(
        child=serializers.ListField(child=serializers.FloatField(allow_null=True))
    )
    bidirectional_gbps = serializers.ListField(
        child=serializers.ListField(child=serializers.FloatField(allow_null=True))
    )


class CalibrationSerializer(serializers.Serializer):
    applied = serializers.BooleanField()
    scale = serializers.DictField(child=serializers.FloatField(), help_text="by link class")
    alpha_us = serializers.DictField(child=serializers.FloatField())
    sources = serializers.ListField(child=serializers.JSONField())
    skipped = serializers.ListField(child=serializers.CharField())


class AnalysisResultSerializer(CoreDocumentSerializer):
    """core.analysis.Analysis.to_document(): everything computed for a topology class."""

    summary = SummarySerializer()
    warnings = serializers.ListField(child=serializers.CharField(), help_text="reader warnings")
    findings = FindingSerializer(many=True, help_text="what the wiring alone shows")
    structure = StructureSerializer()
    hardware = serializers.DictField(help_text="catalogue figures and the assumption made")
    costs = CostTablesSerializer()
    layouts = LayoutAdviceSerializer(many=True)
    affinity = AffinityDocumentSerializer()
    p2p_prediction = P2PPredictionSerializer()
    calibration = CalibrationSerializer()
    calibrated_costs = CostTablesSerializer(required=False, help_text="when runs were measured")
    calibrated_p2p_prediction = P2PPredictionSerializer(required=False)
    recommendations = serializers.DictField(
        child=serializers.JSONField(),
        required=False,
        help_text="per model preset: the recommended layout by step time, or why none fits",
    )
    step_assumptions = serializers.CharField(required=False)
    gpu_numbering = serializers.ChoiceField(
        choices=["canonical", "server"],
        required=False,
        help_text="GPU indices in the class's canonical order (stored) or this server's own",
    )


class AnalysisSerializer(serializers.Serializer):
    status = serializers.ChoiceField(choices=Analysis.Status.choices)
    cost_model_version = serializers.IntegerField()
    error = serializers.CharField(allow_blank=True)
    result = AnalysisResultSerializer(allow_null=True)
    finished_at = serializers.DateTimeField(allow_null=True)
