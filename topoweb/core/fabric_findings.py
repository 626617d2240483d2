"""What is wrong with a fabric, in the finding shape of server health (kind, severity, evidence,
advice, message) with the names of the switches and hosts involved: links trained below their
peers, leaves short of uplinks their peer leaves have, hosts short of the HCAs their kind of
host has, HCAs cabled off their rail, oversubscribed leaves, HCAs nobody named, one hostname
on HCAs of more than one host."""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from topoweb.core.fabric import TIER_NAMES, Fabric, Hca, Switch, connected_groups, natural_key
from topoweb.core.formats.ibnet import LANE_GBPS
from topoweb.core.health.findings import Severity

DOWNTRAINED_LINK = "downtrained_link"
MISSING_UPLINKS = "missing_uplinks"
MISSING_HCA = "missing_hca"
OFF_RAIL_HCA = "off_rail_hca"
LEAF_OVERSUBSCRIBED = "leaf_oversubscribed"
UNNAMED_HCAS = "unnamed_hcas"
SHARED_HOSTNAME = "shared_hostname"
FABRIC_KINDS = (
    DOWNTRAINED_LINK,
    MISSING_UPLINKS,
    MISSING_HCA,
    OFF_RAIL_HCA,
    LEAF_OVERSUBSCRIBED,
    UNNAMED_HCAS,
    SHARED_HOSTNAME,
)
_DIGITS = re.compile(r"\d+")
_ORDER = {"critical": 0, "warning": 1, "info": 2}


@dataclass(frozen=True)
class FabricFinding:
    kind: str
    severity: Severity
    switches: tuple[str, ...]
    hosts: tuple[str, ...]
    evidence: dict[str, Any] = field(hash=False)
    advice: str
    message: str

    def to_document(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "severity": self.severity,
            "message": self.message,
            "switches": list(self.switches),
            "hosts": list(self.hosts),
            "devices": [*self.switches, *self.hosts],
            "evidence": self.evidence,
            "advice": self.advice,
        }


def _plural(tier: str) -> str:
    return "leaves" if tier == "leaf" else f"{tier}s"


def _ports(ports: Iterable[int]) -> str:
    return ", ".join(str(p) for p in sorted(ports)) or "none"


def _mode(counter: Counter[Any]) -> Any:
    """The most common value; ties go to the larger (expect the cable rather than excuse it)."""
    return max(counter.items(), key=lambda kv: (kv[1], kv[0]))[0]


def fabric_findings(fabric: Fabric, skus: Mapping[str, str] | None = None) -> list[FabricFinding]:
    """`skus`: hostname -> SKU of the servers the service matched; a host's siblings are then
    the hosts of its SKU (else hosts named alike whose HCAs are named alike)."""
    out: list[FabricFinding] = []
    out += _downtrained(fabric)
    out += _uplink_shortfalls(fabric)
    out += _host_hcas(fabric, skus or {})
    out += _oversubscribed(fabric)
    out += _unnamed(fabric)
    out += _shared_hostnames(fabric)
    out.sort(key=lambda f: (_ORDER[f.severity], f.kind, [natural_key(s) for s in f.switches],
                            [natural_key(h) for h in f.hosts]))  # fmt: skip
    return out


