"""`ibnetdiscover` output (the plain report) into an IbnetCapture: every switch and CA with its
GUID, description and port count, and every cabled link once, with both ports, width and speed.

The report prints each link twice, once in each end's block; where the two disagree on width
or speed, the slower is kept (a link runs no faster than either end) with a warning. `--full`
fields after a rate and `-g`'s chassis lines are read past. A block the capture cut off (a
node named by its peers but never printed, or a node with no port line) is read as far as it
goes, with a warning naming the line; a file with no switch at all is refused."""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

from topoweb.core.formats.errors import ParseError

NodeKind = Literal["switch", "ca", "router"]

# Gb/s of data per lane (DOMAIN.md "Between servers").
LANE_GBPS: dict[str, float] = {
    "SDR": 2.0,
    "DDR": 4.0,
    "QDR": 8.0,
    "FDR10": 10.0,
    "FDR": 13.6,
    "EDR": 25.0,
    "HDR": 50.0,
    "NDR": 100.0,
    "XDR": 200.0,
}
SPEED_ORDER: tuple[str, ...] = tuple(LANE_GBPS)
DOCUMENT_KIND = "ibnetdiscover"

_KINDS: dict[str, NodeKind] = {"Switch": "switch", "Ca": "ca", "Rt": "router"}
_PREFIX_KIND: dict[str, NodeKind] = {"S": "switch", "H": "ca", "R": "router"}
# `Switch  65 "S-2c5e..."  # "MF0;A09-P1-IBLEAF-04-04:MQM9701/U1" enhanced port 0 lid 73 lmc 0`
_NODE = re.compile(r'^(Switch|Ca|Rt)\s+(\d+)\s+"([SHR])-([0-9a-fA-F]+)"\s*(?:#\s*"(.*?)")?(.*)$')
# A switch's port: `[1]  "H-e09d..."[1](e09d...)  # "a08-p1-dgx-04-c01 mlx5_5" lid 647 4xNDR`;
# a CA's port puts its own port first: `[1](e09d...)  "S-2c5e..."[17]  # lid 657 lmc 0 "desc"
# lid 73 4xNDR`. `[ext N]` and `{...}` port annotations of some switches are skipped.
_PORT = re.compile(
    r'^\[(\d+)\](?:\[ext \d+\])?(?:\([0-9a-fA-F]+\))?\s*"([SHR])-([0-9a-fA-F]+)"\[(\d+)\]'
    r"(?:\([0-9a-fA-F]+\))?(?:\[ext \d+\])?\s*#(.*)$"
)
# A node line whose GUID is masked (`"S-9c05<redacted>"`, `"H-xxxx"`).
_HIDDEN_GUID = re.compile(r'^(Switch|Ca|Rt)\s+\d+\s+"([SHR]-[^"]*)"')
_HEADERS = ("vendid=", "devid=", "sysimgguid=", "switchguid=", "caguid=", "rtguid=")
# What `ibnetdiscover -g` (grouping) prints between blocks: a chassis's title, an Xsigo
# chassis's host, and the title of the nodes in no chassis (rdma-core's dump_topology).
_GROUPING = ("Chassis ", "Non-Chassis Nodes", "Hostname: ")
# The rate ends the line, unless `ibnetdiscover --full` follows it with the port's raw fields
# (` s=4 w=2 v=4`, and ` e=4` where extended speeds are on) or Xsigo gear with ` slot N` or
# ` (scp)`: what rdma-core's ibnetdiscover.c prints after it.
# An ibnetdiscover older than a link's width or speed prints `??` for the width and `???` for
# the speed (its own conversion tables, rdma-core's ibnetdiscover.c): `4x???` on an HDR or NDR
# link, read as a link of unknown speed (0 lanes: unknown width).
_RATE = re.compile(
    r"(?<!\S)(?:(\d+)x|\?\?)([A-Z]+\d*|\?\?\?)(?:\s+[swve]=\d+)*(?:\s+slot \d+|\s+\(scp\))?\s*$"
)
UNKNOWN_SPEED = "???"
# What libibnetdisc prints to stderr when a query gets no answer, mixed into a capture taken
# with `2>&1`: `src/query_smp.c:195; umad (DR path slid 0; dlid 0; 0,1,1,31 Attr 0x11:0) bad
# status 110; Connection timed out`.
_DR_FAILURE = re.compile(
    r"umad \(DR path (?:slid \d+; dlid \d+; )?([\d,]+) .*?\) bad status \d+;(.*)$"
)
_DESC = re.compile(r'"(.*?)"')
_LID = re.compile(r"\blid (\d+)")


