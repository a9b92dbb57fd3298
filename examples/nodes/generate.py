"""Regenerate the example node trees in this directory (usable with `koordlet ... --host-root examples/nodes/<name>`).

Each `gen_*.py` module beside this file exposes `NODES: dict[str, Callable[[Path], None]]` building one node's
host tree (sysfs PCI layout from real device facts, vendor files, NVML snapshots). Run from the repository root:
`.venv/bin/python examples/nodes/generate.py`; tests check the committed trees match what this produces.
"""

from __future__ import annotations

import importlib.util
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "tests"))  # the simulated-sysfs builders live with the tests


def builders() -> dict[str, Callable[[Path], None]]:
    out: dict[str, Callable[[Path], None]] = {}
    for path in sorted(HERE.glob("gen_*.py")):
        spec = importlib.util.spec_from_file_location(path.stem, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        out.update(module.NODES)
    return out


def generate(target: Path, only: list[str] | None = None) -> list[str]:
    names = []
    for name, build in builders().items():
        if only and name not in only:
            continue
        node = target / name
        shutil.rmtree(node, ignore_errors=True)
        node.mkdir(parents=True)
        build(node)
        names.append(name)
    return names


if __name__ == "__main__":
    print("generated:", ", ".join(generate(HERE, sys.argv[1:] or None)))
