"""The scheduler's sub-packages import downward only (``ir`` <- ``profiles`` <- ``batching`` <-
``runtime``; ``sim`` on ``ir`` and ``profiles``), and the top-level folders too (``kernels`` <-
``engines`` <- ``scheduler`` <- ``ayo``): read from the source, no import run."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ALLOWED = {
    "ir": set(),
    "profiles": set(),
    "batching": {"ir"},
    "runtime": {"ir", "profiles", "batching"},
    "sim": {"ir", "profiles"},
}
TOP = ("kernels", "engines", "scheduler", "ayo")  # each may import only those before it


def _imports(path: Path) -> list[tuple[int, str]]:
    """(level, module) of every ``from X import`` and ``import X`` in ``path``."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module == "ayo":
            out += [(0, f"ayo.{alias.name}") for alias in node.names]  # from ayo import kernels
        elif isinstance(node, ast.ImportFrom):
            out.append((node.level, node.module or ""))
        elif isinstance(node, ast.Import):
            out += [(0, alias.name) for alias in node.names]
    return out


def test_scheduler_sub_packages_import_downward_only():
    for pkg, allowed in ALLOWED.items():
        for path in (ROOT / "scheduler" / pkg).glob("*.py"):
            for level, module in _imports(path):
                if level == 2:  # from ..x.y import
                    target = module.split(".")[0]
                elif level == 0 and module.startswith("ayo.scheduler."):
                    target = module.split(".")[2]
                else:
                    continue
                assert target == pkg or target in allowed, f"{path}: imports {target}"


def test_top_level_folders_import_downward_only():
    for i, folder in enumerate(TOP[:-1]):
        own = tuple(f"ayo.{name}" for name in TOP[: i + 1])  # itself and the folders below
        for path in (ROOT / folder).rglob("*.py"):
            for level, module in _imports(path):
                if level == 0 and (module == "ayo" or module.startswith("ayo.")):
                    ok = any(module == m or module.startswith(m + ".") for m in own)
                    assert ok, f"{path}: imports {module}"
