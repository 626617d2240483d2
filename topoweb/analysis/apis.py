"""HTTP interface of the cost model and placement advice: collective cost, job placement, k-GPU
selection, affinity, stored cost tables and model presets. Each view validates, calls one
selector, and shapes the answer; the POSTs are questions, not writes."""

from __future__ import annotations

from typing import Any, cast

from django.http import HttpResponse
from drf_spectacular.utils import OpenApiResponse, extend_schema, extend_schema_field
from rest_framework import exceptions, serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from topoweb.analysis import questions, selectors
from topoweb.analysis.serializers import (
    AffinityDocumentSerializer,
    CostTablesSerializer,
    LayoutSerializer,
    PlacementDocumentSerializer,
)
from topoweb.config.answers import kept_read
from topoweb.config.api import (
    ERRORS,
    READ_ERRORS,
    ErrorSerializer,
    hostname_field,
    validated,
)
from topoweb.config.parsers import JSONParser
from topoweb.config.permissions import CanQuery
from topoweb.config.renderers import JSONRenderer
from topoweb.config.throttles import QueryThrottle
from topoweb.core.costs import COLLECTIVES, OPERATIONS
from topoweb.core.ledger import PRESETS, Layout
from topoweb.core.placement.serving import DEFAULT_CONCURRENCY, DTYPES
from topoweb.fleet.selectors import server_by_hostname

MAX_GPUS = 4096
MAX_BYTES = 1 << 40  # 1 TiB: past any message a collective is sent with
ALGORITHMS = ("ring", "tree", "nvls", "nvls_tree", "p2p", "pairwise", "copy")
QUERY_ERRORS = {
    **READ_ERRORS,
    400: OpenApiResponse(
        ErrorSerializer,
        description="Invalid request, or a question the server cannot answer (unknown GPU, "
        "a job that does not fit): the message says which",
    ),
    429: ERRORS[429],
}


class InvalidQuery(exceptions.APIException):
    status_code = 400
    default_code = "invalid_query"
    default_detail = "The question cannot be answered for this server."


def _answer(call: Any, *args: Any, **kwargs: Any) -> Any:
    """The core says "no" with ValueError (unknown GPU, impossible job): a 400 with its words."""
    try:
        return call(*args, **kwargs)
    except ValueError as exc:
        raise InvalidQuery(str(exc)) from exc


def _gpu_list(**kwargs: Any) -> serializers.ListField:
    return serializers.ListField(
        child=serializers.IntegerField(min_value=0, max_value=MAX_GPUS - 1),
        max_length=MAX_GPUS,
        **kwargs,
    )


class CostDocumentSerializer(serializers.Serializer):
    collective = serializers.CharField()
    gpus = serializers.ListField(child=serializers.IntegerField())
    bytes = serializers.IntegerField()
    time_us = serializers.FloatField()
    algbw_gbps = serializers.FloatField()
    busbw_gbps = serializers.FloatField(help_text="nccl-tests definition")
    algorithm = serializers.CharField()
    order = serializers.ListField(child=serializers.IntegerField(), help_text="ring/chain order")
    bandwidth_gbps_per_direction = serializers.FloatField()
    alpha_us = serializers.FloatField()
    bottleneck = serializers.CharField()
    bottleneck_class = serializers.CharField()
    calibrated = serializers.BooleanField(help_text="True when measured figures set the result")
    alternatives_us = serializers.DictField(child=serializers.FloatField())
    protocol = serializers.CharField(help_text="LL, LL128, Simple; copy for a peer copy")
    nodes = serializers.IntegerField()
    transports = serializers.ListField(
        child=serializers.CharField(), help_text="how each hop moves bytes"
    )
    assumed = serializers.ListField(
        child=serializers.CharField(), help_text="figures taken from defaults, not known"
    )


# --- cost of a collective ------------------------------------------------------------------


