"""JSON encoding and decoding for every Phoenix file, built on the standard library's C codec.

Why not ``import json``: the ``json`` package imports ``re``, which alone costs more than the
whole PostToolUse heartbeat is allowed to (see docs/benchmarks.md). ``_json`` is the C half
of the same standard-library codec; we drive it directly and fall back to ``json`` where the
C module does not exist. Output is identical to ``json.dumps``; decoding is strict
(``NaN``/``Infinity`` and trailing data are refused).

Layout rules (files stay readable by ``jq`` and people):
- ``dumps_line`` writes one compact line (JSON lines files);
- ``dumps_document`` writes one top-level key per line, values compact, keys in insertion order.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any, NoReturn, TypeAlias

    JSON: TypeAlias = Any
    """A JSON value decoded from outside (a file, a database column, a request or an answer), of
    no shape known here: a dict, list, str, int, float, bool or None. ``Any``, as ``json.loads``
    returns, so that its reader indexes it once it has checked what it holds; a value of known
    shape gets a type of its own (a class, a ``TypedDict``). Typing only (this module imports
    nothing at run time: the hooks' hot path)."""

__all__ = [
    "JSONError",
    "dumps_canonical",
    "dumps_document",
    "dumps_indented_bytes",
    "dumps_indented_exact",
    "dumps_line",
    "dumps_output",
    "loads",
    "loads_large",
    "loads_object",
    "valid_text",
]


class JSONError(ValueError):
    """Text that is not one valid JSON value. ``pos`` is the character offset of the problem."""

    def __init__(self, message: str, pos: int = 0) -> None:
        super().__init__(message)
        self.pos = pos


def _refuse_constant(name: str) -> NoReturn:
    raise JSONError(f"{name} is not valid JSON")


class _ScannerContext:
    """The attributes ``_json.make_scanner`` reads from a ``JSONDecoder``."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = staticmethod(_refuse_constant)


_WS = " \t\n\r"

try:
    import _json

    _scan: Callable[[str, int], tuple[Any, int]] = _json.make_scanner(_ScannerContext())  # type: ignore[arg-type]
    _encode_string = _json.encode_basestring_ascii
    _scanstring: Callable[[str, int, bool], tuple[str, int]] = _json.scanstring

    def _no_default(obj: object) -> NoReturn:
        raise TypeError(f"Object of type {type(obj).__name__} is not JSON serializable")

    _encoder = _json.make_encoder(None, _no_default, _encode_string, None, ":", ",", False, False, False)
    _sorted_encoder = _json.make_encoder(None, _no_default, _encode_string, None, ":", ",", True, False, False)
    _C = True
except (ImportError, AttributeError):  # pragma: no cover - CPython always has _json
    _C = False

    def _encode_string(text: str) -> str:
        import json

        return json.dumps(text)

    def _py_scan(text: str, index: int) -> tuple[Any, int]:
        import json

        try:
            value, end = json.JSONDecoder(parse_constant=_refuse_constant).raw_decode(text, index)
        except json.JSONDecodeError as exc:
            if exc.pos == index:
                raise StopIteration(index) from None
            raise
        return value, end

    def _py_scanstring(text: str, end: int, strict: bool) -> tuple[str, int]:
        import json.decoder

        return json.decoder.scanstring(text, end, strict)  # type: ignore[attr-defined,no-any-return]

    _scan = _py_scan
    _scanstring = _py_scanstring


def loads(text: str | bytes) -> JSON:
    """Decode one JSON value. Raises ``JSONError`` (a ``ValueError``) on anything else."""
    if isinstance(text, (bytes, bytearray)):
        try:
            text = bytes(text).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise JSONError(f"not UTF-8: {exc.reason} at byte {exc.start}", exc.start) from None
    if not _C:  # pragma: no cover
        import json

        try:
            return json.loads(text, parse_constant=_refuse_constant)
        except json.JSONDecodeError as exc:
            raise JSONError(exc.msg, exc.pos) from None
    start = len(text) - len(text.lstrip(_WS))
    try:
        value, end = _scan(text, start)
    except StopIteration as exc:
        raise JSONError(f"expecting a JSON value at character {exc.value}", int(exc.value)) from None
    except RecursionError:
        raise JSONError("JSON nested too deeply") from None
    except (ValueError, SystemError):
        # The C scanner reports syntax errors through json.decoder, which it may fail to
        # import on its own (SystemError). Errors are rare: let the full codec describe it.
        raise _describe_error(text) from None
    if text[end:].strip(_WS):
        raise JSONError(f"extra data after the JSON value at character {end}", end)
    return value


def loads_object(data: str | bytes | None) -> dict[str, Any] | None:
    """A JSON object, or ``None`` for nothing, unreadable text or another kind of value (for
    small records whose readers fall back when they are missing or damaged)."""
    if not data:
        return None
    try:
        value = loads(data)
    except JSONError:
        return None
    return value if isinstance(value, dict) else None


def _describe_error(text: str) -> JSONError:
    import json

    try:
        json.loads(text, parse_constant=_refuse_constant)
    except json.JSONDecodeError as exc:
        # Some of the codec's messages end with "at" already ("Unterminated string starting at").
        return JSONError(exc.msg.removesuffix(" at") + f" at line {exc.lineno} column {exc.colno}", exc.pos)
    except JSONError as exc:
        return exc
    except RecursionError:
        return JSONError("JSON nested too deeply")
    return JSONError("invalid JSON")


def dumps_line(obj: Any) -> str:
    """Encode ``obj`` compactly on one line (no newline added). ASCII-only output."""
    if not _C:  # pragma: no cover
        import json

        return json.dumps(obj, separators=(",", ":"), allow_nan=False)
    try:
        return "".join(_encoder(obj, 0))
    except ValueError as exc:
        raise JSONError(str(exc)) from None


def dumps_canonical(obj: Any) -> str:
    """Compact encoding with sorted keys: equal values give equal text (for digests)."""
    if not _C:  # pragma: no cover
        import json

        return json.dumps(obj, separators=(",", ":"), sort_keys=True, allow_nan=False)
    try:
        return "".join(_sorted_encoder(obj, 0))
    except ValueError as exc:
        raise JSONError(str(exc)) from None


def dumps_document(obj: dict[str, Any]) -> str:
    """Encode a dict with one top-level key per line, ending in a newline."""
    if not obj:
        return "{}\n"
    parts = [f"  {_encode_string(str(key))}: {dumps_line(value)}" for key, value in obj.items()]
    return "{\n" + ",\n".join(parts) + "\n}\n"


# -- large documents (checkpoints) ---------------------------------------------------------------
# orjson encodes and decodes several times faster than the standard library's codec, which
# matters for checkpoints of a megabyte; it costs a few milliseconds to import, so only the
# checkpoint store uses it (never the hooks' hot path). Output is UTF-8 rather than ASCII-escaped;
# NaN and infinities are refused as by ``dumps_line``; whatever orjson does not take (integers
# beyond 64 bits, nesting deeper than 255) goes through the standard library.

_orjson: bool | None = None


def _fast() -> bool:
    """Whether orjson can be imported (imported here on the first call)."""
    global _orjson
    if _orjson is None:
        try:
            import orjson  # noqa: F401
        except ImportError:  # pragma: no cover - a declared dependency
            _orjson = False
        else:
            _orjson = True
    return _orjson


def dumps_indented_bytes(obj: dict[str, Any]) -> bytes:
    """``obj`` as JSON indented by two spaces (keys in insertion order, UTF-8), ending with its
    closing ``"\\n}"`` and no newline: each top-level key starts a line with exactly two spaces."""
    return dumps_indented_exact(obj)[0]


def dumps_indented_exact(obj: dict[str, Any]) -> tuple[bytes, bool]:
    """``dumps_indented_bytes``, and whether reading the document back needs ``loads`` to be
    exact: ``True`` when orjson refused it (an integer beyond 64 bits, which ``loads_large``
    would read back as a float; or nesting too deep) and the standard library wrote it. Values
    orjson takes and the standard library does not (datetimes, UUIDs, enums, dataclasses) are
    written as orjson writes them, also then: one section of each kind does not fail both."""
    fast = _fast()
    if fast:
        import orjson

        try:
            return orjson.dumps(obj, option=orjson.OPT_NON_STR_KEYS | orjson.OPT_INDENT_2), False
        except (TypeError, orjson.JSONEncodeError):
            pass  # what orjson does not take (integers beyond 64 bits, deep nesting): the stdlib
    import json

    def default(o: object) -> object:  # what the stdlib does not take: its value as orjson writes it
        if fast:
            import orjson

            try:
                return loads_large(orjson.dumps(o))
            except (TypeError, orjson.JSONEncodeError):
                pass
        raise TypeError(f"Object of type {type(o).__name__} is not JSON serializable")

    try:
        text = json.dumps(obj, indent=2, ensure_ascii=False, allow_nan=False, default=default)
    except ValueError as exc:
        raise JSONError(str(exc)) from None
    try:
        return text.encode("utf-8"), True
    except UnicodeEncodeError:  # a lone surrogate: text that came from bytes that were not UTF-8
        return valid_text(text).encode("utf-8"), True


def dumps_output(obj: Any, *, one_line: bool = False) -> str:
    """The text of one ``phx --json`` document (no newline added): what
    ``json.dumps(obj, indent=2, ensure_ascii=False)`` writes (``one_line``: without ``indent``),
    non-ASCII text as itself (``é``, not ``\\u00e9``), each lone surrogate as U+FFFD
    (``valid_text``: UTF-8 cannot write one, and a ``\\udce9`` escape would hand the reader one
    back). ``one_line`` also escapes U+0085, U+2028 and U+2029, which ``str.splitlines`` takes
    for line ends: a stream of such documents stays one per line. Without importing ``json``
    (for ``phx team resume --json``'s fast path)."""
    if not _C:  # pragma: no cover
        import json

        text = json.dumps(obj, indent=None if one_line else 2, ensure_ascii=False)
    elif one_line:
        text = "".join(_output_encoder()(obj, 0))
    else:
        parts: list[str] = []
        _indented(obj, "\n", parts)
        text = "".join(parts)
    text = valid_text(text)
    if one_line and not text.isascii():
        text = text.replace("\x85", "\\u0085").replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")
    return text


_output: list[Callable[[Any, int], list[str]]] = []


def _output_encoder() -> Callable[[Any, int], list[str]]:
    """``json.dumps(ensure_ascii=False)``'s C encoder (text as itself, NaN allowed), made on first
    use: the hooks import this module and never write a ``--json`` document."""
    if not _output:
        _output.append(
            _json.make_encoder(None, _no_default, _json.encode_basestring, None, ": ", ", ", False, False, True)
        )
    return _output[0]


def _indented(obj: Any, newline: str, parts: list[str]) -> None:
    """``obj`` as ``json.dumps(indent=2, ensure_ascii=False)`` writes it at the depth whose line
    start is ``newline``: containers here, every other value by the C encoder."""
    if isinstance(obj, dict):
        if not obj:
            parts.append("{}")
            return
        inner = newline + "  "
        separator = "{" + inner
        for key, value in obj.items():
            if isinstance(key, str):
                name = key
            elif key is None or isinstance(key, (int, float)):  # bool is an int
                name = "".join(_output_encoder()(key, 0))  # true, 1, 1.5, NaN, null
            else:
                raise TypeError(f"keys must be str, int, float, bool or None, not {type(key).__name__}")
            parts.append(separator)
            parts.append(_json.encode_basestring(name))
            parts.append(": ")
            _indented(value, inner, parts)
            separator = "," + inner
        parts.append(newline + "}")
    elif isinstance(obj, (list, tuple)):
        if not obj:
            parts.append("[]")
            return
        inner = newline + "  "
        separator = "[" + inner
        for value in obj:
            parts.append(separator)
            _indented(value, inner, parts)
            separator = "," + inner
        parts.append(newline + "]")
    else:
        parts.extend(_output_encoder()(obj, 0))


def valid_text(text: str) -> str:
    """``text`` with every surrogate code point replaced by U+FFFD. A Python string holds one
    only where it came from bytes that were not UTF-8 (a command-line argument, a file name, via
    ``surrogateescape``) or from a JSON escape such as ``\\udce9`` standing alone; UTF-8 cannot
    encode it."""
    if text.isascii():
        return text
    import re

    return re.sub("[\ud800-\udfff]", "\ufffd", text)


def loads_large(data: bytes) -> JSON:
    """``loads`` for large documents (orjson when available; the same errors)."""
    if _fast():
        import orjson

        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError:
            pass  # let the standard codec describe the problem (and take what orjson refuses)
    return loads(data)
