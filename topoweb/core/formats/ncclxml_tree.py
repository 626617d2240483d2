"""NCCL topology XML text into a tree of elements, the first half of reading it: size and element
limits, text before and after the XML, truncation or a comment saying content was left out,
and the attribute values NCCL's own reader cannot take. Entities and DTDs are refused outright."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from xml.parsers import expat

from topoweb.core.formats.errors import ParseError

MAX_XML_CHARS = 4 * 2**20  # a 64-GPU dump is ~100 kB; NCCL itself stops at a few thousand nodes
MAX_XML_NODES = 20_000

_TRUNCATED = {
    expat.errors.codes[expat.errors.XML_ERROR_NO_ELEMENTS],
    expat.errors.codes[expat.errors.XML_ERROR_UNCLOSED_TOKEN],
    expat.errors.codes[expat.errors.XML_ERROR_PARTIAL_CHAR],
    expat.errors.codes[expat.errors.XML_ERROR_UNCLOSED_CDATA_SECTION],
}
_JUNK_AFTER = expat.errors.codes[expat.errors.XML_ERROR_JUNK_AFTER_DOC_ELEMENT]
_START = re.compile(r"<(\?xml|system)\b")
# A comment inside the tree saying content was cut from it: `<!-- ... 7 more similar blocks -->`.
_ELIDED = re.compile(
    r"\.\.\.|\u2026|\b(?:elid|omit|truncat)\w*|\b(?:more|similar|snip(?:ped)?)\b", re.I
)


UNWRITABLE = re.compile(r'["<>&\n]')


def writable(text: str) -> bool:
    """Whether an attribute value can be written for NCCL's reader as it is."""
    return len(text) <= 255 and UNWRITABLE.search(text) is None


@dataclass
class Node:
    tag: str
    attrs: dict[str, str]
    line: int
    parent: Node | None = None
    children: list[Node] = field(default_factory=list)
    closed: bool = False

    def walk(self) -> Iterator[Node]:
        yield self
        for c in self.children:
            yield from c.walk()

    def to_document(self) -> dict[str, Any]:
        # Pairs, not an object: a JSONB column reorders object keys, and the file written back
        # should read like the one that came in.
        doc: dict[str, Any] = {"tag": self.tag, "attrs": [[k, v] for k, v in self.attrs.items()]}
        if self.children:
            doc["children"] = [c.to_document() for c in self.children]
        return doc


class _Refused(Exception):
    def __init__(self, message: str, line: int) -> None:
        self.message = message
        self.line = line


def looks_like_ncclxml(text: str) -> bool:
    """A `<system>` element near the top: what every NCCL topology file starts with."""
    head = text.lstrip()[:4096]
    return head.startswith("<") and _START.search(head) is not None


def read_tree(text: str) -> tuple[Node, list[str]]:
    if len(text) > MAX_XML_CHARS:
        raise ParseError(f"the XML is {len(text)} characters; more than {MAX_XML_CHARS} is refused")
    warnings: list[str] = []
    start = _START.search(text)
    if start is None:
        raise ParseError("no <system> element: not an NCCL topology XML", line=1)
    offset = text.count("\n", 0, start.start())
    if re.sub(r"<!--.*?-->", "", text[: start.start()], flags=re.S).strip():  # not comments
        warnings.append(f"ignored {offset} line(s) of text before the XML")
    body = text[start.start() :]
    parser = expat.ParserCreate()
    stack: list[Node] = []
    roots: list[Node] = []
    count = 0

    def line() -> int:
        return int(parser.CurrentLineNumber) + offset

    def on_start(tag: str, attrs: dict[str, str]) -> None:
        nonlocal count
        count += 1
        if count > MAX_XML_NODES:
            raise _Refused(f"more than {MAX_XML_NODES} elements", line())
        for key, value in attrs.items():
            if not writable(value):
                shown = value if len(value) <= 40 else value[:40] + "..."
                raise _Refused(
                    f"<{tag}> attribute {key}={shown!r} ({len(value)} characters): NCCL's "
                    'reader takes no `" < > &` or newline and at most 255 characters',
                    line(),
                )
        node = Node(tag, dict(attrs), line(), stack[-1] if stack else None)
        if stack:
            stack[-1].children.append(node)
        else:
            roots.append(node)
        stack.append(node)

    def on_end(tag: str) -> None:
        stack.pop().closed = True

    def on_comment(text: str) -> None:
        if stack and _ELIDED.search(text):
            elided.append((line(), " ".join(text.split())))

    def refuse_dtd(*_: Any) -> None:
        raise _Refused("a DOCTYPE or entity declaration is not allowed here", line())

    elided: list[tuple[int, str]] = []
    parser.StartElementHandler = on_start
    parser.CommentHandler = on_comment
    parser.EndElementHandler = on_end
    parser.StartDoctypeDeclHandler = refuse_dtd
    parser.EntityDeclHandler = refuse_dtd
    parser.ExternalEntityRefHandler = refuse_dtd  # type: ignore[assignment]
    try:
        parser.Parse(body, True)
    except _Refused as exc:
        raise ParseError(exc.message, line=exc.line) from None
    except expat.ExpatError as exc:
        where = int(exc.lineno) + offset
        if exc.code in _TRUNCATED and stack:
            open_ = stack[-1]
            what = f"<{open_.tag}" + (
                f" busid={open_.attrs['busid']!r}" if "busid" in open_.attrs else ""
            )
            warnings.append(
                f"the XML is truncated at line {where} inside {what}> (opened at line "
                f"{open_.line}): read what came before it"
            )
        elif exc.code == _JUNK_AFTER and roots and roots[0].closed:
            rest = body.split("\n")[int(exc.lineno) - 1 :]
            again = next((n for n, ln in enumerate(rest) if f"<{roots[0].tag}" in ln), None)
            warnings.append(
                f"ignored text after </{roots[0].tag}> from line {where}"
                + ("" if again is None else f": another host's <{roots[0].tag}> (line "
                   f"{where + again}) is not read; upload each host's dump apart")
            )  # fmt: skip
        else:
            raise ParseError(
                f"not well-formed XML: {expat.errors.messages[exc.code]}", line=where
            ) from None
    if elided:
        (at, said), more = elided[0], len(elided) - 1
        shown = said if len(said) <= 80 else said[:77] + "..."
        warnings.append(
            f"line {at}: a comment says content was left out of the file (<!-- {shown} -->"
            + (f", and {more} more such comment(s)" if more else "")
            + "): what is read is partial, its GPU and NIC counts too"
        )
    if not roots:
        raise ParseError("no XML element found", line=1 + offset)
    root = roots[0]
    if root.tag != "system":
        raise ParseError(f"expected <system> as the top element, got <{root.tag}>", line=root.line)
    return root, warnings
