"""The dashboard app: HTML pages that load the frontend/ modules; it has no models."""

from django.apps import AppConfig


class UiConfig(AppConfig):
    name = "topoweb.ui"
    label = "ui"
    verbose_name = "Dashboard"
