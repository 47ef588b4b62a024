"""The JSON codec built on the standard library's C half."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from phoenix_protocol.core._jsonio import (
    JSONError,
    dumps_canonical,
    dumps_document,
    dumps_indented_bytes,
    dumps_line,
    loads,
    valid_text,
)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(), children, max_size=4),
    max_leaves=20,
)


@given(json_values)
def test_round_trip_matches_the_stdlib(value: object) -> None:
    assert loads(dumps_line(value)) == value
    assert dumps_line(value) == json.dumps(value, separators=(",", ":"))
    assert json.loads(dumps_canonical(value)) == value


@given(st.dictionaries(st.text(), json_values, max_size=5))
def test_document_layout_parses(value: dict[str, object]) -> None:
    assert loads(dumps_document(value)) == value


@pytest.mark.parametrize("text", ["", " ", "{", '{"a":1} 2', "NaN", "[1,]", "Infinity", '{"a" 1}'])
def test_invalid_json_raises_jsonerror(text: str) -> None:
    with pytest.raises(JSONError):
        loads(text)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"status": "wor', "Unterminated string starting at line 1 column 12"),  # was "at at line 1"
        ('"abc', "Unterminated string starting at line 1 column 1"),
        ("[1, 2", "Expecting ',' delimiter at line 1 column 6"),
        ('{"a": 1}\x00\x00', "extra data after the JSON value at character 8"),
    ],
)
def test_errors_say_where_once(text: str, message: str) -> None:
    """What a damaged state.json's error says (the model, ``phx log`` and now the user read it)."""
    with pytest.raises(JSONError) as caught:
        loads(text)
    assert str(caught.value) == message
    assert " at at " not in str(caught.value)


def test_nan_is_not_written() -> None:
    with pytest.raises(JSONError):
        dumps_line(float("nan"))


# Text as Python holds it, lone surrogates included (what `surrogateescape` makes of bytes that are
# not UTF-8, e.g. a command-line argument typed in Latin-1).
any_text = st.text(st.characters(codec=None, categories=None))


@given(st.dictionaries(any_text, st.lists(any_text, max_size=3), max_size=4))
def test_indented_bytes_are_utf8_whatever_the_text(value: dict[str, list[str]]) -> None:
    encoded = dumps_indented_bytes(value)
    decoded = json.loads(encoded.decode("utf-8"))  # strict UTF-8: would fail on a surrogate
    assert decoded == {valid_text(k): [valid_text(t) for t in v] for k, v in value.items()}


def test_valid_text_replaces_surrogates_only() -> None:
    raw = b"caf\xe9 \xf0\x9f\x98\x80 \xc3\xa9".decode("utf-8", "surrogateescape")
    assert valid_text(raw) == "caf\ufffd \U0001f600 \u00e9"
    assert valid_text("plain") == "plain"