def _downtrained(fabric: Fabric) -> list[FabricFinding]:
    """Each link against the links of its class (HCA-leaf, leaf-spine, spine-core)."""
    host_of = fabric.host_of_hca()
    classes: dict[str, list[tuple[Any, ...]]] = defaultdict(list)
    # A switch's fastest link: a link runs no faster than its slower switch can (an FDR switch
    # cabled to an EDR one, in a fabric of both generations).
    fastest: dict[str, float] = defaultdict(float)
    for link in fabric.links:
        for end in (link.a, link.b):
            if end in fabric.switches:
                fastest[end] = max(fastest[end], link.gbps)
    for link in fabric.links:
        if link.a == link.b or not link.known:
            # A loopback cable (build_fabric warns of it) is no peer of a real link; a link
            # whose rate the capture could not print (the reader warns of it) has no rate.
            continue
        a, b = fabric.switches.get(link.a), fabric.switches.get(link.b)
        if a is not None and b is not None:
            lo, lo_port, hi, hi_port = (a, link.a_port, b, link.b_port)
            if (b.tier or 0) < (a.tier or 0):
                lo, lo_port, hi, hi_port = hi, hi_port, lo, lo_port
            key = f"{lo.tier_name}-{hi.tier_name}"
            classes[key].append((link, lo.name, lo_port, hi.name, hi_port, None))
        elif a is not None or b is not None:
            sw, sw_port, ca = (
                (a, link.a_port, link.b) if a is not None else (b, link.b_port, link.a)
            )
            assert sw is not None
            host = host_of.get(ca)
            if host is None:
                continue  # an aggregation node inside the switch
            hca = next(h for h in host.hcas if h.guid == ca)
            label = f"{host.key} {hca.name}" if hca.name else host.key
            classes["hca-leaf"].append((link, sw.name, sw_port, label, 1, host.key))
    out = []
    for cls, rows in classes.items():
        width = _mode(Counter(r[0].width for r in rows))
        speed = _mode(Counter(r[0].speed for r in rows))
        peer_gbps = width * LANE_GBPS.get(speed, 0.0)
        for link, a, a_port, b, b_port, host in rows:
            if link.width >= width and LANE_GBPS.get(link.speed, 0.0) >= LANE_GBPS.get(speed, 0):
                continue
            ends = [fastest[e] for e in (link.a, link.b) if e in fastest]
            if link.gbps >= min(ends):
                continue  # as fast as its slower switch runs anywhere
            out.append(
                FabricFinding(
                    kind=DOWNTRAINED_LINK,
                    severity="warning",
                    switches=(a,) if host else (a, b),
                    hosts=(host,) if host else (),
                    evidence={
                        "class": cls,
                        "a": a,
                        "a_port": a_port,
                        "b": b,
                        "b_port": b_port,
                        "rate": link.rate,
                        "gbps": link.gbps,
                        "peer_rate": f"{width}x{speed}",
                        "peer_gbps": peer_gbps,
                        "line": link.line,
                    },
                    advice="Reseat or replace the cable or optic, then check the port with "
                    "`ibportstate`/`mlxlink`.",
                    message=f"{a} port {a_port} - {b} port {b_port} trained at {link.rate} "
                    f"({link.gbps:g} Gb/s) where its {cls} peers run {width}x{speed} "
                    f"({peer_gbps:g} Gb/s).",
                )
            )
    return out


def _uplink_shortfalls(fabric: Fabric) -> list[FabricFinding]:
    """A switch against the switches of its tier that share an upper switch with it: for each
    upper switch, the link count most of them have, and the ports most of them use."""
    up: dict[str, dict[str, list[tuple[int, int]]]] = defaultdict(lambda: defaultdict(list))
    for low, low_port, high, high_port, _ in fabric.switch_links():
        if low.tier is not None and high.tier is not None and high.tier == low.tier + 1:
            up[low.guid][high.guid].append((low_port, high_port))
    # Peer groups: switches of one tier joined by a shared upper switch.
    below_each: dict[str, list[str]] = defaultdict(list)
    for below, uppers in up.items():
        for above in uppers:
            below_each[above].append(below)
    groups = connected_groups(up, below_each.values())

    sw = fabric.switches
    out = []
    for members in groups:
        above_all = sorted(
            {hi for lo in members for hi in up[lo]}, key=lambda g: natural_key(sw[g].name)
        )
        for hi in above_all:
            counts = Counter(len(up[lo].get(hi, ())) for lo in members)
            expected = _mode(counts)
            usual_ports = Counter(
                tuple(sorted(p for p, _ in up[lo][hi]))
                for lo in members
                if len(up[lo].get(hi, ())) == expected
            )
            ports = _mode(usual_ports) if usual_ports else ()
            for lo in members:
                have = up[lo].get(hi, [])
                if len(have) >= expected:
                    continue
                lo_sw, hi_sw = sw[lo], sw[hi]
                present = sorted(p for p, _ in have)
                gap = sorted(set(ports) - set(present))
                peers = counts[expected]
                what = "no link" if not have else f"{len(have)} link{'s' * (len(have) > 1)}"
                message = (
                    f"{lo_sw.name} has {what} to {hi_sw.name} where {peers} of its "
                    f"{len(members)} peer {_plural(lo_sw.tier_name)} have {expected}"
                )
                if have:
                    message += (
                        " (present: "
                        + ", ".join(f"port {p} - {hi_sw.name} port {q}" for p, q in sorted(have))
                        + ")"
                    )
                if gap:
                    message += (
                        f"; its peers use {lo_sw.tier_name} port(s) {_ports(ports)}, "
                        f"here port(s) {_ports(gap)} carry no link to {hi_sw.name}"
                    )
                out.append(
                    FabricFinding(
                        kind=MISSING_UPLINKS,
                        severity="critical" if not have else "warning",
                        switches=(lo_sw.name, hi_sw.name),
                        hosts=(),
                        evidence={
                            "switch": lo_sw.name,
                            "upper": hi_sw.name,
                            "tier": lo_sw.tier_name,
                            "upper_tier": hi_sw.tier_name,
                            "links": len(have),
                            "expected": expected,
                            "peers_with_expected": peers,
                            "peers": len(members),
                            "present": [{"port": p, "upper_port": q} for p, q in sorted(have)],
                            "usual_ports": list(ports),
                            "missing_ports": gap,
                        },
                        advice="Check the cables on the named ports (seated, lit, in the "
                        "cabling plan); a missing uplink takes this "
                        f"{lo_sw.tier_name}'s share of bandwidth to {hi_sw.name} away.",
                        message=message + ".",
                    )
                )
    return out


