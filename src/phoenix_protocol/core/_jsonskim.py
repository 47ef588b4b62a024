"""Reading a JSON document too large to hold (a hook's payload), keeping only its small values.

A hook's payload can carry a tool's whole output (tens of megabytes). ``loads_skimmed`` reads
such a document in pieces and keeps only its small values: what a hook needs (ids, names, flags)
is small, and holding or decoding the rest would cost the hook its budget. Imported only when a
payload is over the hook's limit (the heartbeat's import path stays light: ``_jsonio`` alone).
"""

from __future__ import annotations

from phoenix_protocol.core._jsonio import _WS, JSONError, _scan, _scanstring

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable
    from typing import Any

__all__ = ["loads_skimmed"]


class _OutOfTime(Exception):
    """The deadline of ``loads_skimmed`` passed while it read."""


_SMALL, _LARGE, _UNSEEN = 0, 1, 2  # what _Skimmer.small found at the value
_MIN_LOOKAHEAD = 4096  # characters the window holds past a value's start, at least


def _string_end(text: str, start: int, stop: int) -> int:
    """The index of the quote that closes the JSON string whose text starts at ``start`` (just
    after its opening quote), or -1 when it does not close before ``stop``. Escapes are masked
    in C (``\\\\`` and then ``\\"``, left to right as a decoder pairs them); the segment grows
    eightfold from 64 characters, so a short string costs little and a long one linear time."""
    width = 64
    while True:
        end = min(start + width, stop)
        masked = text[start:end].replace("\\\\", "..").replace('\\"', "..")
        quote = masked.find('"')
        if quote >= 0:
            return start + quote
        if end >= stop:
            return -1
        width *= 8


def _utf8_cut(data: bytes | memoryview) -> int:
    """Where the UTF-8 character cut off at the end of ``data`` starts (``len(data)`` if none is)."""
    n = len(data)
    for back in range(1, min(4, n) + 1):
        byte = data[n - back]
        if byte < 0x80:
            return n
        if byte >= 0xC0:  # a lead byte: its character has 2, 3 or 4 bytes
            need = 2 if byte < 0xE0 else 3 if byte < 0xF0 else 4
            return n - back if need > back else n
    return n  # continuation bytes only: not UTF-8, decoded with replacement characters


def _nth_bracket(parts: list[str], in_string: bool, k: int) -> int:
    """Where the ``k``-th bracket (from 0) outside strings is in the text ``'"'.join(parts)``
    (strings being every other part, the first one if ``in_string``)."""
    offset = 0
    for index, part in enumerate(parts):
        if (index % 2 == 1) == in_string:  # outside strings
            found = part.count("[") + part.count("{") + part.count("]") + part.count("}")
            if k < found:
                for j, ch in enumerate(part):
                    if ch in "[]{}":
                        if k == 0:
                            return offset + j
                        k -= 1
            k -= found
        offset += len(part) + 1
    raise AssertionError("no such bracket")  # pragma: no cover - the caller counted them