class CostApi(APIView):
    """Predicted time, algbw and busbw of one collective on given GPUs of a server."""

    permission_classes = [CanQuery]
    throttle_classes = [QueryThrottle]
    parser_classes = [JSONParser]

    class CostInputSerializer(serializers.Serializer):
        collective = serializers.ChoiceField(choices=OPERATIONS)
        gpus = _gpu_list(
            min_length=2,
            help_text="GPU indices as in the server's matrix; with nodes, 0..nodes x g - 1",
        )
        bytes = serializers.IntegerField(min_value=0, max_value=MAX_BYTES)
        algorithm = serializers.ChoiceField(choices=ALGORITHMS, required=False)
        bidirectional = serializers.BooleanField(default=False, help_text="copy: both ways")
        p2p = serializers.ChoiceField(choices=("auto", "on", "off"), default="auto")
        nodes = serializers.IntegerField(min_value=1, max_value=4096, default=1)
        nic_gbps = serializers.FloatField(min_value=0.001, max_value=1e5, required=False)
        nics_per_node = serializers.IntegerField(min_value=1, max_value=1024, required=False)
        nvlink_nodes = serializers.BooleanField(
            default=False, help_text="the nodes share one NVLink domain (NVL72 fabric clique)"
        )

    @extend_schema(
        operation_id="servers_cost_create",
        request=CostInputSerializer,
        responses={200: CostDocumentSerializer, **QUERY_ERRORS},
    )
    def post(self, request: Request, hostname: str) -> Response:
        q = validated(self.CostInputSerializer, request.data)
        server = selectors.server_for_questions(hostname)
        doc = _answer(
            questions.cost_of,
            server,
            q["collective"],
            q["gpus"],
            q["bytes"],
            q.get("algorithm"),
            p2p=q["p2p"],
            nodes=q["nodes"],
            nic_gbps=q.get("nic_gbps"),
            nics_per_node=q.get("nics_per_node"),
            nvlink_nodes=q["nvlink_nodes"],
            bidirectional=q["bidirectional"],
        )
        return Response(CostDocumentSerializer(doc).data)


# --- placement of a job --------------------------------------------------------------------


class ModelShapeSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=100)
    layers = serializers.IntegerField(min_value=1, max_value=100_000)
    hidden = serializers.IntegerField(min_value=1, max_value=1_000_000)
    seq = serializers.IntegerField(min_value=1, max_value=10_000_000)
    micro_batch = serializers.IntegerField(min_value=1, max_value=100_000)
    micro_batches = serializers.IntegerField(min_value=1, max_value=100_000)
    params = serializers.FloatField(min_value=1, max_value=1e15)
    bytes_per_elem = serializers.IntegerField(min_value=1, max_value=16, default=2)
    moe_layers = serializers.IntegerField(min_value=0, max_value=100_000, default=0)
    top_k = serializers.IntegerField(min_value=1, max_value=1024, default=1)
    sequence_parallel = serializers.BooleanField(default=False)
    global_batch = serializers.IntegerField(min_value=0, max_value=100_000_000, default=0)
    vocab = serializers.IntegerField(min_value=0, max_value=10_000_000, default=0)
    experts = serializers.IntegerField(min_value=0, max_value=100_000, default=0)
    expert_params = serializers.FloatField(min_value=0, max_value=1e15, default=0.0)
    heads = serializers.IntegerField(min_value=0, max_value=100_000, default=0)
    kv_heads = serializers.IntegerField(min_value=0, max_value=100_000, default=0)
    ffn_hidden = serializers.IntegerField(
        min_value=0,
        max_value=10_000_000,
        default=0,
        help_text="the MLP's hidden units (per expert), which TP must divide; 0: unknown",
    )
    context_window = serializers.IntegerField(
        min_value=0, max_value=100_000_000, default=0, help_text="tokens, as trained; 0: unknown"
    )


