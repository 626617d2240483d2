"""Findings grouped by cause: one group per cause, with the GPU pairs (or devices) it touches.

A pure function of findings (whatever rule computed their expectations and severities), so a
page, the API and the acceptance report show one line per cause ("8 PIX GPU pairs measured
below their expectation, each 6 %") that opens to its members, instead of one line per pair.
The cause of a finding is its kind and severity plus what names the mechanism in its
evidence: the benchmark, the link class, the collective, the class the SKU shows; findings of
one kind that name the same mechanism share a cause.
P2P that is unavailable is one cause wherever it shows: the finding that says so and every
pair measured slow as a host-staged copy because of it are one line (NO_P2P)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

from topoweb.core.health.benchmarks import narrower_link_words
from topoweb.core.health.findings import (
    BELOW_EXPECTED_BANDWIDTH,
    DEGRADED_NVLINK,
    DOWNTRAINED_PCIE,
    P2P_UNAVAILABLE,
    SEVERITY_ORDER,
    Finding,
    Severity,
)

# Kinds found one device or pair at a time; every other kind already speaks for its cause.
PER_PAIR = (BELOW_EXPECTED_BANDWIDTH, DEGRADED_NVLINK, DOWNTRAINED_PCIE)
# The cause of a p2p_unavailable finding and of the host-staged copies it makes slow.
NO_P2P = P2P_UNAVAILABLE


@dataclass(frozen=True)
class FindingGroup:
    cause: str  # stable: the same mechanism on another server has the same cause
    kind: str
    severity: Severity
    title: str
    members: tuple[Finding, ...]

    @property
    def pairs(self) -> list[list[str]]:
        """The pairs (or devices) the cause touches, once each: a p2p_unavailable finding
        names its pairs in its evidence."""
        out: dict[frozenset[str], list[str]] = {}
        for f in self.members:
            named = [[p["a"], p["b"]] for p in f.evidence.get("pairs", ()) if "a" in p]
            for pair in named if f.kind == P2P_UNAVAILABLE and named else [list(f.devices)]:
                out.setdefault(frozenset(pair), pair)
        return list(out.values())

    @property
    def devices(self) -> list[str]:
        return list(dict.fromkeys(d for f in self.members for d in f.devices))

    def to_document(self) -> dict[str, Any]:
        return {
            "cause": self.cause,
            "kind": self.kind,
            "severity": self.severity,
            "title": self.title,
            "count": len(self.members),
            "pairs": self.pairs,
            "devices": self.devices,
            "advice": self.members[0].advice,
            "findings": [f.to_document() for f in self.members],
        }


def _directions(f: Finding) -> list[dict[str, Any]]:
    found = f.evidence.get("directions")
    return [d for d in found.values() if isinstance(d, dict)] if isinstance(found, dict) else []


def cause_of(f: Finding) -> str:
    """The cause key of a finding (see the module's docstring)."""
    if f.kind == P2P_UNAVAILABLE or _staged(f):
        # A host-staged copy is slow for one reason whatever its class or severity: no P2P.
        return NO_P2P
    if f.kind not in PER_PAIR:
        return "|".join((f.kind, f.severity, *f.devices))
    ev = f.evidence
    parts = [f.kind, f.severity, str(ev.get("benchmark", "")), str(ev.get("class", ""))]
    parts += [str(ev.get("sku_class", "")), str(ev.get("collective", "")), ""]
    if f.kind == BELOW_EXPECTED_BANDWIDTH and ev.get("fits_pcie"):  # a narrower link: its own
        parts += [str(ev["fits_pcie"])]
    if f.kind == DOWNTRAINED_PCIE:
        parts += [f"Gen{ev.get('current_gen')} x{ev.get('current_width')}"]
        parts += [f"Gen{ev.get('max_gen')} x{ev.get('max_width')}"]
    if f.kind == DEGRADED_NVLINK and "peers" in ev:  # a GPU's whole NVLink set: its own cause
        parts += list(f.devices)
    return "|".join(parts)


def _staged(f: Finding) -> bool:
    """A pair measured as a host-staged copy (its P2P unavailable)."""
    if f.kind not in PER_PAIR:
        return False
    return any(d.get("host_staged") for d in _directions(f)) or bool(f.evidence.get("host_staged"))


def _ratios(f: Finding) -> list[float]:
    found = [d["ratio"] for d in _directions(f) if isinstance(d.get("ratio"), int | float)]
    if not found and isinstance(f.evidence.get("ratio"), int | float):
        found = [f.evidence["ratio"]]
    return [float(r) for r in found]


def _share(low: float, high: float) -> str:
    a, b = round(low * 100), round(high * 100)
    return f"{a} %" if a == b else f"{a}-{b} %"


def _no_p2p_title(group: FindingGroup) -> str:
    """One line for P2P that is unavailable: on how many pairs, why, and what the pairs
    measured as host-staged copies."""
    said = [f for f in group.members if f.kind == P2P_UNAVAILABLE]
    slow = [f for f in group.members if f.kind != P2P_UNAVAILABLE]
    n = len(group.pairs)
    reasons = "; ".join(dict.fromkeys(str(f.evidence.get("reason", "")) for f in said))
    head = f"P2P unavailable on {n} GPU pair{'s' if n != 1 else ''}"
    head += f" ({reasons})" if reasons else ""
    ratios = [r for f in slow for r in _ratios(f)]
    if not ratios:
        return head
    what = slow[0].evidence.get("benchmark") or "the benchmark"
    return (
        f"{head}: their host-staged copies measured {_share(min(ratios), max(ratios))} "
        f"of a host-staged copy's expectation in {what}"
    )


def _title(group: FindingGroup) -> str:
    members = list(group.members)
    first = members[0]
    if len(members) == 1:
        return first.message
    if group.cause == NO_P2P:
        return _no_p2p_title(group)
    n = len(members)
    ev = first.evidence
    if first.kind == BELOW_EXPECTED_BANDWIDTH:
        ratios = [r for f in members for r in _ratios(f)]
        cls = "/".join(sorted({str(f.evidence.get("class")) for f in members})) or "these"
        what = ev.get("benchmark") or "the benchmark"
        share = f", each {_share(min(ratios), max(ratios))} of its expectation" if ratios else ""
        title = f"{n} {cls} GPU pairs measured below their expectation in {what}{share}"
        fits = ev.get("fits_pcie")  # the same in every member: part of the cause
        if isinstance(fits, list) and len(fits) == 3:
            title += ": " + narrower_link_words(*fits)
        return title
    if first.kind == DEGRADED_NVLINK:
        return (
            f"{n} GPU pairs are {ev.get('class', 'degraded')} where their SKU shows "
            f"{ev.get('sku_class', 'more NVLinks')}"
        )
    if first.kind == DOWNTRAINED_PCIE:
        return (
            f"{n} GPUs' PCIe links run at Gen{ev.get('current_gen')} x{ev.get('current_width')}, "
            f"capable of Gen{ev.get('max_gen')} x{ev.get('max_width')}"
        )
    return f"{n} x {first.message}"


def group_findings(findings: Iterable[Finding]) -> list[FindingGroup]:
    """One group per cause, most severe first, then in the order the findings came. A group
    is as severe as its most severe finding; the finding that names the cause leads it (a
    p2p_unavailable before the pairs it made slow), so its kind and advice are the group's."""
    by_cause: dict[str, list[Finding]] = {}
    for f in findings:
        by_cause.setdefault(cause_of(f), []).append(f)
    groups = []
    for cause, members in by_cause.items():
        members.sort(key=lambda f: f.kind != P2P_UNAVAILABLE)  # stable: the rest keep order
        worst = min((f.severity for f in members), key=SEVERITY_ORDER.__getitem__)
        group = FindingGroup(cause, members[0].kind, worst, "", tuple(members))
        groups.append(replace(group, title=_title(group)))
    order = {g.cause: i for i, g in enumerate(groups)}
    return sorted(groups, key=lambda g: (SEVERITY_ORDER[g.severity], order[g.cause]))


def group_documents(findings: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """group_findings over finding documents (as stored and served); each group's `findings`
    are the documents given (with whatever they carry, such as a stored id)."""
    docs = list(findings)
    parsed = [Finding.from_document(d) for d in docs]
    index = {id(f): i for i, f in enumerate(parsed)}
    out = []
    for g in group_findings(parsed):
        doc = g.to_document()
        doc["findings"] = [docs[index[id(f)]] for f in g.members]
        out.append(doc)
    return out
