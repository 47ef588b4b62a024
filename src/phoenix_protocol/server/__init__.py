"""Layer 4 (edges): the HTTP service (``phx serve``; the ``[server]`` extra)."""
