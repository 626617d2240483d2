"""The structure of an InfiniBand fabric, recovered from the graph an `ibnetdiscover` capture
gives (never from switch names): which switches are leaves (they carry hosts' HCAs), spines
(above the leaves) and cores (above those); which host each HCA belongs to (its NodeDescription
`<hostname> <device>`, or the HCA GUIDs a host's collector sent); and each host's rails (the
leaf its HCA k hangs off). `fabric_findings` (core/fabric_findings.py) checks it."""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from topoweb.core.formats.ibnet import IbLink, IbnetCapture, IbNode

TIER_NAMES = {1: "leaf", 2: "spine", 3: "core"}
# topograph's rule for a switch's NodeDescription `MF0;<name>:<model>/U1`.
_SWITCH_NAME = re.compile(r"^[^;:]+;([^;:]+):[^;:]+$")
# A host sets its HCAs' NodeDescription to `<hostname> <device>`; an unset one keeps the
# firmware's default (`MT4129 ConnectX7   Mellanox Technologies`), which has more words.
_HOST_DEVICE = re.compile(r"^(\S+)\s(\S+)$")
# SHARP aggregation nodes are CAs inside the switches; they are not hosts.
_AGGREGATION = "Aggregation Node"
_DIGITS = re.compile(r"(\d+)")


def normal_guid(guid: str) -> str:
    """`0xE09D...`, `e09d:7303:007a:4bd8` (sysfs node_guid) -> `e09d7303007a4bd8`."""
    return guid.strip().lower().removeprefix("0x").replace(":", "")


def tier_name(tier: int | None) -> str:
    if tier is None:
        return "unreached"
    return TIER_NAMES.get(tier, f"tier-{tier}")


def natural_key(text: str) -> tuple[Any, ...]:
    """`mlx5_10` after `mlx5_9`; `HCA-2` after `HCA-1`."""
    return tuple(int(p) if p.isdigit() else p for p in _DIGITS.split(text))


@dataclass(frozen=True, slots=True)
class Switch:
    guid: str
    name: str
    description: str
    ports: int | None
    tier: int | None  # 1 leaf, 2 spine, 3 core; None: no host reaches it, or see _tiers

    @property
    def tier_name(self) -> str:
        if self.tier is None and self.ports is None:
            return "unknown"  # its own block is missing: see _tiers
        return tier_name(self.tier)


@dataclass(frozen=True, slots=True)
class Hca:
    guid: str
    name: str | None  # the device (`mlx5_5`, `HCA-6`); None with a default NodeDescription
    description: str
    hostname: str | None
    switch: str | None  # GUID of the switch its port 1 is cabled to
    port: int | None  # that switch's port
    rate: str | None
    gbps: float
    rail: int | None  # 0-based: the k of "HCA k" among the devices of its kind of host


@dataclass(frozen=True)
class Host:
    hostname: str | None  # None: an HCA with the default NodeDescription and no known GUID
    hcas: tuple[Hca, ...]

    @property
    def key(self) -> str:
        return self.hostname if self.hostname is not None else f"H-{self.hcas[0].guid}"


@dataclass(frozen=True)
class Fabric:
    switches: dict[str, Switch]  # by GUID, in capture order
    links: tuple[IbLink, ...]
    hosts: tuple[Host, ...]
    aggregation_nodes: tuple[str, ...]  # GUIDs of SHARP aggregation-node CAs
    rail_of_leaf: dict[str, int]  # leaf GUID -> the rail most of its HCAs belong to
    warnings: tuple[str, ...]
    nodes: dict[str, IbNode] = field(repr=False)

    def name(self, guid: str) -> str:
        sw = self.switches.get(guid)
        if sw is not None:
            return sw.name
        node = self.nodes.get(guid)
        return node.description if node is not None and node.description else guid

    def tiers(self) -> list[int]:
        return sorted({s.tier for s in self.switches.values() if s.tier is not None})

    def switch_links(self) -> list[tuple[Switch, int, Switch, int, IbLink]]:
        """Links between two switches, lower tier first (leaf, then spine)."""
        out = []
        for link in self.links:
            a, b = self.switches.get(link.a), self.switches.get(link.b)
            if a is None or b is None:
                continue
            if (b.tier or 0, b.guid) < (a.tier or 0, a.guid):
                out.append((b, link.b_port, a, link.a_port, link))
            else:
                out.append((a, link.a_port, b, link.b_port, link))
        return out

    def host_of_hca(self) -> dict[str, Host]:
        return {h.guid: host for host in self.hosts for h in host.hcas}

    def to_document(self) -> dict[str, Any]:
        """The CLI's and the API's shape: switches, links, hosts with their HCAs, warnings."""
        name = self.name
        return {
            "switches": [
                {"name": s.name, "guid": s.guid, "tier": s.tier_name, "ports": s.ports}
                for s in self.switches.values()
            ],
            "links": [
                {
                    "a": name(lk.a),
                    "a_port": lk.a_port,
                    "b": name(lk.b),
                    "b_port": lk.b_port,
                    "width": f"{lk.width}x",
                    "speed": lk.speed,
                    "gbps": lk.gbps,
                }
                for lk in self.links
            ],
            "hosts": [
                {
                    "hostname": host.hostname,
                    "hcas": [
                        {
                            "name": h.name,
                            "guid": h.guid,
                            "switch": name(h.switch) if h.switch else None,
                            "port": h.port,
                            "rail": h.rail,
                            "rate": h.rate,
                        }
                        for h in host.hcas
                    ],
                }
                for host in self.hosts
            ],
            "warnings": list(self.warnings),
        }


