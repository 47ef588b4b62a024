"""Layer 4 (edges): the ``phx`` command: a thin translator of the library's results and errors."""
