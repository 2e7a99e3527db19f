"""The package layout is the architecture: read strategax's import graph (every import
statement, those inside functions included; not those under `if TYPE_CHECKING:`) and fail on
an import cycle, an import of a higher layer, or a folder of more than 16 modules."""
import ast
from pathlib import Path

import networkx as nx

ROOT = Path(__file__).resolve().parent.parent / "strategax"

# Lowest first. A module may import modules of its own package and of lower layers only.
LAYERS = [
    {"errors", "_markers"},
    {"_context"},
    {"ir"},
    {"dialects"},
    {"passes", "backends"},
    {"trace", "cluster"},
    {"variables", "input"},
    {"distribute", "checkpoint"},
    {"keras"},  # the Keras adapter: uses strategies, input, variables and trace; nothing below imports it
    {"nn", "cluster_resolver", "tools", "data", "metrics", "experimental"},  # facades and command lines
    {"__init__"},  # `import strategax as sx`: the public names
]
RANK = {package: i for i, layer in enumerate(LAYERS) for package in layer}
MAX_MODULES = 16


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def package_of(module: str) -> str:
    """The layer package of `strategax.x.y` (`x`); `__init__` for `strategax` itself."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _type_checking_only(node: ast.AST, parents: dict) -> bool:
    while node in parents:
        node = parents[node]
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            return True
    return False


def imports_of(path: Path, modules: set[str]) -> set[str]:
    """The strategax modules `path` imports (a `from pkg import name` of a submodule counts as
    importing that submodule)."""
    tree = ast.parse(path.read_text())
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    me = module_name(path)
    package = me if path.name == "__init__.py" else me.rpartition(".")[0]
    out = set()
    for node in ast.walk(tree):
        if not isinstance(node, (ast.Import, ast.ImportFrom)) or _type_checking_only(node, parents):
            continue
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.startswith("strategax"))
        else:
            if node.level:
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if not target.startswith("strategax"):
                continue
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                out.add(sub if sub in modules else target)
    return {m for m in out if m != me}


def import_graph() -> nx.DiGraph:
    files = sorted(ROOT.rglob("*.py"))
    modules = {module_name(f) for f in files}
    g = nx.DiGraph()
    for f in files:
        g.add_node(module_name(f))
        for target in imports_of(f, modules):
            if target in modules:
                g.add_edge(module_name(f), target)
    return g


def test_every_package_has_a_layer():
    # Intent: a new package is placed in the layer picture before it is used.
    packages = {package_of(m) for m in import_graph()}
    assert packages <= set(RANK), f"packages without a layer: {packages - set(RANK)}"


def test_no_import_cycles():
    # Intent: no two modules import each other, directly or through others, deferred imports included.
    g = import_graph()
    cycles = list(nx.simple_cycles(g))
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c + c[:1]) for c in cycles[:10])


def test_no_upward_imports():
    # Intent: each layer imports only the layers below it (and its own package).
    bad = []
    for a, b in import_graph().edges:
        pa, pb = package_of(a), package_of(b)
        if pa != pb and RANK[pb] >= RANK[pa]:
            bad.append(f"{a} imports {b} (layer {RANK[pa]} -> {RANK[pb]})")
    assert not bad, "imports that do not point down:\n" + "\n".join(bad)


def test_no_folder_over_16_modules():
    # Intent: folders stay small enough to read; split one that grows past 16 modules.
    counts = {}
    for f in ROOT.rglob("*.py"):
        counts[f.parent] = counts.get(f.parent, 0) + 1
    big = {str(d.relative_to(ROOT.parent)): n for d, n in counts.items() if n > MAX_MODULES}
    assert not big, f"folders over {MAX_MODULES} modules: {big}"


def test_the_graph_sees_deferred_and_relative_imports(tmp_path):
    # Intent: the reader itself is right: imports inside functions and relative imports count.
    pkg = tmp_path / "strategax" / "a"
    pkg.mkdir(parents=True)
    f = pkg / "m.py"
    f.write_text("from . import n\nfrom ..b import c\ndef g():\n    from ..errors import X\n"
                 "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..d import e\n")
    global ROOT
    saved, ROOT = ROOT, tmp_path / "strategax"
    try:
        got = imports_of(f, {"strategax.a.n", "strategax.b.c", "strategax.errors"})
    finally:
        ROOT = saved
    assert got == {"strategax.a.n", "strategax.b.c", "strategax.errors"}


def test_nothing_under_ir_imports_jax():
    # Intent: the IR knows no JAX (DESIGN.md): its attributes are plain data; how a JAX object
    # becomes one, and back, is `dialects/jax_attrs.py`'s job.
    bad = []
    for path in sorted((ROOT / "ir").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            bad += [f"{path.name}:{node.lineno} imports {n}" for n in names if n.split(".")[0] in ("jax", "jaxlib")]
    assert not bad, "\n".join(bad)


def test_importing_strategax_does_not_import_ray():
    # Intent: Ray is optional (`strategax[ray]`) and heavy: only a ParameterServerStrategy
    # imports it, when it starts its actors, and a MultiWorkerMirroredStrategy inside a Ray
    # Train worker (where Ray is imported already); a one-machine MultiWorkerMirroredStrategy,
    # which looks for Ray Train, does not import it.
    import subprocess
    import sys

    code = ("import sys, strategax, strategax.experimental; strategax.MultiWorkerMirroredStrategy(); "
            "assert 'ray' not in sys.modules, sorted(m for m in sys.modules if m.startswith('ray'))[:5]")
    env = dict(__import__("os").environ, PYTHONPATH=str(ROOT.parent), JAX_PLATFORMS="cpu")
    env.pop("TF_CONFIG", None)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
