"""Routes of the dashboard pages."""

from django.urls import path

from topoweb.ui import views

app_name = "ui"

urlpatterns = [
    path("", views.fleet, name="fleet"),
    path("servers/<str:hostname>/", views.server, name="server"),
    path("servers/<str:hostname>/graph.svg", views.graph_svg_export, name="server-graph-svg"),
    path("servers/<str:hostname>/matrix.csv", views.matrix_csv_export, name="server-matrix-csv"),
    path("compare/", views.compare, name="compare"),
    path("upload/", views.upload, name="upload"),
    path("fabrics/", views.fabrics, name="fabrics"),
    path("fabrics/<str:name>/", views.fabric, name="fabric"),
]