def _switch_names(switches: list[IbNode]) -> dict[str, str]:
    names: dict[str, str] = {}
    for node in switches:
        m = _SWITCH_NAME.match(node.description)
        names[node.guid] = (m.group(1) if m else node.description.strip()) or f"S-{node.guid}"
    guids_of: dict[str, list[str]] = defaultdict(list)
    for g, n in names.items():
        guids_of[n].append(g)
    out: dict[str, str] = {}
    for n, guids in guids_of.items():
        if len(guids) == 1:
            out[guids[0]] = n
            continue
        # The GUID's tail tells switches of one name apart: as many digits as that takes
        # (GUIDs of one vendor can share their last four).
        k = next(k for k in range(4, 17) if len({g[-k:] for g in guids}) == len(guids))
        out.update((g, f"{n}~{g[-k:]}") for g in guids)
    return {g: out[g] for g in names}


def _tiers(
    switch_guids: set[str],
    leaves: set[str],
    neighbours: Mapping[str, set[str]],
    blockless: set[str],
) -> dict[str, int]:
    """Breadth-first from the leaves: a switch's tier is one above the lowest it touches.
    A switch whose own block is missing (`blockless`: only its peers' lines name it) gets a
    tier only up to spine: touching a leaf, it is a spine, as trees are cabled; touching only
    spines, it may be a core or a leaf whose hosts were cut off with its block."""
    tier = dict.fromkeys(leaves, 1)
    frontier = sorted(leaves)
    level = 1
    while frontier:
        level += 1
        nxt = []
        for guid in frontier:
            for peer in neighbours.get(guid, ()):
                if peer in blockless and level > 2:
                    continue
                if peer in switch_guids and peer not in tier:
                    tier[peer] = level
                    nxt.append(peer)
        frontier = nxt
    return tier


def connected_groups(items: Iterable[str], together: Iterable[Iterable[str]]) -> list[list[str]]:
    """`items` grouped where `together` joins them (the members of each inner iterable belong
    to one group, and groups sharing a member merge): groups in the order of their first item,
    members in item order."""
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        while parent.setdefault(x, x) != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for members in together:
        first: str | None = None
        for m in members:
            if first is None:
                first = m
            else:
                parent[find(m)] = find(first)
    groups: dict[str, list[str]] = {}
    for x in items:
        groups.setdefault(find(x), []).append(x)
    return list(groups.values())


def _rails(devices_by_host: Mapping[str, list[str]]) -> dict[str, int]:
    """Rail of each device name: devices that share a host form one kind of host (DGX hosts
    named `HCA-1..` and others `mlx5_0..` in one fabric); rail k is the kth of its kind in
    natural order, so a host missing one HCA does not shift its other rails."""
    devices = list(dict.fromkeys(d for names in devices_by_host.values() for d in names))
    groups = connected_groups(devices, devices_by_host.values())
    return {d: k for members in groups for k, d in enumerate(sorted(members, key=natural_key))}