def _host_hcas(fabric: Fabric, skus: Mapping[str, str]) -> list[FabricFinding]:
    """Hosts short of the devices most hosts of their kind carry (kind: hosts whose HCAs share
    device names), and HCAs on a leaf whose rail is not theirs."""
    named = [h for h in fabric.hosts if h.hostname is not None]
    rail_of_leaf = fabric.rail_of_leaf
    # Kinds of host: a device name belongs to one kind (core/fabric.py's rails).
    kind_of_device: dict[str, str] = {}
    for host in named:
        devices = sorted((h.name for h in host.hcas if h.name), key=natural_key)
        base = next((kind_of_device[d] for d in devices if d in kind_of_device), None)
        base = base or (devices[0] if devices else "")
        for d in devices:
            kind_of_device.setdefault(d, base)
    # Siblings: the hosts of its SKU where the service knows it, else hosts named alike
    # (digits aside) whose HCAs are named alike, so a fabric's management servers are not
    # held to its GPU servers' HCA count.
    hosts_of_kind: dict[tuple[str, str], list[Any]] = defaultdict(list)
    for host in named:
        first = next((h.name for h in host.hcas if h.name), None)
        if first is None:
            continue
        if skus.get(host.key):  # one SKU's hosts, by the device names they use
            hosts_of_kind[(f"sku:{skus[host.key]}", kind_of_device[first])].append(host)
        else:
            shape = _DIGITS.sub("#", host.key)
            hosts_of_kind[(shape, kind_of_device[first])].append(host)
    hosts_on_leaf: dict[str, set[str]] = defaultdict(set)
    hca_of: dict[tuple[str, str], Hca] = {}
    for host in named:
        for h in host.hcas:
            if h.switch:
                hosts_on_leaf[h.switch].add(host.key)
            if h.name:
                hca_of[(host.key, h.name)] = h
    unnamed_on_leaf: dict[str, list[Hca]] = defaultdict(list)
    for host in fabric.hosts:
        if host.hostname is None:
            for h in host.hcas:
                if h.switch:
                    unnamed_on_leaf[h.switch].append(h)

    out = []
    for members in hosts_of_kind.values():
        device_counts = Counter(h.name for host in members for h in host.hcas if h.name)
        expected = sorted(
            (d for d, c in device_counts.items() if 2 * c > len(members)), key=natural_key
        )
        for host in members:
            have = {h.name for h in host.hcas}
            missing = [d for d in expected if d not in have]
            if not missing:
                continue
            # Where its neighbours (hosts on its leaves) cable the missing devices.
            neighbours = {n for h in host.hcas if h.switch for n in hosts_on_leaf[h.switch]}
            neighbours.discard(host.key)
            leaves = []
            for d in missing:
                spots = Counter(hca_of[(n, d)].switch for n in neighbours if (n, d) in hca_of)
                leaves.append(_mode(spots) if spots else None)
            candidates = [
                {"guid": u.guid, "switch": fabric.name(leaf), "port": u.port}
                for leaf in leaves
                if leaf
                for u in unnamed_on_leaf.get(leaf, ())
            ]
            where = [fabric.name(x) for x in leaves if x]
            message = (
                f"{host.key} has {len(host.hcas)} HCAs where most of its {len(members) - 1} "
                f"siblings have {len(expected)}: no {', '.join(missing)}"
            )
            if where:
                message += f" (its neighbours cable that rail to {', '.join(where)})"
            if candidates:
                message += (
                    f"; {len(candidates)} HCA(s) whose NodeDescription names no host sit there, "
                    "one may be this host's with its NodeDescription unset"
                )
            out.append(
                FabricFinding(
                    kind=MISSING_HCA,
                    severity="info" if candidates else "warning",
                    switches=tuple(where),
                    hosts=(host.key,),
                    evidence={
                        "hcas": len(host.hcas),
                        "expected": expected,
                        "missing": missing,
                        "siblings": len(members),
                        "rail_leaves": where,
                        "unnamed_candidates": candidates[:8],
                    },
                    advice="Check the HCA is present (`ibstat`), its cable, and that the host "
                    "sets its NodeDescription; a collector sending the host's HCA GUIDs names "
                    "an HCA whose description was never set.",
                    message=message + ".",
                )
            )
        for host in members if len(members) > 1 else ():  # a lone host of its kind has no rails
            for h in host.hcas:
                if h.switch is None or h.rail is None or h.switch not in rail_of_leaf:
                    continue
                leaf_rail = rail_of_leaf[h.switch]
                if leaf_rail == h.rail:
                    continue
                neighbours = {n for x in host.hcas if x.switch for n in hosts_on_leaf[x.switch]}
                spots = Counter(
                    hca_of[(n, h.name)].switch
                    for n in neighbours
                    if h.name
                    and (n, h.name) in hca_of
                    and n != host.key
                    and hca_of[(n, h.name)].switch != h.switch
                )
                usual = fabric.name(_mode(spots)) if spots else None
                leaf = fabric.name(h.switch)
                message = (
                    f"{host.key} {h.name} (rail {h.rail}) is cabled to {leaf} port {h.port}, "
                    f"a rail-{leaf_rail} leaf"
                )
                if usual:
                    message += f"; its neighbours cable {h.name} to {usual}"
                out.append(
                    FabricFinding(
                        kind=OFF_RAIL_HCA,
                        severity="warning",
                        switches=(leaf,) + ((usual,) if usual else ()),
                        hosts=(host.key,),
                        evidence={
                            "hca": h.name,
                            "guid": h.guid,
                            "rail": h.rail,
                            "switch": leaf,
                            "port": h.port,
                            "switch_rail": leaf_rail,
                            "usual_switch": usual,
                        },
                        advice="Recable the HCA to its rail's leaf: off its rail, its GPU's "
                        "traffic to the same GPU of other servers crosses the spines.",
                        message=message + ".",
                    )
                )
    return out


