"""Phoenix's SQL store layer: one database per home, SQLite embedded or PostgreSQL distributed.

- ``open_database(home, config)`` (``_db``) is the one factory: the only code that reads the
  ``store`` setting. It returns a ``Database`` whose ``transaction(work)`` runs ``work(tx)`` in
  one transaction, on either engine.
- Stores write their SQL once, with ``?`` placeholders; what differs between the engines sits in
  ``Dialect`` (placeholders, row locks, ``SKIP LOCKED``, arrays, full-text search).
- ``_schema`` holds the numbered migrations, run on both engines by the same code.

Nothing here is imported on the hook hot path.
"""
