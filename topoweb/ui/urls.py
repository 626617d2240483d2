"""Routes of the dashboard pages."""

from django.urls import path

from topoweb.ui import views

app_name = "ui"

urlpatterns = [
    path("", views.fleet, name="fleet"),
    path("servers/<str:hostname>/", views.server, name="server"),
    path("compare/", views.compare, name="compare"),
    path("upload/", views.upload, name="upload"),
]