@extend_schema_field(
    {
        "oneOf": [
            {"type": "string", "enum": sorted(PRESETS), "description": "a preset's key"},
            {
                "type": "object",
                "description": "a full model shape (fields as in /api/v1/model-presets)",
                "properties": {
                    "name": {"type": "string", "maxLength": 100},
                    "layers": {"type": "integer", "minimum": 1, "maximum": 100000},
                    "hidden": {"type": "integer", "minimum": 1, "maximum": 1000000},
                    "seq": {"type": "integer", "minimum": 1, "maximum": 10000000},
                    "micro_batch": {"type": "integer", "minimum": 1, "maximum": 100000},
                    "micro_batches": {"type": "integer", "minimum": 1, "maximum": 100000},
                    "params": {"type": "number", "minimum": 1, "maximum": 1e15},
                    "bytes_per_elem": {"type": "integer", "minimum": 1, "maximum": 16},
                    "moe_layers": {"type": "integer", "minimum": 0, "maximum": 100000},
                    "top_k": {"type": "integer", "minimum": 1, "maximum": 1024},
                    "sequence_parallel": {"type": "boolean"},
                    "global_batch": {"type": "integer", "minimum": 0},
                    "vocab": {"type": "integer", "minimum": 0},
                    "experts": {"type": "integer", "minimum": 0},
                    "expert_params": {"type": "number", "minimum": 0},
                    "heads": {"type": "integer", "minimum": 0, "maximum": 100000},
                    "kv_heads": {"type": "integer", "minimum": 0, "maximum": 100000},
                    "ffn_hidden": {"type": "integer", "minimum": 0, "maximum": 10000000},
                    "context_window": {"type": "integer", "minimum": 0, "maximum": 100000000},
                },
                "required": [
                    "name",
                    "layers",
                    "hidden",
                    "seq",
                    "micro_batch",
                    "micro_batches",
                    "params",
                ],
            },
        ]
    }
)
class ModelField(serializers.Field):
    """A preset key, or a full shape validated by ModelShapeSerializer."""

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, str):
            if data not in PRESETS:
                raise serializers.ValidationError(
                    f"unknown model preset {data!r}; expected one of {', '.join(sorted(PRESETS))}"
                )
            return data
        if isinstance(data, dict):
            shape = ModelShapeSerializer(data=data)
            shape.is_valid(raise_exception=True)
            return dict(shape.validated_data)
        raise serializers.ValidationError("Send a preset's key or a model shape object.")

    def to_representation(self, value: Any) -> Any:
        return value


def _placement_json(doc: dict[str, Any]) -> bytes:
    """A placement as served: the form the selectors keep it in once computed."""
    return JSONRenderer().render(PlacementDocumentSerializer(doc).data)


def _json_response(body: bytes) -> HttpResponse:
    return HttpResponse(body, content_type="application/json")


# The parts of the placement questions' bodies (comments, not docstrings: the schema shows a
# docstring as the description of every body built from them).
class LayoutInputSerializer(serializers.Serializer):
    # A TP x PP x DP (x EP) layout.
    tp = serializers.IntegerField(min_value=1, max_value=MAX_GPUS)
    pp = serializers.IntegerField(min_value=1, max_value=MAX_GPUS)
    dp = serializers.IntegerField(min_value=1, max_value=MAX_GPUS)
    ep = serializers.IntegerField(min_value=1, max_value=MAX_GPUS, default=1)


class TrainingInputSerializer(serializers.Serializer):
    # The training job: the model, its batch, ZeRO and the server's free GPUs.
    free = _gpu_list(required=False, help_text="free GPU indices (default: all)")
    model = ModelField(required=False, help_text="preset key or shape (default llama-7b)")
    seq = serializers.IntegerField(min_value=1, max_value=10_000_000, required=False)
    global_batch = serializers.IntegerField(min_value=1, max_value=100_000_000, required=False)
    micro_batch = serializers.IntegerField(min_value=1, max_value=100_000, required=False)
    zero = serializers.IntegerField(min_value=0, max_value=3, default=1)


class PlacementApi(APIView):
    """Rank-to-GPU mapping of a TP x PP x DP (x EP) job that minimises per-step communication."""

    permission_classes = [CanQuery]
    throttle_classes = [QueryThrottle]
    parser_classes = [JSONParser]

    class PlacementInputSerializer(LayoutInputSerializer, TrainingInputSerializer):
        pass

    @extend_schema(
        operation_id="servers_placement_create",
        request=PlacementInputSerializer,
        responses={200: PlacementDocumentSerializer, **QUERY_ERRORS},
    )
    def post(self, request: Request, hostname: str) -> HttpResponse:
        q = validated(self.PlacementInputSerializer, request.data)
        body = kept_read(("placement", hostname, q), lambda: _placement(hostname, q))
        return _json_response(body)


def _placement(hostname: str, q: dict[str, Any]) -> bytes:
    server = selectors.server_for_questions(hostname)
    layout = _answer(Layout, q["tp"], q["pp"], q["dp"], q["ep"])
    shape = _answer(questions.resolve_shape, q.get("model"), _overrides(q))
    _answer(questions.check_layout, server, layout, shape)
    body: bytes = _answer(
        questions.placement_for,
        server,
        layout,
        q.get("free"),
        shape,
        q["zero"],
        _placement_json,
    )
    return body


def _overrides(q: dict[str, Any]) -> dict[str, Any]:
    return {k: q[k] for k in ("seq", "global_batch", "micro_batch") if k in q}