def build_fabric(
    capture: IbnetCapture, guid_hosts: Mapping[str, tuple[str, str]] | None = None
) -> Fabric:
    """`guid_hosts`: HCA node GUID -> (hostname, device), from the hosts' collectors; it names
    HCAs whose NodeDescription was never set."""
    known = {normal_guid(g): h for g, h in (guid_hosts or {}).items()}
    nodes = capture.nodes
    warnings = list(capture.warnings)
    switch_nodes = [n for n in nodes.values() if n.kind == "switch"]
    names = _switch_names(switch_nodes)
    switch_guids = {n.guid for n in switch_nodes}

    neighbours: dict[str, set[str]] = defaultdict(set)
    hca_port: dict[str, tuple[str, int, IbLink]] = {}  # CA GUID -> (switch GUID, port, link)
    for link in capture.links:
        neighbours[link.a].add(link.b)
        neighbours[link.b].add(link.a)
        if link.a in switch_guids and link.b not in switch_guids:
            hca_port.setdefault(link.b, (link.a, link.a_port, link))
        elif link.b in switch_guids and link.a not in switch_guids:
            hca_port.setdefault(link.a, (link.b, link.b_port, link))

    aggregation = tuple(
        n.guid for n in nodes.values() if n.kind == "ca" and _AGGREGATION in n.description
    )
    agg_set = set(aggregation)
    host_cas = [n for n in nodes.values() if n.kind == "ca" and n.guid not in agg_set]

    for link in capture.links:
        if link.a == link.b:
            warnings.append(
                f"line {link.line}: {names.get(link.a, link.a)} port {link.a_port} is cabled to "
                f"its own port {link.b_port} (a loopback: it joins the switch to no other)"
            )

    # Host and device of each HCA.
    named: dict[str, tuple[str | None, str | None]] = {}
    for n in host_cas:
        m = _HOST_DEVICE.match(n.description.strip())
        hostname, device = (m.group(1), m.group(2)) if m else (None, None)
        if n.guid in known:
            told_host, told_device = known[n.guid]
            if hostname is not None and hostname != told_host:
                warnings.append(
                    f"HCA {n.guid}: NodeDescription says host {hostname!r}, its collector "
                    f"says {told_host!r}; the collector is kept"
                )
            hostname, device = told_host, device or told_device
        named[n.guid] = (hostname, device)
    devices_by_host: dict[str, list[str]] = defaultdict(list)
    for hostname, device in named.values():
        if hostname is not None and device is not None:
            devices_by_host[hostname].append(device)
    rail_of_device = _rails(devices_by_host)

    leaves = {hca_port[g][0] for g in named if g in hca_port}
    blockless = {n.guid for n in switch_nodes if n.ports is None}
    tiers = _tiers(switch_guids, leaves, neighbours, blockless)
    switches = {
        n.guid: Switch(n.guid, names[n.guid], n.description, n.ports, tiers.get(n.guid))
        for n in switch_nodes
    }
    untiered = [s for s in switches.values() if s.tier is None]
    unreached = [s.name for s in untiered if s.guid not in blockless]
    if unreached:
        warnings.append(
            f"{len(unreached)} switch(es) no host reaches, left without a tier: "
            + ", ".join(unreached[:10])
        )
    unknown = [s.name for s in untiered if s.guid in blockless]
    if unknown:
        warnings.append(
            f"{len(unknown)} switch(es) whose own block is missing, seen only from spines, "
            "left without a tier (a core, or a leaf whose hosts were cut off with it): "
            + ", ".join(unknown[:10])
        )

    # Each leaf's rail: the one more than half of its named HCAs belong to. A leaf with no such
    # rail, or where most hosts cable more than one HCA, serves whole hosts: no rail's leaf.
    rails_on_leaf: dict[str, Counter[int]] = defaultdict(Counter)
    hcas_of_host_on_leaf: dict[str, Counter[str]] = defaultdict(Counter)
    for guid, (hostname, device) in named.items():
        if device is not None and guid in hca_port and device in rail_of_device:
            rails_on_leaf[hca_port[guid][0]][rail_of_device[device]] += 1
            hcas_of_host_on_leaf[hca_port[guid][0]][str(hostname)] += 1
    rail_of_leaf: dict[str, int] = {}
    for leaf, c in rails_on_leaf.items():
        top, count = min(c.items(), key=lambda kv: (-kv[1], kv[0]))
        per_host = hcas_of_host_on_leaf[leaf].values()
        if 2 * count > c.total() and 2 * sum(n > 1 for n in per_host) <= len(per_host):
            rail_of_leaf[leaf] = top

    by_host: dict[str, list[Hca]] = defaultdict(list)
    unnamed: list[Hca] = []
    for n in host_cas:
        hostname, device = named[n.guid]
        attached = hca_port.get(n.guid)
        sw, port, link = attached if attached else (None, None, None)  # type: ignore[assignment]
        rail = rail_of_device.get(device) if device is not None else None
        if rail is None and sw is not None and hostname is None:
            rail = rail_of_leaf.get(sw)  # an unnamed HCA: the rail of the leaf it sits on
        hca = Hca(
            guid=n.guid,
            name=device,
            description=n.description,
            hostname=hostname,
            switch=sw,
            port=port,
            rate=link.rate if link else None,
            gbps=link.gbps if link else 0.0,
            rail=rail,
        )
        (by_host[hostname] if hostname is not None else unnamed).append(hca)
    hosts = [
        Host(
            h,
            tuple(
                sorted(
                    hcas,
                    key=lambda x: (
                        x.rail if x.rail is not None else 1 << 30,
                        natural_key(x.name or ""),
                        x.guid,
                    ),
                )
            ),
        )  # fmt: skip
        for h, hcas in sorted(by_host.items(), key=lambda kv: natural_key(kv[0]))
    ]
    hosts.extend(Host(None, (h,)) for h in unnamed)
    return Fabric(
        switches=switches,
        links=capture.links,
        hosts=tuple(hosts),
        aggregation_nodes=aggregation,
        rail_of_leaf=rail_of_leaf,
        warnings=tuple(warnings),
        nodes=nodes,
    )


