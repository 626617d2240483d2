"""`python -m collector`: the same entry point as the `topoweb-collector` console script."""

from collector.cli import main

raise SystemExit(main())