class RecommendationSerializer(serializers.Serializer):
    hostname = serializers.CharField()
    model = serializers.JSONField(help_text="the model shape used")
    gpu = serializers.JSONField()
    zero = serializers.IntegerField()
    recompute = serializers.CharField(help_text="activation recomputation: none, selective, full")
    micro_batch = serializers.IntegerField()
    levers = serializers.ListField(
        child=serializers.CharField(),
        help_text="memory levers pulled, in order, for a layout to fit (empty: none needed)",
    )
    assumed = serializers.ListField(
        child=serializers.CharField(),
        help_text="what was guessed rather than read: GPU model, generation, memory",
    )
    achieved_fraction_of_peak = serializers.FloatField()
    fits = serializers.BooleanField(help_text="some layout fits in memory")
    recommended = PlacementDocumentSerializer(allow_null=True)
    no_fit = serializers.JSONField(allow_null=True, help_text="the smallest shape that would fit")
    layouts = PlacementDocumentSerializer(many=True, help_text="fitting first, fastest first")
    assumptions = serializers.CharField()


class RecommendationApi(APIView):
    """Every TP x PP x DP (x EP) layout of a model on the server's (free) GPUs, ranked by
    predicted step time; the recommendation fits in memory, or the answer says why none does."""

    permission_classes = [CanQuery]
    throttle_classes = [QueryThrottle]
    parser_classes = [JSONParser]

    class RecommendationInputSerializer(TrainingInputSerializer):
        pass

    @extend_schema(
        operation_id="servers_recommendation_create",
        request=RecommendationInputSerializer,
        responses={200: RecommendationSerializer, **QUERY_ERRORS},
    )
    def post(self, request: Request, hostname: str) -> Response:
        q = validated(self.RecommendationInputSerializer, request.data)
        server = server_by_hostname(hostname)
        shape = _answer(questions.resolve_shape, q.get("model"), _overrides(q))
        doc = _answer(questions.recommendation_for, server, q.get("free"), shape, q["zero"])
        return Response(RecommendationSerializer(doc).data)


# --- k-GPU selection -----------------------------------------------------------------------


class SelectionSerializer(serializers.Serializer):
    hostname = serializers.CharField()
    gpus = serializers.ListField(child=serializers.IntegerField())
    busbw_gbps = serializers.FloatField(help_text="all_reduce busbw at 256 MiB")
    leftover_busbw_gbps = serializers.FloatField(
        help_text="what the server's remaining free GPUs still reach (0: not computed)"
    )
    reason = serializers.CharField()
    cost = CostDocumentSerializer(allow_null=True, help_text="the requested collective")


class SkippedServerSerializer(serializers.Serializer):
    hostname = serializers.CharField()
    reason = serializers.CharField()


class SelectionResultSerializer(serializers.Serializer):
    k = serializers.IntegerField()
    collective = serializers.CharField()
    bytes = serializers.IntegerField()
    selections = SelectionSerializer(many=True)
    skipped = SkippedServerSerializer(
        many=True, help_text="servers left out of the answer, each with the reason"
    )


class ServerFreeSerializer(serializers.Serializer):
    hostname = serializers.CharField(max_length=253, validators=[hostname_field])
    free = _gpu_list(required=False, help_text="free GPU indices (default: all)")


def _server_list() -> Any:
    return ServerFreeSerializer(  # type: ignore[call-arg]  # many=True: a ListSerializer's
        many=True,
        required=False,
        min_length=1,
        max_length=1000,
        help_text="omitted: every server with a topology, all GPUs free",
    )


def _each_server_once(servers: list[dict[str, Any]]) -> None:
    names = [item["hostname"] for item in servers]
    if len(set(names)) != len(names):
        raise serializers.ValidationError("Name each server once.")


def _wanted(q: dict[str, Any]) -> list[tuple[str, Any]] | None:
    """The (hostname, free GPUs) a question names; None: every server, all GPUs free."""
    return [(s["hostname"], s.get("free")) for s in q["servers"]] if "servers" in q else None


def _selection_json(doc: dict[str, Any]) -> bytes:
    """A selection as served: the form the selectors keep it in once computed."""
    return JSONRenderer().render(SelectionResultSerializer(doc).data)


