"""Django app configuration of the analyses."""

from django.apps import AppConfig


class AnalysisConfig(AppConfig):
    name = "topoweb.analysis"
    label = "analysis"
    default_auto_field = "django.db.models.BigAutoField"
