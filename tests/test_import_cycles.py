"""No import cycle among the repository's own modules, counting imports made inside functions.

An import inside a function hides a cycle from Python (the second module is loaded on the first call,
after both exist) but not from a reader: two modules that import each other are one module split in
two, and the next top-level import between them breaks the import. This reads every module's
``import`` statements with ``ast`` (module level, functions, methods, ``if TYPE_CHECKING`` blocks
alike), maps them to the repository's modules and fails on every strongly connected component of
more than one module, naming the import lines that close it."""
from __future__ import annotations

import ast
from pathlib import Path
from typing import Dict, List, Set, Tuple

import numpy as np
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import connected_components

ROOT = Path(__file__).resolve().parents[1]
# (where module names start, the top-level packages and scripts under it); benchmarks/ is its own root:
# its package is imported as ``dpbench`` (benchmarks/run_benchmark.py puts benchmarks/ on sys.path)
ROOTS = ((ROOT, ("dpstream", "transforms", "pipelines", "tests", "templates")), (ROOT / "benchmarks", None))


def module_files() -> Dict[str, Path]:
    mods = {}
    for base, tops in ROOTS:
        files = ([f for top in tops for f in (base / top).rglob("*.py")] if tops
                 else list(base.rglob("*.py")))
        for f in files:
            if ".venv" in f.parts or "__pycache__" in f.parts:
                continue
            parts = list(f.relative_to(base).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            mods[".".join(parts)] = f
    return mods


def _resolve(name: str, mods) -> str:
    """The repository module an imported dotted name loads last (``a.b.c`` → ``a.b.c`` if it is a
    module, else ``a.b`` …); '' if it is not ours."""
    parts = name.split(".")
    while parts:
        cand = ".".join(parts)
        if cand in mods:
            return cand
        parts.pop()
    return ""


def imports(mod: str, path: Path, mods) -> List[Tuple[str, int]]:
    """``[(imported repository module, line)]`` of every import statement in the file."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(_resolve(a.name, mods), node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".") if package else []
                base = base[:len(base) - (node.level - 1)] if node.level > 1 else base
                base = ".".join(base + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            for a in node.names:  # `from pkg import submodule` loads the submodule
                sub = f"{base}.{a.name}" if base else a.name
                out.append((sub if sub in mods else _resolve(base, mods), node.lineno))
    return [(m, line) for m, line in out if m and m != mod]


def import_graph():
    mods = module_files()
    edges: Dict[str, Dict[str, int]] = {m: {} for m in mods}
    for m, f in mods.items():
        for dep, line in imports(m, f, mods):
            edges[m].setdefault(dep, line)
    return mods, edges


def cycles(edges: Dict[str, Dict[str, int]]) -> List[Set[str]]:
    names = sorted(edges)
    index = {m: i for i, m in enumerate(names)}
    rows = [index[a] for a in names for b in edges[a]]
    cols = [index[b] for a in names for b in edges[a]]
    g = csr_matrix((np.ones(len(rows)), (rows, cols)), shape=(len(names), len(names)))
    _, label = connected_components(g, directed=True, connection="strong")
    groups: Dict[int, Set[str]] = {}
    for m, lab in zip(names, label):
        groups.setdefault(int(lab), set()).add(m)
    return [g for g in groups.values() if len(g) > 1]


def test_the_finder_sees_a_cycle_closed_inside_a_function(tmp_path):
    """The detector itself: a cycle whose one side imports inside a function is found."""
    (tmp_path / "a.py").write_text("import b\n")
    (tmp_path / "b.py").write_text("def f():\n    from a import x\n    return x\n")
    (tmp_path / "c.py").write_text("from . import a\n")
    mods = {"a": tmp_path / "a.py", "b": tmp_path / "b.py", "c": tmp_path / "c.py"}
    edges = {m: dict(imports(m, f, mods)) for m, f in mods.items()}
    assert edges["b"] == {"a": 2}
    assert cycles(edges) == [{"a", "b"}]


def test_no_import_cycle_among_the_repository_modules():
    mods, edges = import_graph()
    assert {"pipelines.dp_stream_cluster", "pipelines.report", "dpbench.cli", "dpbench.sweep",
            "transforms.ticks", "dpstream.engine"} <= set(mods)  # the walk sees the packages
    found = []
    for group in cycles(edges):
        closing = sorted(f"{a} → {b} ({mods[a].relative_to(ROOT)}:{line})"
                         for a in sorted(group) for b, line in edges[a].items() if b in group)
        found.append("; ".join(closing))
    assert not found, "import cycles:\n" + "\n".join(found)


KNOWN_PRIVATE: set = set()  # (importer, module, name) exceptions: none


def test_no_private_name_crosses_a_module_boundary():
    """``from module import _name`` between the library's modules means the helper is part of two
    modules' contract while its name says it is one module's detail: make it public or move it."""
    mods = module_files()
    found = []
    for m, f in mods.items():
        if m.split(".")[0] not in ("dpstream", "transforms", "pipelines"):
            continue
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and not node.level:
                for a in node.names:
                    if a.name.startswith("_") and not a.name.startswith("__") \
                            and _resolve(node.module, mods) and (m, node.module, a.name) not in KNOWN_PRIVATE:
                        found.append(f"{f.relative_to(ROOT)}:{node.lineno}: {node.module}.{a.name}")
    assert not found, "private names imported across modules:\n" + "\n".join(found)
