"""``loads_skimmed``: a JSON document read in pieces with its large values left out (the hooks'
payloads over their size limit)."""

from __future__ import annotations

import json
import time
from typing import Any
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from phoenix_protocol.core import _jsonskim
from phoenix_protocol.core._jsonio import JSONError
from phoenix_protocol.core._jsonskim import loads_skimmed

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**18), max_value=10**18)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(alphabet=st.characters(codec="utf-8"))
    | st.sampled_from(["\\", '"', '\\"', "\\\\", 'a\\"b', "é\\", "\u2603" * 5, "x" * 40])
)
keys = st.text(max_size=8) | st.sampled_from(["a", "b", "tool_response", 'q"', "\\"])
json_values = st.recursive(
    scalars,
    lambda children: st.lists(children, max_size=5) | st.dictionaries(keys, children, max_size=5),
    max_leaves=30,
)


def _expected(value: Any, max_value: int, keep_depth: int, ascii_: bool) -> tuple[Any, dict[str, int]]:
    """What ``loads_skimmed`` should give, from the rule in its docstring (with the standard
    library's separators, a value's text is the same wherever it stands)."""
    left: dict[str, int] = {}

    def visit(v: Any, path: str, depth: int) -> Any:
        size = len(json.dumps(v, ensure_ascii=ascii_))
        if isinstance(v, dict) and (depth == 0 or (size > max_value and depth < keep_depth)):
            prefix = path + "." if path else ""
            return {k: visit(item, prefix + k, depth + 1) for k, item in v.items()}
        if size <= max_value:
            return v
        left[path] = size
        return f"<{size} characters left out>"

    return visit(value, "", 0 if isinstance(value, dict) else 1), left


def _pieces(data: bytes, sizes: list[int]) -> list[bytes]:
    out, i = [], 0
    for n in sizes or [len(data) or 1]:
        if i >= len(data):
            break
        out.append(data[i : i + n])
        i += n
    if i < len(data):
        out.append(data[i:])
    return out


@settings(max_examples=300, deadline=None)
@given(
    json_values | st.dictionaries(keys, json_values, max_size=6),
    st.integers(min_value=1, max_value=120),
    st.integers(min_value=1, max_value=4),
    st.lists(st.integers(min_value=1, max_value=17), max_size=40),
    st.booleans(),
    st.sampled_from(["", " ", "\n\t ", " " * 100]),
)
def test_skimmed_is_the_rule_whatever_the_pieces(
    value: Any, max_value: int, keep_depth: int, sizes: list[int], ascii_: bool, pad: str
) -> None:
    data = (pad + json.dumps(value, ensure_ascii=ascii_) + pad).encode()
    expected = _expected(value, max_value, keep_depth, ascii_)
    skimmed, left, complete = loads_skimmed(_pieces(data, sizes), max_value=max_value, keep_depth=keep_depth)
    assert complete and (skimmed, left) == expected
    # A window of 128 characters past a value's start (the longest key here is 98): containers
    # larger than it are passed over piece by piece (skip_container), not refused by the C
    # scanner in one go.
    with mock.patch.object(_jsonskim, "_MIN_LOOKAHEAD", 128):
        skimmed, left, complete = loads_skimmed(_pieces(data, sizes), max_value=max_value, keep_depth=keep_depth)
    assert complete and (skimmed, left) == expected


@settings(max_examples=100, deadline=None)
@given(json_values, st.lists(st.integers(min_value=1, max_value=9), max_size=30))
def test_a_large_enough_limit_is_loads(value: Any, sizes: list[int]) -> None:
    data = json.dumps(value, ensure_ascii=False).encode()
    assert loads_skimmed(_pieces(data, sizes), max_value=10**6) == (value, {}, True)


@pytest.mark.parametrize(
    "text",
    [
        "",
        " ",
        "{",
        '{"a": 1} 2',
        '{"a": 1,}',
        '{"a" 1}',
        '{"a": [1 2]}',
        '{"a": [1, 2}',
        '{"a": ["' + "x" * 500 + "]}",  # a large string that never ends
        '{"a": {"b": ' + "[1, " * 300 + "}",
        '{"a": NaN}',
        '{"a": [' + ", ".join(["1"] * 200) + ", Infinity]}",
        '{"a": tru}',
        "{1: 2}",
        '{"a": "\x01"}',
        "[1,]",
    ],
)
def test_what_is_not_json_is_refused(text: str) -> None:
    for size in (1, 5, 4096):
        with pytest.raises(JSONError):
            loads_skimmed(_pieces(text.encode(), [size] * len(text)), max_value=20)


def test_a_long_value_is_passed_over_in_pieces_without_being_held() -> None:
    big = 'ab\\"c\\\\' * 300_000  # escapes, backslashes and quotes across every piece boundary
    items = [{"type": "text", "text": f'line {i} \\ " ] }}'} for i in range(100_000)] + [[[big]]]
    doc = {
        "session_id": "s",
        "tool_response": {"stdout": big, "content": items, "interrupted": True},
        "tool_use_id": "t",
    }
    data = json.dumps(doc).encode()
    pieces = _pieces(data, [65_537] * (len(data) // 65_537 + 1))
    skimmed, left, complete = loads_skimmed(pieces, max_value=4096)
    size, items_size = len(json.dumps(big)), len(json.dumps(items))
    assert complete and left == {"tool_response.stdout": size, "tool_response.content": items_size}
    assert skimmed == {
        "session_id": "s",
        "tool_response": {
            "stdout": f"<{size} characters left out>",
            "content": f"<{items_size} characters left out>",
            "interrupted": True,
        },
        "tool_use_id": "t",
    }


def test_a_passed_deadline_stops_with_what_was_read() -> None:
    data = json.dumps({"session_id": "s", "tool_response": {"stdout": "x" * 10_000}, "after": 1}).encode()
    pieces = iter(_pieces(data, [1000] * 20))
    skimmed, _left, complete = loads_skimmed(pieces, max_value=100, deadline=time.monotonic() - 1)
    assert not complete and skimmed == {}
    assert next(pieces, None) is not None  # it stopped reading

    calls = {"n": 0}

    def timed() -> Any:
        for piece in _pieces(data, [1000] * 20):
            calls["n"] += 1
            yield piece

    deadline = time.monotonic() + 3600
    skimmed, _left, complete = loads_skimmed(timed(), max_value=100, deadline=deadline)
    assert complete and skimmed["after"] == 1 and calls["n"] == 11


def test_nesting_too_deep_for_the_c_scanner_is_passed_over() -> None:
    deep = "[" * 50_000 + "]" * 50_000
    data = ('{"a": 1, "deep": ' + deep + ', "b": {"c": ' + deep + "}}").encode()
    skimmed, left, complete = loads_skimmed(_pieces(data, [4096] * 100), max_value=64)
    assert complete and skimmed == {
        "a": 1,
        "deep": "<100000 characters left out>",
        "b": {"c": "<100000 characters left out>"},
    }
    assert left == {"deep": 100_000, "b.c": 100_000}


def test_a_name_longer_than_the_window_is_left_out_with_its_value() -> None:
    data = json.dumps({"a": 1, "k" * 5000: [1, 2], "b": 2}).encode()
    assert loads_skimmed(_pieces(data, [999] * 20), max_value=10) == ({"a": 1, "b": 2}, {"(a long name)": 6}, True)