def _oversubscribed(fabric: Fabric) -> list[FabricFinding]:
    down: dict[str, float] = defaultdict(float)
    up: dict[str, float] = defaultdict(float)
    hosted = fabric.host_of_hca()
    unknown: set[str] = set()  # switches with a link of unknown rate: no ratio to be had
    for link in fabric.links:
        a, b = fabric.switches.get(link.a), fabric.switches.get(link.b)
        if not link.known:
            unknown.update(g for g in (link.a, link.b) if g in fabric.switches)
        if a is not None and b is not None:
            lo, hi = (a, b) if (a.tier or 0) <= (b.tier or 0) else (b, a)
            if lo.tier == 1 and hi.tier == 2:
                up[lo.guid] += link.gbps
        elif a is not None and link.b in hosted:
            down[a.guid] += link.gbps
        elif b is not None and link.a in hosted:
            down[b.guid] += link.gbps
    out = []
    leaves: list[Switch] = [s for s in fabric.switches.values() if s.tier == 1]
    for leaf in leaves:
        d, u = down.get(leaf.guid, 0.0), up.get(leaf.guid, 0.0)
        if d <= u or d == 0 or leaf.guid in unknown:
            continue
        if u == 0 and len(fabric.tiers()) < 2:
            continue  # a one-switch fabric has no uplinks to miss
        ratio = d / u if u else None
        out.append(
            FabricFinding(
                kind=LEAF_OVERSUBSCRIBED,
                severity="critical" if u == 0 else "warning",
                switches=(leaf.name,),
                hosts=(),
                evidence={"host_gbps": d, "uplink_gbps": u, "ratio": ratio},
                advice="Hosts under this leaf can send more than its uplinks carry: restore "
                "missing uplinks or move hosts to a leaf with room.",
                message=(
                    f"{leaf.name} carries {d:g} Gb/s of hosts on "
                    + (f"{u:g} Gb/s of uplinks ({ratio:.2f}:1)." if ratio else "no uplink.")
                ),
            )
        )
    return out