DIFF_LIMIT = 500  # entries listed per kind of change; the counts are always whole


def _listed(items: list[Any]) -> dict[str, Any]:
    return {"count": len(items), "items": items[:DIFF_LIMIT]}


def diff_fabrics(old: Fabric, new: Fabric) -> dict[str, Any]:
    """What changed between two captures of one fabric: switches and HCAs added or removed (by
    GUID), links added or removed (by both ends' GUID and port), links whose rate changed, and
    HCAs cabled to another switch or port. Lists stop at DIFF_LIMIT; counts do not."""

    def ends(link: IbLink) -> tuple[tuple[str, int], tuple[str, int]]:
        a, b = (link.a, link.a_port), (link.b, link.b_port)
        return (a, b) if a <= b else (b, a)

    def link_doc(fabric: Fabric, link: IbLink) -> dict[str, Any]:
        return {
            "a": fabric.name(link.a),
            "a_port": link.a_port,
            "b": fabric.name(link.b),
            "b_port": link.b_port,
            "rate": link.rate,
        }

    old_links = {ends(lk): lk for lk in old.links}
    new_links = {ends(lk): lk for lk in new.links}
    changed = [
        {**link_doc(new, lk), "was": old_links[key].rate}
        for key, lk in new_links.items()
        if key in old_links and old_links[key].rate != lk.rate
    ]
    old_hcas = {h.guid: (host, h) for host in old.hosts for h in host.hcas}
    new_hcas = {h.guid: (host, h) for host in new.hosts for h in host.hcas}

    def hca_doc(fabric: Fabric, host: Host, h: Hca) -> dict[str, Any]:
        return {
            "host": host.hostname,
            "hca": h.name,
            "guid": h.guid,
            "switch": fabric.name(h.switch) if h.switch else None,
            "port": h.port,
        }

    moved = []
    for guid, (host, h) in new_hcas.items():
        if guid in old_hcas:
            _, before = old_hcas[guid]
            if (before.switch, before.port) != (h.switch, h.port):
                moved.append(
                    {
                        **hca_doc(new, host, h),
                        "was_switch": old.name(before.switch) if before.switch else None,
                        "was_port": before.port,
                    }
                )
    return {
        "switches": {
            "added": _listed([s.name for g, s in new.switches.items() if g not in old.switches]),
            "removed": _listed([s.name for g, s in old.switches.items() if g not in new.switches]),
        },
        "links": {
            "added": _listed(
                [link_doc(new, lk) for k, lk in new_links.items() if k not in old_links]
            ),
            "removed": _listed(
                [link_doc(old, lk) for k, lk in old_links.items() if k not in new_links]
            ),
            "rate_changed": _listed(changed),
        },
        "hcas": {
            "added": _listed([hca_doc(new, *new_hcas[g]) for g in new_hcas if g not in old_hcas]),
            "removed": _listed([hca_doc(old, *old_hcas[g]) for g in old_hcas if g not in new_hcas]),
            "moved": _listed(moved),
        },
    }
