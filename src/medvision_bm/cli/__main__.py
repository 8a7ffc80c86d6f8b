"""`python -m medvision_bm.cli`: the `medvision-bm` command (job scripts and tests call it this way)."""

from medvision_bm.cli import main

raise SystemExit(main())
