"""`python -m cluster.cli`: the `kraftwerk` command without its console script."""
import sys

from cluster.cli import main

sys.exit(main())