class SelectApi(APIView):
    """The best k GPUs for a job over one server or many (free masks), ranked, with reasons."""

    permission_classes = [CanQuery]
    throttle_classes = [QueryThrottle]
    parser_classes = [JSONParser]

    class SelectInputSerializer(serializers.Serializer):
        k = serializers.IntegerField(min_value=1, max_value=MAX_GPUS)
        servers = _server_list()
        collective = serializers.ChoiceField(choices=COLLECTIVES, default="all_reduce")

        def validate_servers(self, value: list[dict[str, Any]]) -> list[dict[str, Any]]:
            _each_server_once(value)
            return value

    @extend_schema(
        operation_id="placement_select_create",
        request=SelectInputSerializer,
        responses={200: SelectionResultSerializer, **QUERY_ERRORS},
    )
    def post(self, request: Request) -> HttpResponse:
        q = validated(self.SelectInputSerializer, request.data)

        def answer() -> bytes:
            return cast(
                bytes,
                _answer(questions.selection, q["k"], _wanted(q), q["collective"], _selection_json),
            )

        return _json_response(kept_read(("selection", q), answer))


class ServerPartSerializer(serializers.Serializer):
    server = serializers.CharField()
    gpus = serializers.ListField(child=serializers.IntegerField())
    nics = serializers.ListField(child=serializers.CharField(), help_text="nearest NICs")


class JobSelectionSerializer(serializers.Serializer):
    servers = ServerPartSerializer(many=True)
    server_count = serializers.IntegerField()
    same_rails = serializers.BooleanField(help_text="all servers in one rail group")
    predicted_us = serializers.FloatField()
    predicted = serializers.CharField(help_text="what predicted_us times")
    inter_node_us = serializers.FloatField(help_text="the part spent between servers")
    layout = LayoutSerializer(allow_null=True)
    fits = serializers.BooleanField(help_text="fits in GPU memory")
    reason = serializers.CharField()
    network = serializers.ListField(
        child=serializers.JSONField(),
        help_text="what crosses the network per step: per dimension, the groups spanning "
        "servers, the bytes they move between servers and the time that takes",
    )
    levers = serializers.ListField(
        child=serializers.CharField(),
        help_text="a layout's memory levers pulled, in practitioners' order, for it to fit",
    )
    memory = serializers.JSONField(
        allow_null=True, help_text="a layout's memory per GPU: total, usable, left, kept back"
    )


class JobResultSerializer(serializers.Serializer):
    k = serializers.IntegerField()
    layout = LayoutSerializer(allow_null=True)
    selections = JobSelectionSerializer(many=True)
    assumed = serializers.ListField(
        child=serializers.CharField(),
        help_text="what was guessed rather than read (GPU model, generation, memory), by server",
    )


class JobApi(APIView):
    """Where a job of k GPUs, or a TP x PP x DP (x EP) layout, should run over several servers
    with free masks: one server when any can hold it; otherwise the fewest servers, one rail
    group first, TP (and EP) groups inside each server, pipeline stages and DP across."""

    permission_classes = [CanQuery]
    throttle_classes = [QueryThrottle]
    parser_classes = [JSONParser]

    class JobInputSerializer(serializers.Serializer):
        k = serializers.IntegerField(min_value=1, max_value=100_000, required=False)
        tp = serializers.IntegerField(min_value=1, max_value=MAX_GPUS, required=False)
        pp = serializers.IntegerField(min_value=1, max_value=100_000, required=False)
        dp = serializers.IntegerField(min_value=1, max_value=100_000, required=False)
        ep = serializers.IntegerField(min_value=1, max_value=MAX_GPUS, default=1)
        servers = _server_list()
        model = ModelField(required=False, help_text="preset key or shape (default llama-7b)")
        allow_tp_across_servers = serializers.BooleanField(
            default=False,
            help_text="let TP groups span servers (their all-reduces then cross the network "
            "every layer); by default TP and EP stay inside one server",
        )

        def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
            layout = [attrs.get(x) for x in ("tp", "pp", "dp")]
            if ("k" in attrs) == any(v is not None for v in layout):
                raise serializers.ValidationError("Send k, or tp, pp and dp (not both).")
            if "k" not in attrs and not all(v is not None for v in layout):
                raise serializers.ValidationError("tp, pp and dp go together.")
            _each_server_once(attrs.get("servers", []))
            return attrs

    @extend_schema(
        operation_id="placement_job_create",
        request=JobInputSerializer,
        responses={200: JobResultSerializer, **QUERY_ERRORS},
    )
    def post(self, request: Request) -> Response:
        q = validated(self.JobInputSerializer, request.data)
        wanted = _wanted(q)
        layout = _answer(Layout, q["tp"], q["pp"], q["dp"], q["ep"]) if "tp" in q else None
        shape = _answer(questions.resolve_shape, q.get("model"))
        doc = _answer(
            questions.job_selection,
            wanted,
            q.get("k"),
            layout,
            shape,
            allow_tp_across_servers=q["allow_tp_across_servers"],
        )
        return Response(JobResultSerializer(doc).data)


