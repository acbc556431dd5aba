"""The library's imports, read from the source (no import run):

- the top-level folders import downward only (``kernels`` <- ``engines`` <- ``scheduler`` <-
  ``ayo``), and so do the scheduler's sub-packages (``ir`` <- ``profiles`` <- ``batching`` <-
  ``runtime``; ``sim`` on ``ir`` and ``profiles``);
- ``ayo``'s sub-packages too: what serves (``server``, ``cli``) sits on the runtime, never the
  reverse; the runtime on workflows, passes, apps and the cluster placement;
- no two library modules import each other, directly or around a longer circle (every import
  counts, a function's lazy one included);
- no module takes a private name (``_x``) from another package's module.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = {"kernels": "ayo.kernels", "engines": "ayo.engines", "scheduler": "ayo.scheduler"}
ALLOWED = {
    "ir": set(),
    "profiles": set(),
    "batching": {"ir"},
    "runtime": {"ir", "profiles", "batching"},
    "sim": {"ir", "profiles"},
}
TOP = ("kernels", "engines", "scheduler", "ayo")  # each may import only those before it
# ayo's sub-packages (and top modules): the ones each may not import
AYO_BELOW = {
    "workflow": {"passes", "apps", "runtime", "cluster", "server", "cli", "client"},
    "passes": {"apps", "runtime", "cluster", "server", "cli", "client"},
    "apps": {"runtime", "cluster", "server", "cli", "client"},
    "cluster": {"runtime", "server", "cli", "client"},
    "runtime": {"server", "cli", "client"},
    "client": {"runtime", "server", "cli", "cluster", "passes", "apps", "workflow"},
    "server": {"cli"},
}


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[0] in FOLDERS:
        parts[0] = FOLDERS[parts[0]]
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _library() -> dict[str, Path]:
    files = [p for folder in (*FOLDERS, "ayo") for p in (ROOT / folder).rglob("*.py")]
    return {_module_name(p): p for p in files}


def _resolve(module: str, path: Path, level: int, target: str | None) -> str:
    if level == 0:
        return target or ""
    base = _module_name(path).split(".")
    if path.name != "__init__.py":
        base.pop()
    base = base[: len(base) - (level - 1)]
    return ".".join([*base, target] if target else base)


def _imports(path: Path) -> list[tuple[int, str, list[str]]]:
    """(level, module, names) of every import in ``path``."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            names = [a.name for a in node.names]
            if node.level == 0 and node.module == "ayo":
                out += [(0, f"ayo.{n}", []) for n in names]  # from ayo import kernels
            else:
                out.append((node.level, node.module or "", names))
        elif isinstance(node, ast.Import):
            out += [(0, alias.name, []) for alias in node.names]
    return out


def _graph() -> dict[str, set[str]]:
    """Module -> the library modules it imports (``from pkg import mod`` counts ``pkg.mod``)."""
    modules = _library()
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for name, path in modules.items():
        for level, target, names in _imports(path):
            full = _resolve(name, path, level, target)
            candidates = [f"{full}.{n}" for n in names] + [full]
            for c in candidates:
                while c and c not in modules:
                    c = c.rpartition(".")[0]
                if c and c != name:
                    graph[name].add(c)
                    break
    return graph


def test_scheduler_sub_packages_import_downward_only():
    for pkg, allowed in ALLOWED.items():
        for path in (ROOT / "scheduler" / pkg).glob("*.py"):
            for level, module, _ in _imports(path):
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
            for level, module, _ in _imports(path):
                if level == 0 and (module == "ayo" or module.startswith("ayo.")):
                    ok = any(module == m or module.startswith(m + ".") for m in own)
                    assert ok, f"{path}: imports {module}"


def test_ayo_sub_packages_import_downward_only():
    graph = _graph()
    for module, targets in graph.items():
        parts = module.split(".")
        if parts[0] != "ayo" or len(parts) < 2 or parts[1] not in AYO_BELOW:
            continue
        for target in targets:
            t = target.split(".")
            if t[0] == "ayo" and len(t) > 1:
                assert t[1] not in AYO_BELOW[parts[1]], f"{module} imports {target}"


def test_no_import_circles():
    graph = _graph()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    assert circles == [], circles


def test_no_private_names_from_another_package():
    modules = _library()
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for level, target, names in _imports(path):
            full = _resolve(name, path, level, target)
            if not full.startswith("ayo."):
                continue
            private = [n for n in names if n.startswith("_") and not n.startswith("__")]
            if private and not (full == package or full.startswith(package + ".")):
                raise AssertionError(f"{name} imports {private} from {full}")
