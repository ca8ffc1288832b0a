"""The package's layers: each imports only the layers below it (lazy imports inside functions count too),
the engine and the model layer import nothing from the pytest side, and no module imports another that
imports it back."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "pytest_specbench"
LOWER_LAYERS = ("testing", "kernels", "engine", "models", "served")
#: the lower layers each lower layer may use: the engine runs the kernels, the models use both
LOWER_LAYERS_USED = {"engine": ("kernels",), "models": ("engine", "kernels")}
# Bottom to top; a module may import its own layer and those before it. plugin, tools and cli are the front
# ends (pytest's hooks, the tools a user runs, ``python -m pytest_specbench``) and import nothing of each other,
# but cli registers the tools' subcommands. testing (tiny models for the tests, the tools and the benchmark
# scripts) is at the bottom: it imports no other package module. kernels (the CPU kernels, the forms they are
# settled into, the device's clock and facts) is below the engine, which runs its models through them. served
# (a serving engine over HTTP) stands beside the engine and the models, for measure to use.
LAYERS = (
    "testing",
    "kernels",
    "engine",
    "models",
    "served",
    "settings",
    "cases",
    "results",
    "measure",
    "report",
    "plugin",
    "tools",
    "cli",
)
FRONT_ENDS = {"plugin", "tools", "cli"}
#: (importer, imported) across the front ends
FRONT_END_IMPORTS = {("cli", "tools")}
# Standard-library-only helpers any layer may use.
LEAVES = {"pytest_specbench.atomic"}


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    """Package modules and third-party roots that ``path`` imports, anywhere in the file."""
    package = _module_name(path) if path.name == "__init__.py" else _module_name(path).rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            found.add(module)
            # "from . import gate" names a module, not an attribute
            found.update(f"{module}.{alias.name}" for alias in node.names)
    modules = {_module_name(p) for p in PACKAGE.rglob("*.py")}
    return {name for name in found if name in modules or not name.startswith("pytest_specbench")}


MODULES = {_module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}
GRAPH = {name: {i for i in _imports(path) if i in MODULES and i != name} for name, path in MODULES.items()}


@pytest.mark.parametrize("name", [n for n in MODULES if n.split(".")[1:2] and n.split(".")[1] in LOWER_LAYERS])
def test_lower_layers_import_nothing_from_the_pytest_side(name):
    layer = ".".join(name.split(".")[:2])
    imported = _imports(MODULES[name])
    assert "pytest" not in {module.split(".")[0] for module in imported}, f"{name} imports pytest"
    upward = {
        m
        for m in imported
        if m.startswith("pytest_specbench") and m in MODULES and not m.startswith(layer) and m not in LEAVES
    }
    below = LOWER_LAYERS_USED.get(layer.rpartition(".")[2], ())
    upward = {m for m in upward if _layer(m) not in below}
    assert not upward, f"{name} imports {sorted(upward)} from above its layer"


def _layer(name: str) -> str:
    parts = name.split(".")
    return parts[1] if len(parts) > 1 else ""


def test_every_module_is_in_a_layer():
    # Only the package's front matter and the standard-library leaves stand outside the layers.
    outside = (
        {n for n in MODULES if _layer(n) not in LAYERS} - LEAVES - {"pytest_specbench", "pytest_specbench.__main__"}
    )
    assert not outside, f"modules outside the layers {LAYERS}: {sorted(outside)}"


def _across_front_ends(importer: str, imported: str) -> bool:
    """Whether a front end imports another (other than cli registering the tools)."""
    return importer != imported and {importer, imported} <= FRONT_ENDS and (importer, imported) not in FRONT_END_IMPORTS


@pytest.mark.parametrize("name", [n for n in MODULES if _layer(n) in LAYERS])
def test_each_layer_imports_only_the_layers_below(name):
    rank = LAYERS.index(_layer(name))
    upward = {
        m
        for m in GRAPH[name]
        if _layer(m) in LAYERS and (LAYERS.index(_layer(m)) > rank or _across_front_ends(_layer(name), _layer(m)))
    }
    assert not upward, f"{name} imports {sorted(upward)} from a layer above its own ({_layer(name)})"


def test_the_engine_does_not_import_the_model_layer():
    engine = [n for n in MODULES if n.startswith("pytest_specbench.engine")]
    assert not {m for n in engine for m in GRAPH[n] if m.startswith("pytest_specbench.models")}


def test_no_import_circle():
    # Depth-first search for a back edge; the package __init__ only names modules lazily.
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(GRAPH[node] - {"pytest_specbench"}):
            if state.get(nxt) == 1:
                raise AssertionError("import circle: " + " -> ".join(path[path.index(nxt) :] + [nxt]))
            if nxt not in state:
                visit(nxt)
        path.pop()
        state[node] = 2

    for name in MODULES:
        if name not in state:
            visit(name)


def test_importing_the_plugin_does_not_import_torch():
    import subprocess
    import sys

    code = "import sys, pytest_specbench.plugin.hooks; print('torch' in sys.modules)"
    assert (
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
        == "False"
    )


#: where an engine's name may be written: the engines' declarations (settings/engines.py and a served engine's own
#: settings) and their modules (measure/engines.py for the in-process ones, a served engine's own module and server)
ENGINE_MODULES = {
    "settings/engines.py",
    "settings/vllm_settings.py",
    "settings/llamacpp_settings.py",
    "measure/engines.py",
    "measure/vllm_engine.py",
    "measure/llamacpp_engine.py",
    "served/vllm_server.py",
    "served/llamacpp_server.py",
}
#: written by name elsewhere on purpose: the GPU check plans its legs by engine, as a user's script would; and
#: ``-march=native`` is a compiler flag, not an engine
NAMED_BY_DESIGN = ("tools/gpu_check/", "kernels/few_rows.py")


def test_no_engine_name_is_written_outside_the_engines_declarations_and_modules():
    # An engine's traits, options and methods are declared once; code elsewhere asks them, so a new engine is not a
    # hunt for strings (issue: an axis and an engine declared once).
    from pytest_specbench.settings.engines import ENGINE_NAMES

    found = [
        f"{relative}:{node.lineno}: {node.value!r}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if (relative := str(path.relative_to(PACKAGE))) not in ENGINE_MODULES
        and not relative.startswith(NAMED_BY_DESIGN)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Constant) and node.value in ENGINE_NAMES
    ]
    assert found == []