# --- serving -------------------------------------------------------------------------------


class ServingOptionSerializer(serializers.Serializer):
    tp = serializers.IntegerField()
    pp = serializers.IntegerField()
    replicas = serializers.IntegerField(help_text="replicas the free GPUs hold")
    gpus_per_replica = serializers.IntegerField()
    gpus = serializers.ListField(child=serializers.IntegerField(), help_text="GPUs used")
    replica_gpus = serializers.ListField(
        child=serializers.ListField(child=serializers.IntegerField()),
        help_text="the GPUs of each replica",
    )
    fits = serializers.BooleanField()
    memory_per_gpu = serializers.JSONField(
        help_text="weights, KV cache, activations, total, usable and left, GB"
    )
    max_concurrency = serializers.IntegerField(help_text="sequences of the asked context")
    max_context = serializers.IntegerField(
        help_text="tokens at the asked concurrency, at most the model's context window"
    )
    time_per_output_token_ms = serializers.FloatField()
    time_to_first_token_ms = serializers.FloatField()
    tp_all_reduce_decode_us = serializers.FloatField()
    tp_all_reduce_prefill_us = serializers.FloatField()


class ServingSerializer(serializers.Serializer):
    hostname = serializers.CharField()
    model = serializers.JSONField(help_text="the model shape used")
    dtype = serializers.CharField()
    context_tokens = serializers.IntegerField(help_text="tokens per sequence")
    concurrency = serializers.IntegerField()
    gpu = serializers.JSONField(help_text="peak TFLOP/s, HBM bandwidth, memory, their source")
    assumed = serializers.ListField(
        child=serializers.CharField(),
        help_text="what was guessed rather than read: GPU model, generation, memory",
    )
    notes = serializers.ListField(
        child=serializers.CharField(),
        help_text="what the question asks beyond the model itself (a context past its window)",
    )
    free = serializers.ListField(child=serializers.IntegerField())
    kv_bytes_per_token = serializers.IntegerField(
        help_text="2 x layers x KV heads x head dim x bytes"
    )
    kv_bytes_per_token_per_layer = serializers.IntegerField()
    fits = serializers.BooleanField()
    recommended = ServingOptionSerializer(allow_null=True)
    message = serializers.CharField(allow_null=True, help_text="why nothing fits")
    options = ServingOptionSerializer(many=True, help_text="fitting first, fewest GPUs first")
    assumptions = serializers.CharField()


class FleetServingSerializer(serializers.Serializer):
    servers = ServingSerializer(many=True, help_text="most replicas first")


class ServingQuestionSerializer(serializers.Serializer):
    # What to serve: the model, its weights' dtype, context and concurrent sequences.
    model = ModelField(required=False, help_text="preset key or shape (default llama-7b)")
    context_tokens = serializers.IntegerField(
        min_value=1,
        max_value=10_000_000,
        required=False,
        help_text="tokens per sequence (default: the model's training sequence)",
    )
    concurrency = serializers.IntegerField(
        min_value=1,
        max_value=100_000,
        default=DEFAULT_CONCURRENCY,
        help_text="sequences each replica serves at once",
    )
    dtype = serializers.ChoiceField(choices=DTYPES, default="bf16")


class ServingApi(APIView):
    """How the server would serve a model: GPUs per replica (TP x PP), which GPUs, replicas,
    memory per GPU, the largest context and concurrency, time per output token and to the
    first token."""

    permission_classes = [CanQuery]
    throttle_classes = [QueryThrottle]
    parser_classes = [JSONParser]

    class ServingInputSerializer(ServingQuestionSerializer):
        free = _gpu_list(required=False, help_text="free GPU indices (default: all)")

    @extend_schema(
        operation_id="servers_serving_create",
        request=ServingInputSerializer,
        responses={200: ServingSerializer, **QUERY_ERRORS},
    )
    def post(self, request: Request, hostname: str) -> Response:
        q = validated(self.ServingInputSerializer, request.data)
        server = selectors.server_for_questions(hostname)
        shape = _answer(questions.resolve_shape, q.get("model"))
        doc = _answer(
            questions.serving_for,
            server,
            shape,
            q.get("context_tokens"),
            q["concurrency"],
            q["dtype"],
            q.get("free"),
        )
        return Response(ServingSerializer(doc).data)


