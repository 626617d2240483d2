"""Where the fabric page draws everything, decided here (deterministic, from the analysis
document): spines on top; leaves below in a grid whose rows are rails and whose columns are
leaf groups (a rail-optimised scalable unit: the leaves its hosts share), so a column is one
unit's rails; hosts as compact chips under their unit's column (collapsed to one chip per unit
on large fabrics, each expandable); uplinks as one line per leaf-spine pair coloured by speed
class, with the pairs short of their peers' cables drawn dashed (bundled per leaf and spine
group when a fabric has too many pairs to draw each)."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping
from typing import Any

from topoweb.core.fabric import natural_key
from topoweb.core.fabric_exports import host_places

SPINE_W, SPINE_H = 96, 26
LEAF_W, LEAF_H = 104, 24
HOST_W, HOST_H = 100, 15
COL_GAP, ROW_GAP = 16, 12
HOSTS_PER_ROW = 1
COLUMNS_PER_BAND = 12
COLLAPSE_OVER = 300  # named hosts past which each unit's hosts start as one chip
PAIRS_DRAWN = 3000  # leaf-spine pairs past which uplinks are bundled per spine group
MARGIN = 20
SEVERITY_RANK = {"critical": 0, "warning": 1, "info": 2}


def speed_class(gbps_per_link: float) -> str:
    """The legend's classes: XDR-class 800, NDR 400, HDR 200, lower."""
    if gbps_per_link >= 800:
        return "xdr"
    if gbps_per_link >= 400:
        return "ndr"
    if gbps_per_link >= 200:
        return "hdr"
    return "slow"


def _worst(severities: list[str]) -> str | None:
    return min(severities, key=SEVERITY_RANK.__getitem__) if severities else None


