"""``python -m phoenix_protocol`` is ``phx``."""

from phoenix_protocol.cli._entry import main

raise SystemExit(main())
