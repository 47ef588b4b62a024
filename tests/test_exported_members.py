"""The public API is exactly __all__, and every public name resolves and is documented."""

from __future__ import annotations

import phoenix_protocol


def test_all_names_resolve_and_have_docstrings() -> None:
    for name in phoenix_protocol.__all__:
        value = getattr(phoenix_protocol, name)
        if name != "__version__":
            assert value.__doc__, f"{name} has no docstring"


def test_public_names_match_all() -> None:
    public = {name for name in dir(phoenix_protocol) if not name.startswith("_")}
    assert public == set(phoenix_protocol.__all__) - {"__version__"}


def test_errors_share_one_root() -> None:
    for name in phoenix_protocol.__all__:
        value = getattr(phoenix_protocol, name)
        if isinstance(value, type) and issubclass(value, Exception):
            assert issubclass(value, phoenix_protocol.PhoenixError)
