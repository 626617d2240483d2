"""`{% graph_style %}`: core.graphstyle's style sheet as a json_script element, read by
frontend/src/graph.js, so the page draws each link class as the exported SVG does."""

from __future__ import annotations

from django import template
from django.utils.html import json_script
from django.utils.safestring import SafeString

from topoweb.core.graphstyle import style_document

register = template.Library()


@register.simple_tag
def graph_style() -> SafeString:
    return json_script(style_document(), "graph-style")
