"""Typed shapes of the health documents (acceptance reports of a server and of a SKU), for
OpenAPI and schemathesis; the documents are served as core.health and the selectors made them."""

from __future__ import annotations

from rest_framework import serializers

from topoweb.analysis.serializers import (
    CoreDocumentSerializer,
    FindingGroupSerializer,
    FindingSerializer,
)

VERDICTS = ("pass", "fail", "incomplete", "pending")
ROW_STATUSES = ("ok", "below", "not measured", "no expectation", "not applicable")


class ThresholdsSerializer(serializers.Serializer):
    bandwidth_ratio = serializers.FloatField()
    sku_median_ratio = serializers.FloatField()
    large_message_bytes = serializers.IntegerField()
    p2p_min_gain = serializers.FloatField()


class AcceptanceRowSerializer(serializers.Serializer):
    """One figure compared: a P2P direction (`class` is its link class) or an nccl-tests
    busbw (`collective`, `ranks`)."""

    figure = serializers.CharField()
    kind = serializers.ChoiceField(choices=["p2p", "busbw"])
    devices = serializers.ListField(child=serializers.CharField())
    collective = serializers.CharField(required=False)
    ranks = serializers.IntegerField(required=False)
    measured_gbps = serializers.FloatField(allow_null=True)
    expected_gbps = serializers.FloatField(allow_null=True)
    ratio = serializers.FloatField(allow_null=True)
    sku_median_gbps = serializers.FloatField(allow_null=True)
    median_ratio = serializers.FloatField(allow_null=True)
    status = serializers.ChoiceField(choices=list(ROW_STATUSES))
    note = serializers.CharField(
        required=False,
        allow_blank=True,
        help_text="Why a figure is shown but not judged (e.g. a one-GPU collective moves no data)",
    )


# "class" is a Python keyword: declared after the class body.
AcceptanceRowSerializer._declared_fields["class"] = serializers.CharField(
    required=False, help_text="link class of a p2p row"
)


class NotMeasuredSerializer(serializers.Serializer):
    kind = serializers.ChoiceField(choices=["p2p", "busbw"])
    what = serializers.CharField(help_text="link class or figure")
    count = serializers.IntegerField()
    expected_gbps = serializers.FloatField(allow_null=True)
    pairs = serializers.ListField(child=serializers.CharField(), required=False)
    pairs_left_out = serializers.IntegerField(
        required=False, help_text="Pairs of this group not named (a long list is cut)"
    )


class AcceptanceSummarySerializer(serializers.Serializer):
    critical = serializers.IntegerField()
    warning = serializers.IntegerField()
    info = serializers.IntegerField()
    compared = serializers.IntegerField()
    below = serializers.IntegerField()
    not_measured = serializers.IntegerField()


class AcceptanceSerializer(CoreDocumentSerializer):
    """A server's acceptance report as last computed; `stale` when it predates the server's
    latest snapshot or its SKU's expectations (whatever changed queued a re-evaluation), verdict
    "pending" before the first evaluation."""

    hostname = serializers.CharField()
    sku = serializers.CharField(allow_blank=True)
    verdict = serializers.ChoiceField(choices=list(VERDICTS))
    reasons = serializers.ListField(child=serializers.CharField())
    basis = serializers.CharField(allow_blank=True)
    thresholds = ThresholdsSerializer()
    rows = AcceptanceRowSerializer(many=True)
    rows_left_out = serializers.DictField(
        required=False,
        help_text="count and note: rows not listed on a large server (unmeasured figures are "
        "counted under not_measured)",
    )
    not_measured = NotMeasuredSerializer(many=True)
    findings = FindingSerializer(many=True)
    groups = FindingGroupSerializer(
        many=True, help_text="The findings grouped by cause, most severe first, with their pairs"
    )
    summary = AcceptanceSummarySerializer()
    expectation_version = serializers.IntegerField(allow_null=True)
    computed_at = serializers.DateTimeField(allow_null=True)
    stale = serializers.BooleanField()


class SkuMemberSerializer(serializers.Serializer):
    hostname = serializers.CharField()
    verdict = serializers.ChoiceField(choices=list(VERDICTS), allow_null=True)
    critical = serializers.IntegerField(allow_null=True)
    warning = serializers.IntegerField(allow_null=True)
    computed_at = serializers.DateTimeField(allow_null=True)


class FigureSpreadSerializer(serializers.Serializer):
    figure = serializers.CharField()
    kind = serializers.ChoiceField(choices=["p2p", "busbw"])
    key = serializers.ListField(
        child=serializers.JSONField(), help_text="[src, dst] GPU indices or [collective, ranks]"
    )
    values = serializers.DictField(child=serializers.FloatField(), help_text="by hostname")
    median_gbps = serializers.FloatField()
    min_gbps = serializers.FloatField()
    max_gbps = serializers.FloatField()
    outliers = serializers.ListField(child=serializers.CharField())


class SkuAcceptanceSerializer(CoreDocumentSerializer):
    sku = serializers.CharField()
    expectation_version = serializers.IntegerField(allow_null=True)
    thresholds = ThresholdsSerializer()
    servers = SkuMemberSerializer(many=True)
    distribution = FigureSpreadSerializer(many=True)
