"""The hook entry point that commands installed by Phoenix 0.1.0 name
(``from phoenix_protocol._hooks import main``), kept so that those settings go on working
(``phx install`` rewrites them to ``phoenix_protocol.integrations._hooks``)."""

from phoenix_protocol.integrations._hooks import main

__all__ = ["main"]
