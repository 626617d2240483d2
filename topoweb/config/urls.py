"""URL routes of topoweb: the admin, the JSON API under /api/v1/ with its schema and docs,
sign-in/out, and the dashboard pages."""

from django.conf import settings
from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path, re_path
from drf_spectacular.views import SpectacularAPIView, SpectacularRedocView, SpectacularSwaggerView

from topoweb.analysis import apis as analysis_apis
from topoweb.api import exports as export_apis
from topoweb.api import fabrics as fabric_apis
from topoweb.api import ingest as ingest_apis
from topoweb.api import pages as page_apis
from topoweb.api import reads as apis
from topoweb.config.api import api_not_found
from topoweb.config.metrics import metrics_view
from topoweb.health import urls as health_urls

api_v1 = [
    path("reports/", ingest_apis.ReportApi.as_view(), name="reports"),
    path("enroll/", ingest_apis.EnrollApi.as_view(), name="enroll"),
    path("audit/", export_apis.AuditExportApi.as_view(), name="audit"),
    path("uploads/", ingest_apis.UploadApi.as_view(), name="uploads"),
    path("uploads/preview/", ingest_apis.UploadPreviewApi.as_view(), name="upload-preview"),
    path("servers/", apis.ServerListApi.as_view(), name="server-list"),
    path("servers/<str:hostname>/", apis.ServerDetailApi.as_view(), name="server-detail"),
    path(
        "servers/<str:hostname>/snapshots/",
        apis.ServerSnapshotsApi.as_view(),
        name="server-snapshots",
    ),
    path("servers/<str:hostname>/graph/", apis.ServerGraphApi.as_view(), name="server-graph"),
    path(
        "servers/<str:hostname>/fabrics/",
        fabric_apis.ServerFabricsApi.as_view(),
        name="server-fabrics",
    ),
    path(
        "servers/<str:hostname>/export/<str:fmt>/",
        export_apis.ServerExportApi.as_view(),
        name="server-export",
    ),
    path("servers/<str:hostname>/cost/", analysis_apis.CostApi.as_view(), name="server-cost"),
    path("servers/<str:hostname>/page/", page_apis.ServerPageApi.as_view(), name="server-page"),
    path("compare/", page_apis.ComparePageApi.as_view(), name="compare-page"),
    path(
        "servers/<str:hostname>/placement/",
        analysis_apis.PlacementApi.as_view(),
        name="server-placement",
    ),
    path(
        "servers/<str:hostname>/recommendation/",
        analysis_apis.RecommendationApi.as_view(),
        name="server-recommendation",
    ),
    path(
        "servers/<str:hostname>/affinity/",
        analysis_apis.AffinityApi.as_view(),
        name="server-affinity",
    ),
    path(
        "servers/<str:hostname>/cost-tables/",
        analysis_apis.StoredCostsApi.as_view(),
        name="server-cost-tables",
    ),
    path(
        "servers/<str:hostname>/serving/",
        analysis_apis.ServingApi.as_view(),
        name="server-serving",
    ),
    path("serving/", analysis_apis.FleetServingApi.as_view(), name="serving"),
    path("placement/select/", analysis_apis.SelectApi.as_view(), name="placement-select"),
    path("placement/job/", analysis_apis.JobApi.as_view(), name="placement-job"),
    path("model-presets/", analysis_apis.ModelPresetsApi.as_view(), name="model-presets"),
    path("snapshots/<int:snapshot_id>/", apis.SnapshotDetailApi.as_view(), name="snapshot-detail"),
    path("benchmarks/", apis.BenchmarkListApi.as_view(), name="benchmark-list"),
    path(
        "benchmarks/<int:benchmark_id>/", apis.BenchmarkDetailApi.as_view(), name="benchmark-detail"
    ),
    path("skus/", apis.SkuListApi.as_view(), name="sku-list"),
    # SKU names are free text ("GTX 1070/1080 7-GPU rig"): `path` takes the '/' a client
    # percent-encodes, and the acceptance route must come before the greedy detail route.
    *health_urls.api_urls,
    path("skus/<path:sku_name>/", apis.SkuDetailApi.as_view(), name="sku-detail"),
    path("topology-classes/", apis.TopologyClassListApi.as_view(), name="topology-class-list"),
    path(
        "topology-classes/<str:fingerprint>/",
        apis.TopologyClassDetailApi.as_view(),
        name="topology-class-detail",
    ),
    path(
        "topology-classes/<str:fingerprint>/export/<str:fmt>/",
        export_apis.TopologyClassExportApi.as_view(),
        name="topology-class-export",
    ),
    path("exports/topology.conf/", export_apis.TopologyConfApi.as_view(), name="topology-conf"),
    path("fabrics/", fabric_apis.FabricListApi.as_view(), name="fabric-list"),
    path("fabric-reports/", fabric_apis.FabricReportApi.as_view(), name="fabric-reports"),
    path("fabrics/<str:name>/", fabric_apis.FabricDetailApi.as_view(), name="fabric-detail"),
    path(
        "fabrics/<str:name>/captures/",
        fabric_apis.FabricCapturesApi.as_view(),
        name="fabric-captures",
    ),
    path("fabrics/<str:name>/diff/", fabric_apis.FabricDiffApi.as_view(), name="fabric-diff"),
    path("fabrics/<str:name>/page/", fabric_apis.FabricPageApi.as_view(), name="fabric-page"),
    path(
        "fabrics/<str:name>/export/<str:fmt>/",
        fabric_apis.FabricExportApi.as_view(),
        name="fabric-export",
    ),
]

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/v1/", include((api_v1, "api"))),
    path("metrics", metrics_view, name="metrics"),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="api-docs"),
    path("api/redoc/", SpectacularRedocView.as_view(url_name="schema"), name="api-redoc"),
    re_path(r"^api/(?P<rest>.*)$", api_not_found),  # after every API route: the JSON 404
    *health_urls.page_urls,
    path(
        "accounts/login/",
        auth_views.LoginView.as_view(extra_context={"oidc": settings.TOPOWEB_OIDC}),
        name="login",
    ),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("", include("topoweb.ui.urls")),
]

if settings.TOPOWEB_OIDC:  # company sign-in: /oidc/authenticate/ and /oidc/callback/
    urlpatterns.insert(0, path("oidc/", include("mozilla_django_oidc.urls")))

handler404 = "topoweb.config.api.json_404"
handler500 = "topoweb.config.api.json_500"
