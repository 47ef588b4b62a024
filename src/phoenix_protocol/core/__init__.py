"""Layer 1: durable file I/O, JSON, ids, the clock, errors, config, redaction, processes, git.

Imports nothing above it."""
