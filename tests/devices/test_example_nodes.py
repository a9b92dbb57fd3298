"""The committed example node trees are exactly what examples/nodes/generate.py builds (no hand edits, no drift)."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from types import ModuleType

import pytest

from conftest import require

NODES_DIR = Path(__file__).resolve().parents[2] / "examples" / "nodes"
FIXTURES = Path(__file__).resolve().parents[3] / "shared" / "fixtures" / "vendor-outputs"


def _generate_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("examples_generate", NODES_DIR / "generate.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _tree(root: Path) -> dict[str, tuple[str, str | bytes]]:
    """relative path → ("link", target) | ("file", bytes) | ("dir", "")."""
    out: dict[str, tuple[str, str | bytes]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            rel = str(p.relative_to(root))
            if p.is_symlink():
                out[rel] = ("link", os.readlink(p))
            elif p.is_dir():
                out[rel] = ("dir", "")
            else:
                out[rel] = ("file", p.read_bytes())
    return out


@pytest.mark.parametrize("node", ["h800-nvlink", "l20-pcie", "ascend-910b", "mlu370", "a10-smi", "h100-hgx-smi",
                                  "rtx4090x8-smi", "a100-mig-smi", "a10g-smi", "t4-smi"])
def test_committed_tree_matches_generator(tmp_path: Path, node: str) -> None:
    require(FIXTURES.is_dir(), "shared/fixtures/vendor-outputs not found (the xPU nodes replay recorded outputs)")
    gen = _generate_module()
    assert node in gen.builders()
    assert gen.generate(tmp_path, [node]) == [node]
    fresh, committed = _tree(tmp_path / node), _tree(NODES_DIR / node)
    assert sorted(fresh) == sorted(committed)
    assert [k for k in fresh if fresh[k] != committed[k]] == []
    assert any(kind == "link" for kind, _ in fresh.values())
    assert "README.md" in fresh
