"""`koord-descheduler`: Koordinator's descheduler command line (`simulate`; `run` is not built yet)."""

from __future__ import annotations

import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    sys.stderr.write("koord-descheduler: not built yet\n")
    return 2
