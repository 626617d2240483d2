"""Each server's own GPU numbering for answers computed once per topology class.

An analysis is computed on one server's topology and stored in the class's canonical GPU
order (fingerprint.canonical_order); every server of the class gets it back in its own
numbering. Renumbered siblings differ only by a relabelling, so canonical position c is the
same physical place on both (twins, which the canonical order may swap, are interchangeable
and cost the same)."""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from typing import Any

from topoweb.core.fingerprint import canonical_order
from topoweb.core.model import Topology

CANONICAL = "canonical"


def canonical_gpus(topo: Topology) -> tuple[int, ...]:
    """GPU indices of `topo` in canonical order: position c holds the GPU at place c."""
    gpu_index = {g.id: g.index for g in topo.gpus}
    return tuple(gpu_index[d] for d in canonical_order(topo) if d in gpu_index)


def _remap_result(result: dict[str, Any], index: Callable[[int], int], order: list[int]) -> None:
    """Rewrite every GPU index in the placement and cost parts of an analysis result.
    `index` maps an old index to a new one; `order[new] = old` permutes matrices."""

    def gpus(v: Any) -> Any:
        if isinstance(v, list):
            return [gpus(x) for x in v]
        return index(v) if isinstance(v, int) else v

    def placement(doc: dict[str, Any]) -> None:
        for k in ("mapping", "gpus", "free", "leftover"):
            if k in doc:
                doc[k] = gpus(doc[k])
        if "groups" in doc:
            doc["groups"] = {k: gpus(v) for k, v in doc["groups"].items()}

    for doc in result.get("layouts") or []:
        placement(doc)
    for rec in (result.get("recommendations") or {}).values():
        if rec.get("recommended"):
            placement(rec["recommended"])
        for doc in rec.get("layouts") or []:
            placement(doc)
    for key in ("costs", "calibrated_costs"):
        costs = result.get(key)
        if costs:
            if "groups" in costs:
                costs["groups"] = {k: sorted(gpus(v)) for k, v in costs["groups"].items()}
            if "curve_gpus" in costs:
                costs["curve_gpus"] = sorted(gpus(costs["curve_gpus"]))
    aff = result.get("affinity")
    if isinstance(aff, dict) and isinstance(aff.get("gpus"), list):
        # Per GPU of the analysed server (its NIC names and CPU lists): re-keyed by GPU index;
        # /servers/NAME/affinity answers from the server's own capture.
        hints = aff.get("binding_hints") or [None] * len(aff["gpus"])
        rows = list(zip(aff["gpus"], hints, strict=True))
        for row, _hint in rows:
            if isinstance(row.get("gpu"), int):
                row["gpu"] = index(row["gpu"])
        rows.sort(key=lambda r: r[0].get("gpu", 0))
        aff["gpus"] = [r for r, _ in rows]
        if aff.get("binding_hints"):
            aff["binding_hints"] = [
                re.sub(r"^GPU\d+:", f"GPU{r['gpu']}:", h or "") for r, h in rows
            ]
        if isinstance(aff.get("cuda_visible_devices"), str) and aff["cuda_visible_devices"]:
            aff["cuda_visible_devices"] = ",".join(
                str(index(int(x))) for x in aff["cuda_visible_devices"].split(",")
            )
    for key in ("p2p_prediction", "calibrated_p2p_prediction"):
        matrices = result.get(key)
        if isinstance(matrices, dict):
            for name, m in matrices.items():
                if isinstance(m, list) and len(m) == len(order):
                    matrices[name] = [
                        [m[order[i]][order[j]] for j in range(len(order))]
                        for i in range(len(order))
                    ]


def to_canonical(result: dict[str, Any], topo: Topology) -> dict[str, Any]:
    """A result computed in `topo`'s numbering, in the class's canonical numbering."""
    return in_canonical_order(result, canonical_gpus(topo))


def in_canonical_order(result: dict[str, Any], canon: tuple[int, ...]) -> dict[str, Any]:
    """`to_canonical` with the canonical GPU order already known (canon[c]: index at c)."""
    position = {g: c for c, g in enumerate(canon)}
    # Matrices are indexed by position in sorted GPU index order.
    by_index = sorted(position)
    order = [by_index.index(canon[c]) for c in range(len(canon))]
    out = _copied(result)
    _remap_result(out, lambda g: position[g], order)
    out["gpu_numbering"] = CANONICAL
    return out


def to_server(result: dict[str, Any], topo: Topology) -> dict[str, Any]:
    """A stored (canonical) result in the numbering of the server whose topology is `topo`;
    results stored before canonical numbering come back as they are."""
    if result.get("gpu_numbering") != CANONICAL:
        return result
    return in_server_order(result, canonical_gpus(topo))


def in_server_order(result: dict[str, Any], canon: tuple[int, ...]) -> dict[str, Any]:
    """`to_server` with the server's canonical GPU order already known (cache it per
    snapshot: computing it costs milliseconds)."""
    if result.get("gpu_numbering") != CANONICAL:
        return result
    out = _copied(result)
    out["gpu_numbering"] = "server"
    if list(canon) == sorted(canon):
        return out  # this server's numbering is the canonical one
    by_index = sorted(canon)
    # Server GPU with sorted position i sits at canonical place canon.index(by_index[i]).
    order = [canon.index(by_index[i]) for i in range(len(canon))]
    _remap_result(out, lambda c: canon[c], order)
    return out


def _copied(result: dict[str, Any]) -> dict[str, Any]:
    """A copy deep only where GPU indices get rewritten."""
    out = dict(result)
    for key in _REMAPPED:
        if key in out:
            out[key] = copy.deepcopy(out[key])
    return out


_REMAPPED = (
    "affinity",
    "layouts",
    "recommendations",
    "costs",
    "calibrated_costs",
    "p2p_prediction",
    "calibrated_p2p_prediction",
)
