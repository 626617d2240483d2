"""Property tests of the benchmark readers: whatever text they get, they return a model object
that survives its document round trip, or raise ParseError; nothing else escapes."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from topoweb.core.formats import ParseError, nccl, p2p, parse_text
from topoweb.core.model import NcclRun, P2PResult, Parsed, from_document

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
NCCL_TEXTS = {p.name: p.read_text() for p in sorted(FIXTURES.glob("nccl_*.txt"))}
P2P_TEXTS = {p.name: p.read_text() for p in sorted(FIXTURES.glob("p2p_*.txt"))}
# Real outputs a reader refuses by design (test_nccl_format and test_p2p_format say why):
# nccl_21 holds two independent runs interleaved; p2p_14's matrix header sits under a title cut
# into prose, so which matrix it heads is unknown.
REFUSED = ("nccl_21_", "p2p_14_")
ALL_LINES = sorted(
    {ln for t in [*NCCL_TEXTS.values(), *P2P_TEXTS.values()] for ln in t.split("\n")}
)

Reader = Callable[[str], Parsed]
READERS: dict[str, Reader] = {"nccl": nccl.parse, "p2p": p2p.parse}

# What a corrupted number may turn into: letters, nothing, the odd spellings float() would
# accept (nan, inf, 1_0, non-ASCII digits) and numbers too large for a float.
GARBAGE = ["x", "", "N/A", "nan", "inf", "1_0", "1e999", "-", "12.", ".5", "٣", "9" * 40, "#"]

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def assert_round_trips(result: Parsed) -> None:
    doc = result.to_document()
    assert type(result).from_document(doc) == result
    # the stored form is JSON: strict JSON (no NaN/Infinity) must bring back the same object
    stored = json.loads(json.dumps(doc, allow_nan=False))
    assert from_document(stored) == result


def read_or_reject(reader: Reader, text: str) -> None:
    try:
        result = reader(text)
    except ParseError as exc:
        assert exc.message
        assert exc.line is None or exc.line >= 1
        return
    assert_round_trips(result)


@st.composite
def mutated(draw: st.DrawFn, texts: dict[str, str]) -> str:
    """A real fixture with a few lines dropped or repeated, a number garbled, or cut short."""
    lines = texts[draw(st.sampled_from(sorted(texts)))].split("\n")
    for _ in range(draw(st.integers(1, 3))):
        i = draw(st.integers(0, len(lines) - 1))
        op = draw(st.sampled_from(["drop", "duplicate", "garble", "swap"]))
        if op == "drop":
            del lines[i]
        elif op == "duplicate":
            lines.insert(i, lines[i])
        elif op == "swap" and i + 1 < len(lines):
            lines[i], lines[i + 1] = lines[i + 1], lines[i]
        elif op == "garble":
            words = lines[i].split(" ")
            numeric = [k for k, w in enumerate(words) if any(c.isdigit() for c in w)]
            if numeric:
                words[draw(st.sampled_from(numeric))] = draw(st.sampled_from(GARBAGE))
                lines[i] = " ".join(words)
        if not lines:
            break
    text = "\n".join(lines)
    if draw(st.booleans()):
        text = text[: draw(st.integers(0, len(text)))]
    return text


@pytest.mark.parametrize("name", sorted(NCCL_TEXTS) + sorted(P2P_TEXTS))
def test_every_fixture_survives_its_document_round_trip(name: str) -> None:
    text = {**NCCL_TEXTS, **P2P_TEXTS}[name]
    if name.startswith(REFUSED):
        with pytest.raises(ParseError):
            parse_text(text)
        return
    result = parse_text(text)
    assert isinstance(result, NcclRun if name.startswith("nccl") else P2PResult)
    assert_round_trips(result)


@SETTINGS
@given(st.text(max_size=2000))
def test_random_text_gives_a_result_or_a_parse_error(text: str) -> None:
    for reader in READERS.values():
        read_or_reject(reader, text)


@SETTINGS
@given(st.lists(st.sampled_from(ALL_LINES), max_size=60).map("\n".join))
def test_shuffled_real_lines_give_a_result_or_a_parse_error(text: str) -> None:
    for reader in READERS.values():
        read_or_reject(reader, text)


@SETTINGS
@given(mutated(NCCL_TEXTS))
def test_mutated_nccl_output_gives_a_run_or_a_parse_error(text: str) -> None:
    read_or_reject(nccl.parse, text)


@SETTINGS
@given(mutated(P2P_TEXTS))
def test_mutated_p2p_output_gives_a_result_or_a_parse_error(text: str) -> None:
    read_or_reject(p2p.parse, text)


@SETTINGS
@given(mutated({**NCCL_TEXTS, **P2P_TEXTS}))
def test_format_detection_of_mutated_output_gives_a_result_or_a_parse_error(text: str) -> None:
    read_or_reject(parse_text, text)