class IbNode(NamedTuple):
    guid: str  # 16 lower-case hex digits, no 0x
    kind: NodeKind
    description: str
    ports: int | None  # from the node's header line; None when only its peers name it
    line: int  # where its block starts (or where a peer first names it)
    lid: int | None = None

    def to_document(self) -> dict[str, Any]:
        return {
            "guid": self.guid,
            "kind": self.kind,
            "description": self.description,
            "ports": self.ports,
            "line": self.line,
            "lid": self.lid,
        }

    @classmethod
    def from_document(cls, doc: dict[str, Any]) -> IbNode:
        kind = doc["kind"]
        if kind not in _PREFIX_KIND.values():
            raise ValueError(f"unknown node kind {kind!r}")
        return cls(
            guid=str(doc["guid"]),
            kind=kind,
            description=str(doc["description"]),
            ports=None if doc.get("ports") is None else int(doc["ports"]),
            line=int(doc["line"]),
            lid=None if doc.get("lid") is None else int(doc["lid"]),
        )


class IbLink(NamedTuple):
    a: str
    a_port: int
    b: str
    b_port: int
    width: int  # lanes: 4 in `4xNDR`
    speed: str  # lane speed: NDR in `4xNDR`
    line: int

    @property
    def rate(self) -> str:
        return f"{self.width}x{self.speed}" if self.width else f"??{self.speed}"

    @property
    def known(self) -> bool:
        """Whether ibnetdiscover knew its width and speed (see _RATE)."""
        return self.width > 0 and self.speed in LANE_GBPS

    @property
    def gbps(self) -> float:
        return self.width * LANE_GBPS.get(self.speed, 0.0)

    def to_document(self) -> list[Any]:
        return [self.a, self.a_port, self.b, self.b_port, self.width, self.speed, self.line]

    @classmethod
    def from_document(cls, row: list[Any]) -> IbLink:
        a, a_port, b, b_port, width, speed, line = row
        return cls(str(a), int(a_port), str(b), int(b_port), int(width), str(speed), int(line))


@dataclass(frozen=True)
class IbnetCapture:
    """What one `ibnetdiscover` run printed: nodes by GUID in file order, links once each."""

    nodes: dict[str, IbNode]
    links: tuple[IbLink, ...]
    warnings: tuple[str, ...] = ()

    def to_document(self) -> dict[str, Any]:
        return {
            "kind": DOCUMENT_KIND,
            "nodes": [n.to_document() for n in self.nodes.values()],
            "links": [lk.to_document() for lk in self.links],
            "warnings": list(self.warnings),
        }

    @classmethod
    def from_document(cls, doc: dict[str, Any]) -> IbnetCapture:
        if not isinstance(doc, dict) or doc.get("kind") != DOCUMENT_KIND:
            raise ValueError("not an ibnetdiscover document")
        nodes = [IbNode.from_document(n) for n in doc["nodes"]]
        return cls(
            nodes={n.guid: n for n in nodes},
            links=tuple(IbLink.from_document(r) for r in doc["links"]),
            warnings=tuple(str(w) for w in doc.get("warnings", ())),
        )


def _rate(comment: str) -> tuple[int, str] | None:
    m = _RATE.search(comment)
    if m is None:
        return None
    return int(m.group(1) or 0), m.group(2)


