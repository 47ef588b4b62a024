"""core._text.one_line: one line, cut with the cut marked."""

from __future__ import annotations

import pytest

from phoenix_protocol.core._text import one_line


@pytest.mark.parametrize(
    ("text", "limit", "expected"),
    [
        ("short", 10, "short"),
        ("  two\n\tlines  here ", 20, "two lines here"),
        ("exactly10!", 10, "exactly10!"),
        ("eleven char", 10, "eleven ch…"),
        (None, 5, ""),
        (42, 5, "42"),
        ("abc", 0, "…"),
    ],
)
def test_one_line(text: object, limit: int, expected: str) -> None:
    assert one_line(text, limit) == expected
