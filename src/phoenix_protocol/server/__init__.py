"""Layer 4 (edges): the HTTP service (``phx serve``; the ``[server]`` extra)."""

try:
    import fastapi  # noqa: F401 - every module here needs it
except ImportError as _exc:  # pragma: no cover - exercised by hand without the extra
    raise ImportError(
        "the Phoenix HTTP service needs FastAPI and uvicorn: pip install 'phoenix-protocol[server]'"
    ) from _exc
