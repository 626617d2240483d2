"""Admin page of the analyses."""

from django.contrib import admin

from topoweb.analysis.models import Analysis


@admin.register(Analysis)
class AnalysisAdmin(admin.ModelAdmin):
    list_display = ("topology_class", "cost_model_version", "status", "attempts", "finished_at")
    list_filter = ("status",)
