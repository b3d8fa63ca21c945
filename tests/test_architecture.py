"""The package's layering: no import cycles, the engine never imports widgets or plots."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "genlab"


def _modules() -> dict[str, Path]:
    mods = {}
    for path in PACKAGE.rglob("*.py"):
        rel = path.relative_to(PACKAGE.parent).with_suffix("")
        name = ".".join(rel.parts).removesuffix(".__init__")
        mods[name] = path
    return mods


def _imports(mods: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the genlab modules it imports (at any depth of the file)."""
    edges: dict[str, set[str]] = {m: set() for m in mods}
    for mod, path in mods.items():
        pkg = mod.split(".") if path.name == "__init__.py" else mod.split(".")[:-1]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = ".".join(pkg[: len(pkg) - node.level + 1] + [node.module or ""])
                    base = base.rstrip(".")
                else:
                    base = node.module or ""
                targets = [f"{base}.{a.name}" for a in node.names] + [base]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                continue
            for target in targets:
                while target and target not in mods:
                    target = target.rpartition(".")[0]
                if target and target != mod and not mod.startswith(target + "."):
                    edges[mod].add(target)
    return edges


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    found, done = [], set()

    def visit(node, path):
        for nxt in sorted(edges[node]):
            if nxt in path:
                found.append(path[path.index(nxt) :] + [nxt])
            elif nxt not in done:
                done.add(nxt)
                visit(nxt, path + [nxt])

    for start in sorted(edges):
        if start not in done:
            done.add(start)
            visit(start, [start])
    return found


def test_no_import_cycles():
    cycles = _cycles(_imports(_modules()))
    assert cycles == [], "import cycles: " + "; ".join(" -> ".join(c) for c in cycles)


# Lazy re-exports (genlab.lazy) name their modules as strings, so they are not imports
# here: `from genlab.watermark import watermark_html` (now rendered in the widgets layer)
# is resolved only when the name is read.
LAZY_ALIASES: dict[str, set[str]] = {}


def test_the_engine_layers_never_import_widgets_or_plots():
    edges = _imports(_modules())
    low = [m for m in edges if not m.startswith(("genlab.widgets", "genlab.plots"))]
    low = [m for m in low if m != "genlab"]  # the package's lazy exports
    for mod in low:
        bad = {t for t in edges[mod] if t.startswith(("genlab.widgets", "genlab.plots"))}
        bad -= LAZY_ALIASES.get(mod, set())
        assert not bad, f"{mod} imports {sorted(bad)}"


def test_strategies_never_see_the_run():
    """Strategies only choose tokens: they see the StepContext they are handed, never the
    Run, and they do not tune the machine or reach inside the model."""
    edges = _imports(_modules())
    for mod in edges:
        if mod.startswith("genlab.strategies"):
            bad = _into(edges[mod], "genlab.run", "genlab.runtime", "genlab.inside")
            assert not bad, f"{mod} imports {bad}"


# genlab/'s own modules: the front door (genlab.load, genlab.LM, the lazy exports), the
# reference's surface that is not part of a run (outputs, stopping criteria, streamers),
# the glossary, the demo script, and the small normalisations every layer shares.
TOP_LEVEL_AT_MOST = 12

# The folders that show the architecture, each named for one concept.
FOLDERS = {
    "run": "the Run and its parts: the step loop, state, plan, records, timeline, forks",
    "runtime": "what makes it fast on this machine: threads, weight forms, caches, draws",
    "inside": "inside the model: hook points, the lens, steering, patching, attribution",
    "strategies": "how the next tokens are chosen",
    "processors": "logits processors: how the scores are changed before choosing",
    "models": "model wrappers and loaders",
    "text": "tokenizers, tokens as shown, chat templates, healing, grammars",
    "config": "every setting, checked",
    "watermark": "watermark processors and detection",
    "experiments": "many generations: scoring, sweeps, best-of-N, evaluation",
    "plots": "matplotlib figures",
    "widgets": "Jupyter panels",
}


def _into(targets: set[str], *packages: str) -> list[str]:
    return sorted(
        t for t in targets if t.startswith(tuple(p + "." for p in packages)) or t in packages
    )


def test_the_top_level_is_a_front_door_and_folders():
    """A newcomer who opens genlab/ sees the architecture as folders, not a flat list."""
    direct = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(direct) <= TOP_LEVEL_AT_MOST, f"{len(direct)} modules directly in genlab/: {direct}"
    folders = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    assert folders == set(FOLDERS), f"folders {sorted(folders)}; FOLDERS says {sorted(FOLDERS)}"
    for name in FOLDERS:
        doc = ast.get_docstring(ast.parse((PACKAGE / name / "__init__.py").read_text()))
        assert doc, f"genlab/{name}/__init__.py has no docstring saying what the folder holds"


