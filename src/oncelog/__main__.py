"""`python -m oncelog` is the same as the `oncelog` console script."""

from oncelog.cli.main import main

raise SystemExit(main())