class _Skimmer:
    """The reader behind ``loads_skimmed``: a window of decoded text over the pieces, ``pos`` in
    it, ``base`` characters dropped before it (so ``base + pos`` is the offset in the document)."""

    def __init__(self, chunks: Iterable[bytes | memoryview], max_value: int, keep_depth: int, deadline: float | None):
        self.chunks = iter(chunks)
        self.carry = b""  # the start of a character cut off at the end of the last piece
        self.text = ""
        self.pos = 0
        self.base = 0
        self.eof = False
        self.max_value = max_value
        self.lookahead = max(max_value, _MIN_LOOKAHEAD)  # what a key or a number may span
        self.keep_depth = keep_depth
        self.deadline = deadline
        self.left_out: dict[str, int] = {}
        self.too_deep = False  # the last container small() gave up on nests deeper than it scans

    def check_time(self) -> None:
        if self.deadline is not None:
            import time

            if time.monotonic() > self.deadline:
                raise _OutOfTime

    def pull(self) -> str | None:
        """The next piece's text (never empty), or ``None`` at the end."""
        while not self.eof:
            self.check_time()
            chunk = next(self.chunks, None)
            if chunk is None:
                self.eof = True
                return str(self.carry, "utf-8", "replace") or None
            data = self.carry + chunk if self.carry else chunk
            cut = _utf8_cut(data)
            self.carry = bytes(data[cut:])
            text = str(data[:cut], "utf-8", "replace")
            if text:
                return text
        return None

    def fill(self, need: int) -> None:
        """At least ``need`` characters after ``pos`` in the window (fewer at the end)."""
        while len(self.text) - self.pos < need:
            piece = self.pull()
            if piece is None:
                return
            self.base += self.pos
            self.text = self.text[self.pos :] + piece
            self.pos = 0

    def next_char(self) -> str:
        """Skip whitespace; the character after it ("" at the end)."""
        while True:
            text, i = self.text, self.pos
            n = len(text)
            while i < n and text[i] in _WS:
                i += 1
                if i - self.pos > 64:  # a run of whitespace: strip it in C
                    i = n - len(text[i:].lstrip(_WS))
                    break
            if i < n:
                self.pos = i
                return text[i]
            piece = self.pull()
            if piece is None:
                self.pos = n
                return ""
            self.base += n
            self.text, self.pos = piece, 0

    def error(self, message: str) -> JSONError:
        offset = self.base + self.pos
        return JSONError(f"{message} at character {offset}", offset)

    def small(self) -> tuple[int, Any]:
        """At a value's first character: ``(_SMALL, value)`` for a value of at most
        ``max_value`` characters; ``(_LARGE, value)`` for a larger one that the window held
        whole; both move past it. ``(_UNSEEN, None)``: larger than the window (or broken; the
        caller finds out), ``pos`` unchanged."""
        self.fill(self.lookahead + 1)
        text, i = self.text, self.pos
        if text[i] == '"':
            end = _string_end(text, i + 1, min(len(text), i + self.max_value))
            if end < 0:
                return _UNSEEN, None
            try:
                value, after = _scanstring(text, i + 1, True)
            except ValueError:
                raise self.error("invalid string") from None
            self.pos = after
            return _SMALL, value
        try:
            value, after = _scan(text, i)
        except (StopIteration, ValueError, SystemError, RecursionError) as exc:
            # A container the window cuts off: the C scanner says StopIteration (an element
            # starts at the window's end) or fails without a message (SystemError).
            if text[i] not in "{[":
                raise self.error("expecting a JSON value") from None
            self.too_deep = isinstance(exc, RecursionError)
            self.check_time()  # the window was scanned for nothing
            return _UNSEEN, None
        if after >= len(text) and not self.eof and text[i] not in "{[":
            raise self.error(f"a number or literal longer than {self.lookahead} characters")
        self.pos = after
        return (_SMALL if after - i <= self.max_value else _LARGE), value

    def key(self) -> str | None:
        """A property name and its colon; ``None`` for a name too long to keep (passed over)."""
        if self.next_char() != '"':
            raise self.error("expecting a property name in double quotes")
        self.fill(self.lookahead + 1)
        name: str | None = None
        if _string_end(self.text, self.pos + 1, min(len(self.text), self.pos + 1 + self.lookahead)) >= 0:
            try:
                name, self.pos = _scanstring(self.text, self.pos + 1, True)
            except ValueError:
                raise self.error("invalid property name") from None
        else:
            self.skip_string()
        if self.next_char() != ":":
            raise self.error("expecting ':' delimiter")
        self.pos += 1
        return name

    def next_piece(self, unterminated: str) -> str:
        """Move past the current piece to the next one (its text); at the end, the error
        ``unterminated`` (what was being passed over never closed)."""
        self.base += len(self.text)
        piece = self.pull()
        if piece is None:
            self.text, self.pos = "", 0
            raise self.error(unterminated)
        self.text = piece
        return piece

    def skip_string(self) -> None:
        """Pass over the string at ``pos``, however long, piece by piece (its text unchecked)."""
        text, i = self.text, self.pos + 1
        while True:
            masked = text[i:].replace("\\\\", "..").replace('\\"', "..")
            quote = masked.find('"')
            if quote >= 0:
                self.pos = i + quote + 1
                return
            escaped = masked.endswith("\\")  # a backslash escapes the next piece's first character
            text = self.next_piece("unterminated string")
            i = 1 if escaped else 0

    def skip(self) -> None:
        """Pass over the string or container at ``pos``, whose ``small()`` gave up on it."""
        first = self.text[self.pos]
        if first == '"':
            self.skip_string()
            return
        if first not in "{[":
            raise self.error("expecting a JSON value")
        scanned = self.base + len(self.text)  # the C scanner saw up to here
        too_deep = self.too_deep
        start = self.base + self.pos
        self.skip_container()
        if self.base + self.pos <= scanned and not too_deep:
            # Whole in what the C scanner refused: it is not JSON (let the scanner say why).
            self.pos = start - self.base
            raise self.error("invalid JSON value")

    def skip_container(self) -> None:
        """Pass over the array or object at ``pos`` however large, piece by piece: per piece,
        escapes are masked and strings cut out in C, then its brackets counted (in C, with
        ``itertools.accumulate``) to see whether the container closes in it; only the piece where
        it does is looked at in Python. Its contents are not checked beyond strings and the
        nesting of brackets (``[`` and ``{`` alike)."""
        from itertools import accumulate, count
        from operator import sub

        other_bytes = bytes(range(256)).translate(None, b'"[]{}')
        steps = bytes.maketrans(b"[{]}", b"\x02\x02\x00\x00")  # an opening bracket counts 2, a closing one 0
        text, i = self.text, self.pos
        depth = 0
        in_string = False
        while True:
            masked = text[i:].replace("\\\\", "..").replace('\\"', "..")
            # Quotes and brackets only, then the brackets between quote pairs dropped: all in C,
            # and the parts split off are mostly empty (no allocation).
            parts = masked.encode("ascii", "replace").translate(None, other_bytes).split(b'"')
            brackets = b"".join(parts[1::2] if in_string else parts[0::2]).translate(steps)
            # depth after the k-th bracket: depth + 2 * (openings so far) - (k + 1)
            target = 1 - depth
            if brackets and min(map(sub, accumulate(brackets), count())) <= target:
                k = list(map(sub, accumulate(brackets), count())).index(target)
                self.pos = i + _nth_bracket(masked.split('"'), in_string, k) + 1
                return
            depth += len(brackets) - 2 * brackets.count(0)
            if len(parts) % 2 == 0:
                in_string = not in_string
            escaped = in_string and masked.endswith("\\")  # as in skip_string
            text = self.next_piece("unterminated array or object")
            i = 1 if escaped else 0

    def member(self, into: dict[str, Any], key: str, path: str, depth: int) -> None:
        """Read the value at ``pos`` (``depth`` keys deep) into ``into[key]``: itself when
        small; an object larger than ``max_value`` less than ``keep_depth`` keys deep with its
        members read the same way; anything else larger a placeholder string, its size in
        ``left_out[path]``."""
        first = self.next_char()
        if not first:
            raise self.error("expecting a JSON value")
        start = self.base + self.pos
        kind, value = self.small()
        if kind == _SMALL:
            into[key] = value
            return
        if first == "{" and depth < self.keep_depth:
            self.pos = start - self.base
            inner: dict[str, Any] = {}
            into[key] = inner  # before its members: a read cut short keeps what it got
            self.object(inner, path, depth)
            return
        if kind == _UNSEEN:
            self.skip()
        size = self.base + self.pos - start
        self.left_out[path] = size
        into[key] = f"<{size} characters left out>"

    def object(self, into: dict[str, Any], path: str, depth: int) -> None:
        """Read the members of the object at ``pos`` (``depth`` keys deep) into ``into``."""
        self.pos += 1  # the opening brace
        if self.next_char() == "}":
            self.pos += 1
            return
        prefix = path + "." if path else ""
        while True:
            name = self.key()
            if name is None:
                self.next_char()
                start = self.base + self.pos
                if self.pos < len(self.text) and self.small()[0] == _UNSEEN:
                    self.skip()
                self.left_out[prefix + "(a long name)"] = self.base + self.pos - start
            else:
                self.member(into, name, prefix + name, depth + 1)
            after = self.next_char()
            self.pos += 1
            if after == "}":
                return
            if after != ",":
                self.pos -= 1
                raise self.error("expecting ',' delimiter")