def _unnamed(fabric: Fabric) -> list[FabricFinding]:
    unnamed = [h for host in fabric.hosts if host.hostname is None for h in host.hcas]
    if not unnamed:
        return []
    leaves = sorted({fabric.name(h.switch) for h in unnamed if h.switch}, key=natural_key)
    return [
        FabricFinding(
            kind=UNNAMED_HCAS,
            severity="info",
            switches=tuple(leaves),
            hosts=tuple(f"H-{h.guid}" for h in unnamed),
            evidence={
                "hcas": [
                    {
                        "guid": h.guid,
                        "description": h.description,
                        "switch": fabric.name(h.switch) if h.switch else None,
                        "port": h.port,
                    }
                    for h in unnamed
                ]  # fmt: skip
            },
            advice="Set the hosts' NodeDescription (rdma-core sets it at boot), or run the "
            "collector on them: it sends each host's HCA GUIDs, which name these.",
            message=f"{len(unnamed)} HCA(s) carry a NodeDescription not of the form `<hostname> "
            "<device>` (a firmware default, or a bare name), so their host is "
            f"unknown from the capture alone (on {', '.join(leaves[:6])}"
            + (" and more" if len(leaves) > 6 else "")
            + ").",
        )
    ]


def _shared_hostnames(fabric: Fabric) -> list[FabricFinding]:
    """A hostname whose HCAs repeat a device name is more than one host (two machines left at
    `localhost`, a cloned image): the capture cannot tell which HCA is whose, so every place
    the name is used (rails, exports, placement) takes them as one host."""
    out = []
    for host in fabric.hosts:
        by_device: dict[str, list[Hca]] = defaultdict(list)
        for h in host.hcas:
            if h.name is not None:
                by_device[h.name].append(h)
        repeated = {d: hs for d, hs in by_device.items() if len(hs) > 1}
        if host.hostname is None or not repeated:
            continue
        leaves = sorted(
            {fabric.name(h.switch) for hs in repeated.values() for h in hs if h.switch},
            key=natural_key,
        )
        where = "; ".join(
            f"{d} on "
            + ", ".join(f"{fabric.name(h.switch) if h.switch else '?'} port {h.port}" for h in hs)
            for d, hs in sorted(repeated.items(), key=lambda kv: natural_key(kv[0]))
        )
        out.append(
            FabricFinding(
                kind=SHARED_HOSTNAME,
                severity="warning",
                switches=tuple(leaves),
                hosts=(host.hostname,),
                evidence={
                    "devices": {
                        d: [
                            {
                                "guid": h.guid,
                                "switch": fabric.name(h.switch) if h.switch else None,
                                "port": h.port,
                            }
                            for h in hs
                        ]
                        for d, hs in repeated.items()
                    }
                },
                advice="Give each host its own name in its HCAs' NodeDescription, or run the "
                "collector on them: it sends each host's HCA GUIDs, which take precedence.",
                message=f"{host.hostname} names more than one host: its HCAs repeat device "
                f"names ({where}); the fabric takes them as one host.",
            )
        )
    return out


# 2: the service adds each server's place; 3: shared_hostname findings; 4: a switch whose own
# block is missing gets no tier above spine.
FABRIC_ANALYSIS_VERSION = 4


def fabric_analysis(fabric: Fabric, skus: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The whole answer about one capture (the CLI prints it, the worker stores it): switches
    with their tiers, links, hosts with their rails, findings, warnings and a summary."""
    findings = fabric_findings(fabric, skus)
    doc = fabric.to_document()
    doc["findings"] = [f.to_document() for f in findings]
    tiers = Counter(s.tier_name for s in fabric.switches.values())
    doc["summary"] = {
        "version": FABRIC_ANALYSIS_VERSION,
        "tiers": len(fabric.tiers()),
        "switches": {name: tiers.get(name, 0) for name in TIER_NAMES.values() if name in tiers},
        "hosts": sum(1 for h in fabric.hosts if h.hostname is not None),
        "unnamed_hcas": sum(len(h.hcas) for h in fabric.hosts if h.hostname is None),
        "hcas": sum(len(h.hcas) for h in fabric.hosts),
        "links": len(fabric.links),
        "rails": len(set(fabric.rail_of_leaf.values())),
        "findings": dict(Counter(f.severity for f in findings)),
    }
    doc["rail_of_leaf"] = {fabric.name(g): r for g, r in fabric.rail_of_leaf.items()}
    return doc