def _port_line(raw: str) -> tuple[int, str, str, int, str] | None:
    """(port, peer kind letter, peer GUID, peer port, comment) of a port line, by string
    operations for the two shapes ibnetdiscover prints (the regex is the fallback): a port
    line is most of a large report."""
    try:
        close = raw.index("]")
        port = int(raw[1:close])
        q1 = raw.index('"', close)
        q2 = raw.index('"', q1 + 1)
        peer = raw[q1 + 1 : q2]
        between = raw[close + 1 : q1].strip()  # nothing, or the CA's own `(port guid)`
        if between and not (between[0] == "(" and between[-1] == ")"):
            raise ValueError(between)
        if raw[q2 + 1] != "[" or peer[1] != "-":
            raise ValueError(peer)
        close2 = raw.index("]", q2)
        peer_port = int(raw[q2 + 2 : close2])
        hash_at = raw.index("#", close2)
    except (ValueError, IndexError):
        m = _PORT.match(raw)
        if m is None:
            return None
        return int(m.group(1)), m.group(2), m.group(3), int(m.group(4)), m.group(5)
    return port, peer[0], peer[2:], peer_port, raw[hash_at + 1 :]


_RATES: dict[str, tuple[int, str]] = {}


def _rate_of(comment: str) -> tuple[int, str] | None:
    """`... lid 647 4xNDR` -> (4, "NDR"); a report repeats a few rates, each read once."""
    last = comment.rsplit(None, 1)[-1] if comment.strip() else ""
    known = _RATES.get(last)
    if known is not None:
        return known
    found = _rate(comment)
    if found is not None and f"{found[0]}x{found[1]}" == last and len(_RATES) < 64:
        _RATES[last] = found
    return found


