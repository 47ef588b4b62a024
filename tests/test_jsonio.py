"""The JSON codec built on the standard library's C half."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from phoenix_protocol._jsonio import JSONError, dumps_canonical, dumps_document, dumps_line, loads

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


def test_nan_is_not_written() -> None:
    with pytest.raises(JSONError):
        dumps_line(float("nan"))
