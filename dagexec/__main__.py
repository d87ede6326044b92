"""``python -m dagexec``: the command line (see ``python -m dagexec --help``)."""

from __future__ import annotations

from ._integrations.cli import main

raise SystemExit(main())