def fabric_page(doc: Mapping[str, Any]) -> dict[str, Any]:
    """The page's drawing: positions and styles of switches, uplinks, host chips; findings."""
    switches = {s["name"]: s for s in doc["switches"]}
    tier = {n: s["tier"] for n, s in switches.items()}
    rail_of_leaf: Mapping[str, int] = doc.get("rail_of_leaf", {})
    places = {
        p.node: p
        for p in host_places(
            doc, {h["hostname"]: h["hostname"] for h in doc["hosts"] if h["hostname"]}
        )
    }

    # Findings per switch and host (worst severity wins the colour).
    sw_sev: dict[str, list[str]] = defaultdict(list)
    host_sev: dict[str, list[str]] = defaultdict(list)
    for f in doc["findings"]:
        if f["kind"] == "unnamed_hcas":
            continue
        for s in f["switches"][:1] if f["kind"] == "missing_uplinks" else f["switches"]:
            sw_sev[s].append(f["severity"])
        for h in f["hosts"]:
            host_sev[h].append(f["severity"])

    # Columns: leaf groups, from the named hosts on each leaf.
    unit_votes: dict[str, Counter[str]] = defaultdict(Counter)
    for p in places.values():
        for leaf in p.leaves:
            unit_votes[leaf][p.block] += 1
    leaves = sorted((n for n, t in tier.items() if t == "leaf"), key=natural_key)
    unit_of = {
        leaf: min(unit_votes[leaf].items(), key=lambda kv: (-kv[1], natural_key(kv[0])))[0]
        if unit_votes.get(leaf)
        else "(no named host)"
        for leaf in leaves
    }
    units = sorted(set(unit_of.values()), key=lambda u: (u == "(no named host)", natural_key(u)))
    rails = sorted({rail_of_leaf[n] for n in leaves if n in rail_of_leaf})
    row_of = {n: rails.index(rail_of_leaf[n]) if n in rail_of_leaf else len(rails) for n in leaves}
    n_rows = len(rails) + (1 if any(n not in rail_of_leaf for n in leaves) else 0)
    cell: dict[tuple[str, int], list[str]] = defaultdict(list)
    for leaf in leaves:
        cell[(unit_of[leaf], row_of[leaf])].append(leaf)
    per_cell = max((len(v) for v in cell.values()), default=1)
    col_w = per_cell * (LEAF_W + 6) - 6 + COL_GAP

    named_hosts = [h for h in doc["hosts"] if h["hostname"]]
    collapsed = len(named_hosts) > COLLAPSE_OVER
    hosts_by_unit: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for h in named_hosts:
        place = places.get(h["hostname"])
        if place is not None:
            hosts_by_unit[unit_of.get(place.block, place.block)].append(h)
    max_hosts = max((len(v) for v in hosts_by_unit.values()), default=0)
    host_rows = 1 if collapsed else -(-max_hosts // HOSTS_PER_ROW)

    spine_names = sorted(
        (n for n, t in tier.items() if t != "leaf"),
        key=lambda n: (tier[n] != "core", natural_key(n)),
    )
    band_cols = min(len(units), COLUMNS_PER_BAND) or 1
    width = max(
        2 * MARGIN + band_cols * col_w, 2 * MARGIN + min(len(spine_names), 24) * (SPINE_W + 8)
    )
    spines_per_row = max(1, (width - 2 * MARGIN) // (SPINE_W + 8))
    spine_rows = -(-len(spine_names) // spines_per_row) if spine_names else 0
    top = MARGIN + spine_rows * (SPINE_H + 14) + 70
    band_h = n_rows * (LEAF_H + ROW_GAP) + 18 + host_rows * (HOST_H + 4) + 40

    out_switches: list[dict[str, Any]] = []
    position: dict[str, tuple[float, float]] = {}
    for i, name in enumerate(spine_names):
        row, col = divmod(i, spines_per_row)
        in_row = min(spines_per_row, len(spine_names) - row * spines_per_row)
        x0 = (width - in_row * (SPINE_W + 8) + 8) / 2
        position[name] = (
            x0 + col * (SPINE_W + 8) + SPINE_W / 2,
            MARGIN + row * (SPINE_H + 14) + SPINE_H / 2,
        )
    for u, unit in enumerate(units):
        band, col = divmod(u, COLUMNS_PER_BAND)
        x_col = MARGIN + col * col_w
        y_band = top + band * band_h
        for r in range(n_rows):
            for k, leaf in enumerate(sorted(cell.get((unit, r), []), key=natural_key)):
                position[leaf] = (
                    x_col + k * (LEAF_W + 6) + LEAF_W / 2,
                    y_band + r * (LEAF_H + ROW_GAP) + LEAF_H / 2,
                )
    for name in [*spine_names, *leaves]:
        s = switches[name]
        x, y = position[name]
        out_switches.append(
            {
                "name": name,
                "tier": s["tier"],
                "rail": rail_of_leaf.get(name),
                "unit": unit_of.get(name),
                "x": round(x, 1),
                "y": round(y, 1),
                "severity": _worst(sw_sev.get(name, [])),
            }
        )
    index = {s["name"]: i for i, s in enumerate(out_switches)}

    # Uplinks: links per (leaf, spine) pair against the count its peers have.
    pairs: dict[tuple[str, str], list[float]] = defaultdict(list)
    for link in doc["links"]:
        a, b = link["a"], link["b"]
        for lo, hi in ((a, b), (b, a)):
            if (tier.get(lo), tier.get(hi)) in (("leaf", "spine"), ("spine", "core")):
                pairs[(lo, hi)].append(link["gbps"])
    short: dict[tuple[str, str], dict[str, Any]] = {}
    for f in doc["findings"]:
        if f["kind"] == "missing_uplinks":
            ev = f["evidence"]
            short[(ev["switch"], ev["upper"])] = ev
    uplinks: list[list[Any]] = []
    bundled = len(pairs) > PAIRS_DRAWN
    if bundled:
        group_of = {p.block: p.spine for p in places.values()}
        bundle: dict[tuple[str, str], list[float]] = defaultdict(list)
        for (lo, hi), rates in pairs.items():
            key = group_of.get(unit_of.get(lo, ""), None) or hi
            bundle[(lo, key)].extend(rates)
        for (lo, hi), rates in bundle.items():
            if hi in index:
                uplinks.append([index[lo], index[hi], len(rates), speed_class(min(rates)), ""])
    else:
        for (lo, hi), rates in sorted(pairs.items()):
            gap = short.get((lo, hi))
            style = "short" if gap else ""
            uplinks.append([index[lo], index[hi], len(rates), speed_class(min(rates)), style])
    for (lo, hi), ev in sorted(short.items()):
        if not pairs.get((lo, hi)) and lo in index and hi in index:
            uplinks.append([index[lo], index[hi], 0, "missing", "missing"])
        elif bundled and lo in index and hi in index:
            uplinks.append([index[lo], index[hi], ev["links"], "short", "short"])

    # Hosts: chips under their unit's column.
    out_hosts: list[dict[str, Any]] = []
    chips: list[dict[str, Any]] = []
    for u, unit in enumerate(units):
        members = sorted(hosts_by_unit.get(unit, []), key=lambda h: natural_key(h["hostname"]))
        if not members:
            continue
        band, col = divmod(u, COLUMNS_PER_BAND)
        x_col = MARGIN + col * col_w
        y0 = top + band * band_h + n_rows * (LEAF_H + ROW_GAP) + 18
        worst = _worst([s for h in members for s in host_sev.get(h["hostname"], [])])
        chips.append(
            {
                "unit": unit,
                "hosts": len(members),
                "x": round(x_col + HOST_W / 2, 1),
                "y": round(y0 + HOST_H / 2, 1),
                "severity": worst,
                "expanded": not collapsed,
            }
        )
        for k, h in enumerate(members):
            row, c = divmod(k, HOSTS_PER_ROW)
            out_hosts.append(
                {
                    "hostname": h["hostname"],
                    "server": h.get("server"),
                    "unit": unit,
                    "x": round(x_col + c * (HOST_W + 4) + HOST_W / 2, 1),
                    "y": round(y0 + (row + (1 if collapsed else 0)) * (HOST_H + 4) + HOST_H / 2, 1),
                    "severity": _worst(host_sev.get(h["hostname"], [])),
                    # [switch index, port, rail, device, rate] per HCA, rail order
                    "rails": [
                        [index.get(c2["switch"]), c2["port"], c2["rail"], c2["name"], c2["rate"]]
                        for c2 in h["hcas"]
                    ],
                }
            )
    unnamed = Counter(
        h["hcas"][0]["switch"] for h in doc["hosts"] if not h["hostname"] and h["hcas"]
    )
    for s in out_switches:
        s["unnamed"] = unnamed.get(s["name"], 0)
    bands = -(-len(units) // COLUMNS_PER_BAND) if units else 0
    height = top + max(bands, 1) * band_h + MARGIN
    return {
        "width": int(width),
        "height": int(height),
        "collapsed": collapsed,
        "bundled": bundled,
        "rails": rails,
        "rail_rows": [
            {"rail": r, "y": round(top + i * (LEAF_H + ROW_GAP) + LEAF_H / 2, 1)}
            for i, r in enumerate(rails)
        ],
        "switches": out_switches,
        "uplinks": uplinks,
        "units": chips,
        "hosts": out_hosts,
        "sizes": {"spine": [SPINE_W, SPINE_H], "leaf": [LEAF_W, LEAF_H], "host": [HOST_W, HOST_H]},
    }
