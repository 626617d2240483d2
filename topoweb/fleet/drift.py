"""Which servers of a SKU are wired differently from its usual topology class: the one finding
the fleet keeps as a column (Server.differs_from_sku), refreshed by every ingest of the SKU."""

from __future__ import annotations

from django.db.models import Case, Q, Value, When

from topoweb.fleet.models import Server
from topoweb.fleet.selectors import usual_topology_class_id


def refresh_sku_drift(sku_name: str) -> list[int]:
    """Flag the servers of a SKU whose wiring differs from the SKU's most common topology
    class; the ids of those whose flag changed (none in the common case, and no write)."""
    if not sku_name:
        return []
    usual = usual_topology_class_id(sku_name)
    members = Server.objects.filter(sku_name=sku_name)
    if usual is None:
        changing = members.filter(differs_from_sku=True)
    else:
        differs = Q(topology_class__isnull=False) & ~Q(topology_class=usual)
        changing = members.filter(
            (differs & Q(differs_from_sku=False))
            | (Q(topology_class=usual) & Q(differs_from_sku=True))
        )
    ids = list(changing.values_list("pk", flat=True))
    if ids:  # each of these flags flips
        flipped = Case(When(differs_from_sku=True, then=Value(False)), default=Value(True))
        Server.objects.filter(pk__in=ids).update(differs_from_sku=flipped)
    return ids