def parse(text: str) -> IbnetCapture:
    if text.lstrip("\r\n")[:1] in (" ", "\t"):
        # A capture indented as a block (a man page, a code block in docs): its lines read as
        # printed once the indent they share is gone. Checked on the first line only, so that
        # a fabric's tens of megabytes are not scanned for it.
        text = textwrap.dedent(text)
    nodes: dict[str, IbNode] = {}
    # Peers not printed yet: (kind letter, first line naming them, that line's comment).
    named_by_peer: dict[str, tuple[str, int, str]] = {}
    links: dict[tuple[str, int], IbLink] = {}  # keyed by both ends
    ordered: list[IbLink] = []
    order: dict[int, int] = {}  # a link's line -> its place in `ordered`
    warnings: list[str] = []
    current: IbNode | None = None
    current_ports = 0
    node_re = _NODE.match

    def close_block() -> None:
        if current is not None and current_ports == 0:
            warnings.append(
                f"line {current.line}: {current.kind} {current.description or current.guid!r} "
                "has no connected port listed (a cut-off capture, or a node with no cable)"
            )

    for number, raw in enumerate(text.split("\n"), start=1):
        if not raw or raw[0] == "#":
            continue
        first = raw[0]
        if first in "vdsc" and raw.startswith(_HEADERS):
            continue
        if first == "[" and not raw[1:2].isdigit():
            pass  # a shell prompt (`[root@host ~]# ibnetdiscover`), not a port: warned below
        elif first == "[":
            if current is None:
                warnings.append(f"line {number}: a port line outside any node block, skipped")
                continue
            # Most port lines are a link's second end: its port number finds it.
            close = raw.find("]")
            seen = links.get((current.guid, int(raw[1:close]))) if raw[1:close].isdigit() else None
            if seen is not None:
                current_ports += 1
                token = raw.rsplit(None, 1)[-1]
                if token != seen.rate:  # or the rate is followed by --full's fields
                    rate = _rate_of(raw)
                    shown = seen._replace(width=rate[0], speed=rate[1]).rate if rate else token
                    if shown != seen.rate:
                        # A link runs no faster than either end says (one caught retraining).
                        this_end = seen._replace(width=rate[0], speed=rate[1]) if rate else seen
                        kept = this_end if this_end.gbps < seen.gbps else seen
                        warnings.append(
                            f"line {number}: the two ends of the link of line {seen.line} "
                            f"disagree ({seen.rate} there, {shown} here); {kept.rate} is kept"
                        )
                        if kept is this_end:
                            links[(seen.a, seen.a_port)] = links[(seen.b, seen.b_port)] = kept
                            ordered[order[seen.line]] = kept
                continue
            fields = _port_line(raw)
            if fields is None:
                warnings.append(f"line {number}: not a port line ibnetdiscover prints, skipped")
                continue
            port, peer_kind, peer, peer_port, comment = fields
            rate = _rate_of(comment)
            if rate is None or peer_kind not in _PREFIX_KIND:
                warnings.append(f"line {number}: a port line without a width and speed, skipped")
                continue
            peer = peer.lower()
            here = (current.guid, port)
            current_ports += 1
            if peer not in nodes and peer not in named_by_peer:
                named_by_peer[peer] = (peer_kind, number, comment)
            link = IbLink(current.guid, port, peer, peer_port, rate[0], rate[1], number)
            links[here] = link
            links[(peer, peer_port)] = link
            order[number] = len(ordered)
            ordered.append(link)
            continue
        if first in "SCR":
            m = node_re(raw)
            if m is not None:
                close_block()
                kind_word, count, _, guid, desc, rest = m.groups()
                guid = guid.lower()
                lid = _LID.search(rest)
                current = IbNode(
                    guid,
                    _KINDS[kind_word],
                    (desc or "").strip(),
                    int(count),
                    number,
                    int(lid.group(1)) if lid else None,
                )
                current_ports = 0
                if guid in nodes:
                    raise ParseError(f"node {guid} is printed twice (first at line "
                                     f"{nodes[guid].line})", line=number)  # fmt: skip
                nodes[guid] = current
                named_by_peer.pop(guid, None)
                continue
            hidden = _HIDDEN_GUID.match(raw)
            if hidden is not None:
                # GUIDs join a link's two ends: a capture with them masked cannot be read.
                raise ParseError(
                    f'the node GUID "{hidden.group(2)}" is not hexadecimal (redacted?): links '
                    "are joined by their ends' GUIDs, so the capture cannot be read; send it "
                    "unredacted, or with each GUID replaced by another hex GUID consistently",
                    line=number,
                )
        if raw.isspace() or raw.startswith(_HEADERS) or raw.startswith(_GROUPING):
            continue
        failed = _DR_FAILURE.search(raw)
        if failed is not None:
            warnings.append(
                f"line {number}: ibnetdiscover's query to the node at directed route "
                f"{failed.group(1)} failed ({failed.group(2).strip()}): that node, and what only "
                "it leads to, may be missing from the capture"
            )
            continue
        warnings.append(f"line {number}: not an ibnetdiscover line, skipped: {raw[:60]!r}")
    close_block()

    if not any(n.kind == "switch" for n in nodes.values()):
        last = max(nodes.values(), key=lambda n: n.line, default=None)
        where = (
            f"the capture ends after {last.kind} {last.description or last.guid!r}"
            + (" with no port line" if current_ports == 0 else "")
            if last is not None
            else "the capture has no node block"
        )
        raise ParseError(
            f"{where} and holds no switch ({len(nodes)} node(s), {len(ordered)} link(s)): "
            "nothing to build a fabric from; was it cut off?",
            line=last.line if last is not None else None,
        )
    unknown = [lk for lk in ordered if not lk.known]
    if unknown:
        warnings.append(
            f"line {unknown[0].line}: {len(unknown)} link(s) print their rate as "
            f"{unknown[0].rate!r}: the ibnetdiscover that wrote the capture predates that link "
            "width or speed, so their bandwidth is unknown and no rate is judged on them"
        )
    for guid, (letter, line, comment) in named_by_peer.items():
        descs = _DESC.findall(comment)
        node = IbNode(guid, _PREFIX_KIND[letter], descs[-1] if descs else "", None, line)
        warnings.append(
            f"line {line}: {node.kind} {node.description or guid!r} (GUID {guid}) is "
            "named by a peer but its own block is missing (a cut-off capture?)"
        )
        nodes[guid] = node
    return IbnetCapture(nodes=nodes, links=tuple(ordered), warnings=tuple(warnings))
