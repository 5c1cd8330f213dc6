"""``python -m pipesim`` runs the command line."""

from pipesim.cli import main

raise SystemExit(main())