def loads_skimmed(
    chunks: Iterable[bytes | memoryview],
    *,
    max_value: int,
    keep_depth: int = 3,
    deadline: float | None = None,
) -> tuple[Any, dict[str, int], bool]:
    """Decode one JSON document read piece by piece (UTF-8 ``chunks``, cut anywhere), keeping
    only what is small. Returns ``(value, left_out, complete)``.

    Every value of at most ``max_value`` characters is decoded as ``loads`` would. A larger
    object fewer than ``keep_depth`` keys deep keeps its members, each read by the same rule (the
    top-level object is always read so); any other larger value becomes the string
    ``"<N characters left out>"`` and ``left_out`` maps its path (keys joined by ``.``) to N, its
    length in the document. Memory stays within a few times ``max_value`` (plus what is kept),
    whatever the document's size; the time is linear in it (about 2 ms a megabyte of text, 10 ms
    a megabyte of tiny values).

    The pieces are read to the end (trailing data is an error). A value left out is checked as
    ``loads`` would when it fits in the window (``max_value``, at least 4096 characters); a
    larger one only for its strings ending and its brackets nesting. Bytes that are not UTF-8
    become U+FFFD. Raises ``JSONError`` on anything else that is not one JSON value.

    ``deadline`` (``time.monotonic()``): past it, reading stops and ``complete`` is ``False``;
    the value then holds the members read so far (and the pieces are not all read).
    """
    skim = _Skimmer(chunks, max_value, keep_depth, deadline)
    root: dict[str, Any] = {}
    try:
        if skim.next_char() == "{":
            top: dict[str, Any] = {}
            root[""] = top  # before its members: a read cut short keeps what it got
            skim.object(top, "", 0)
        else:
            skim.member(root, "", "", 1)
        if skim.next_char():
            raise skim.error("extra data after the JSON value")
    except _OutOfTime:
        return root.get("", {}), skim.left_out, False
    return root[""], skim.left_out, True
