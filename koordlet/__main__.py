"""`python -m koordlet` runs the CLI."""

import sys

from koordlet.cli import main

sys.exit(main())