def test_the_runtime_knows_nothing_of_runs():
    """The run calls the runtime (threads, weight forms, caches); the runtime never calls
    back up, so machine tuning cannot reach into the step loop's decisions."""
    edges = _imports(_modules())
    for mod in edges:
        if mod.startswith("genlab.runtime"):
            bad = _into(edges[mod], "genlab.run", "genlab.strategies", "genlab.processors")
            assert not bad, f"{mod} imports {bad}"


def test_inside_the_model_works_without_a_run():
    """Hook points, the lens and steering work on a model, so they work in any run, in a
    fork, and outside one: nothing in genlab.inside imports the run or a strategy."""
    edges = _imports(_modules())
    for mod in edges:
        if mod.startswith("genlab.inside"):
            bad = _into(edges[mod], "genlab.run", "genlab.strategies", "genlab.experiments")
            assert not bad, f"{mod} imports {bad}"


def test_only_the_layers_above_the_run_import_it():
    """The run sits on the strategies, processors, models and runtime; only the front door
    (genlab.lm), experiments, plots and widgets import it."""
    above = ("genlab.run", "genlab.experiments", "genlab.plots", "genlab.widgets")
    edges = _imports(_modules())
    for mod in edges:
        if mod in ("genlab", "genlab.lm") or mod.startswith(above):
            continue
        bad = _into(edges[mod], "genlab.run", "genlab.experiments")
        assert not bad, f"{mod} imports {bad}"


def _defines_a_model(node: ast.ClassDef) -> bool:
    """A class with the model protocol's methods: new_cache, or forward(self, input_ids...)
    (a strategy's forward takes the step context)."""
    for item in node.body:
        if isinstance(item, ast.FunctionDef):
            params = [a.arg for a in item.args.args]
            if item.name == "new_cache":
                return True
            if item.name == "forward" and params[1:2] == ["input_ids"]:
                return True
    return False


def test_strategies_hold_strategies_not_tables_or_models():
    """strategies/ only chooses tokens: its pandas tables live with the tables (genlab.run.trace),
    model wrappers in models/, and the shared beam bookkeeping in its own module."""
    mods = _modules()
    for mod, path in mods.items():
        if not mod.startswith("genlab.strategies"):
            continue
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""] if not node.level else []
            else:
                names = []
            assert not [n for n in names if n.split(".")[0] == "pandas"], (
                f"{mod} imports pandas: build its tables in genlab.run.trace"
            )
            if isinstance(node, ast.ClassDef):
                assert not _defines_a_model(node), (
                    f"{mod}.{node.name} is a model: it belongs in genlab.models"
                )
    edges = _imports(mods)
    assert "genlab.strategies.group_beam" not in edges["genlab.strategies.constrained_beam"]


def test_lazy_exports_have_one_mechanism():
    """Every module-level ``__getattr__`` comes from genlab.lazy (public names loaded on
    first use): no module writes its own."""
    own = [
        str(path.relative_to(PACKAGE.parent))
        for path in PACKAGE.rglob("*.py")
        for node in ast.parse(path.read_text()).body
        if isinstance(node, ast.FunctionDef) and node.name == "__getattr__"
    ]  # fmt: skip
    assert own == [], f"modules with a hand-written module __getattr__: {own}"


def test_every_module_of_a_folder_is_an_attribute_in_a_fresh_process():
    """``genlab.experiments.tasks.capitals()`` works after a plain ``import genlab``, as the
    lessons write it: each folder reaches its modules lazily, and lists every one of them."""
    import subprocess
    import sys

    rooms = ("run", "runtime", "inside", "text", "experiments")
    expected = {
        room: sorted(p.stem for p in (PACKAGE / room).glob("*.py") if p.stem != "__init__")
        for room in rooms
    }
    code = (
        "import json, genlab\n"
        f"rooms = {rooms!r}\n"
        "seen = {r: sorted(m for m in dir(getattr(genlab, r)) if not m.startswith('_')) "
        "for r in rooms}\n"
        "for r, mods in seen.items():\n"
        "    for m in mods:\n"
        "        assert getattr(getattr(genlab, r), m).__name__ == f'genlab.{r}.{m}'\n"
        "print(json.dumps(seen))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=PACKAGE.parent
    )
    assert done.returncode == 0, done.stderr
    import json

    assert json.loads(done.stdout) == expected