class FleetServingApi(APIView):
    """Serving a model over the named servers (free masks) or the whole fleet: each server's
    answer, those holding the most replicas first."""

    permission_classes = [CanQuery]
    throttle_classes = [QueryThrottle]
    parser_classes = [JSONParser]

    class FleetServingInputSerializer(ServingQuestionSerializer):
        servers = _server_list()

        def validate_servers(self, value: list[dict[str, Any]]) -> list[dict[str, Any]]:
            _each_server_once(value)
            return value

    @extend_schema(
        operation_id="serving_create",
        request=FleetServingInputSerializer,
        responses={200: FleetServingSerializer, **QUERY_ERRORS},
    )
    def post(self, request: Request) -> Response:
        q = validated(self.FleetServingInputSerializer, request.data)
        shape = _answer(questions.resolve_shape, q.get("model"))
        doc = _answer(
            questions.fleet_serving,
            _wanted(q),
            shape,
            q.get("context_tokens"),
            q["concurrency"],
            q["dtype"],
        )
        return Response(FleetServingSerializer(doc).data)


# --- affinity, stored costs, presets -------------------------------------------------------


class AffinitySerializer(AffinityDocumentSerializer):
    hostname = serializers.CharField()


class AffinityApi(APIView):
    """Per GPU: nearest NICs, NUMA node and CPUs; a CUDA_VISIBLE_DEVICES order; binding hints."""

    @extend_schema(
        operation_id="servers_affinity_retrieve",
        responses={200: AffinitySerializer, **READ_ERRORS},
    )
    def get(self, request: Request, hostname: str) -> Response:
        return Response(
            AffinitySerializer(questions.affinity_of(selectors.server_for_questions(hostname))).data
        )


class MeasuredCurveSerializer(serializers.Serializer):
    benchmark_id = serializers.IntegerField()
    collective = serializers.CharField(allow_null=True)
    gpu_count = serializers.IntegerField(allow_null=True)
    bytes = serializers.ListField(child=serializers.IntegerField())
    busbw_gbps = serializers.ListField(child=serializers.FloatField(allow_null=True))
    algbw_gbps = serializers.ListField(child=serializers.FloatField(allow_null=True))
    time_us = serializers.ListField(child=serializers.FloatField(allow_null=True))


class StoredCostsSerializer(serializers.Serializer):
    hostname = serializers.CharField()
    analysis_status = serializers.CharField(allow_null=True)
    cost_model_version = serializers.IntegerField(allow_null=True)
    costs = CostTablesSerializer(
        allow_null=True,
        help_text="curves per collective over `sizes` on all GPUs, and `table` rows "
        "(`table_columns`) per group size at 1 MiB, 64 MiB and 1 GiB; null until analysed",
    )
    calibrated_costs = CostTablesSerializer(
        allow_null=True, help_text="the same, with measured figures; null when none were measured"
    )
    measured = MeasuredCurveSerializer(many=True, help_text="this server's nccl-tests sweeps")


class StoredCostsApi(APIView):
    """The stored cost tables of the server's topology class, with its measured curves."""

    @extend_schema(
        operation_id="servers_costs_retrieve",
        responses={200: StoredCostsSerializer, **READ_ERRORS},
    )
    def get(self, request: Request, hostname: str) -> Response:
        doc = selectors.stored_costs(server_by_hostname(hostname))
        return Response(StoredCostsSerializer(doc).data)


class ModelPresetSerializer(ModelShapeSerializer):
    key = serializers.CharField()


class ModelPresetsApi(APIView):
    """Model shapes the placement endpoint knows by key."""

    @extend_schema(
        operation_id="model_presets_list",
        responses={200: ModelPresetSerializer(many=True), **READ_ERRORS},
    )
    def get(self, request: Request) -> Response:
        return Response(ModelPresetSerializer(selectors.model_presets(), many=True).data)
