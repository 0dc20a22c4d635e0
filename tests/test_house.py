"""Static facts about the shipped packages (and the benchmarks and tools
beside them) that keep the house readable (docs/architecture.md): they are
read from the source with ``ast``, nothing is imported.

- no import circle between files (an import under ``TYPE_CHECKING``, in a
  function, or in a package face's ``__init__.pyi`` counts: a reader
  follows it too);
- no import of another package's private module (a path part starting
  with ``_``): packages meet at their faces;
- no function over ``FUNCTION_LIMIT`` lines of code (blank lines, comments
  and docstrings aside);
- no module of the command-line package over ``CLI_MODULE_LIMIT`` lines;
- ``multiserver``'s rooms (its subpackages) keep their arrows
  (``ROOM_RULES``): the daemon never imports a client, the protocol
  neither, the terminal none of the three, and the OS seam (``system``)
  only itself and ``multiserver._errors``; nothing in ``multiserver``
  imports the packages built on it (``restore``, ``adopter``,
  ``multiserver_cli``) or the build's ``tools``;
- a room's ``__init__.py`` is a docstring and nothing else: modules
  import each other by full path, never through a room.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import attrs

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("multiserver", "restore", "adopter", "multiserver_cli")
# Held to the same rules, though not shipped: the benchmarks (but their
# scratch output, benchmarks/out, git-ignored) and the build's tools.
UNSHIPPED = ("benchmarks", "tools")
# The code generators read the private modules they write twins of.
READS_PRIVATE = ("tools",)
FUNCTION_LIMIT = 80
CLI_MODULE_LIMIT = 450

# multiserver's rooms, and the packages around it: a module of the room on
# the left imports nothing under a prefix on the right (docs/architecture.md,
# "multiserver/: rooms").
ROOM_RULES: dict[str, tuple[str, ...]] = {
    "multiserver.daemon": ("multiserver.client",),
    "multiserver.protocol": ("multiserver.daemon", "multiserver.client"),
    "multiserver.terminal": ("multiserver.protocol", "multiserver.daemon", "multiserver.client"),
    "multiserver": ("multiserver_cli", "restore", "adopter", "tools"),
    # The library a terminal app embeds: never the command line (issue 37).
    "restore": ("multiserver_cli", "adopter", "tools"),
    "adopter": ("multiserver_cli", "tools"),
}
# The OS seam imports only itself and the errors: every room may use it.
SEAM = "multiserver.system"
SEAM_MAY_IMPORT = (SEAM, "multiserver._errors")


@attrs.frozen
class Module:
    name: str  # dotted: restore.store._model
    path: Path  # the .py (or a face's .pyi)
    is_package: bool

    @property
    def package(self) -> str:
        return self.name.split(".")[0]

    def tree(self) -> ast.Module:
        return ast.parse(self.path.read_text(), str(self.path))


def shipped_modules() -> dict[str, Module]:
    """Every module of the shipped packages (and of the ``UNSHIPPED``
    ones), by dotted name; a package's face counts its ``__init__.pyi``
    too, as another file of the same module (``faces``)."""
    found: dict[str, Module] = {}
    for package in (*PACKAGES, *UNSHIPPED):
        for path in sorted((ROOT / package).rglob("*.py")):
            if path.is_relative_to(ROOT / "benchmarks" / "out"):
                continue
            rel = path.relative_to(ROOT).with_suffix("")
            parts = list(rel.parts)
            is_package = parts[-1] == "__init__"
            if is_package:
                parts.pop()
            found[".".join(parts)] = Module(".".join(parts), path, is_package)
    return found


def faces(modules: dict[str, Module]) -> dict[str, Path]:
    """The stubs beside package faces, by the package's dotted name."""
    return {
        name: m.path.with_suffix(".pyi")
        for name, m in modules.items()
        if m.is_package and m.path.with_suffix(".pyi").exists()
    }


def imports(module: Module, tree: ast.Module, modules: dict[str, Module]) -> Iterator[str]:
    """The dotted names of the shipped modules ``tree`` (of ``module``)
    imports: ``from P import name`` names the submodule P.name where there
    is one, else P."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield from _known(alias.name, modules)
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(module, node)
            if base is None:
                continue
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                if sub in modules:
                    yield sub
                else:
                    yield from _known(base, modules)


def _absolute(module: Module, node: ast.ImportFrom) -> str | None:
    if node.level == 0:
        return node.module
    parts = module.name.split(".")
    if not module.is_package:
        parts.pop()
    parts = parts[: len(parts) - (node.level - 1)]
    return ".".join([*parts, *([node.module] if node.module else [])])


def _known(name: str, modules: dict[str, Module]) -> Iterator[str]:
    """``name`` if it is ours (the longest of its prefixes that is)."""
    parts = name.split(".")
    while parts:
        if ".".join(parts) in modules:
            yield ".".join(parts)
            return
        parts.pop()


def import_graph() -> dict[str, set[str]]:
    modules = shipped_modules()
    stubs = faces(modules)
    graph: dict[str, set[str]] = {}
    for name, module in modules.items():
        targets = set(imports(module, module.tree(), modules))
        if name in stubs:
            stub = ast.parse(stubs[name].read_text(), str(stubs[name]))
            targets |= set(imports(module, stub, modules))
        # A submodule's import of its own package is of the package face:
        # Python runs the face first anyway, so it is no arrow of its own.
        graph[name] = {t for t in targets if t != name and not name.startswith(f"{t}.")}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one file (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
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
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def private_imports() -> list[str]:
    """``importer -> imported`` for each import of another package's
    private module."""
    bad = []
    for importer, targets in import_graph().items():
        for target in sorted(targets):
            top = target.split(".")[0]
            if importer.split(".")[0] in READS_PRIVATE:
                continue
            if top != importer.split(".")[0] and any(p.startswith("_") for p in target.split(".")):
                bad.append(f"{importer} -> {target}")
    return bad


def _under(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(f"{prefix}.")


def _imported_names(tree: ast.Module) -> Iterator[str]:
    """Every module name ``tree`` imports (absolute imports), ours or not:
    ``tools`` is no shipped package, so the graph does not hold it."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module


def room_breaches(graph: dict[str, set[str]], outside: dict[str, set[str]]) -> list[str]:
    """``importer -> imported`` for each import a room's rule forbids;
    ``outside``: the names each module imports that the graph does not
    hold (another distribution's, the build's)."""
    bad = []
    for importer in sorted(graph.keys() | outside.keys()):
        targets = graph.get(importer, set()) | outside.get(importer, set())
        for room, forbidden in ROOM_RULES.items():
            if _under(importer, room):
                bad += [
                    f"{importer} -> {t}"
                    for t in sorted(targets)
                    if any(_under(t, f) for f in forbidden)
                ]
        if _under(importer, SEAM):
            bad += [
                f"{importer} -> {t}"
                for t in sorted(graph.get(importer, set()))
                if not any(_under(t, ok) for ok in SEAM_MAY_IMPORT)
            ]
    return bad


def rooms_that_hold_code() -> list[str]:
    """The rooms (multiserver's subpackages but its faces, ``testing`` and
    ``internal``) whose ``__init__.py`` holds more than a docstring."""
    bad = []
    for name, module in shipped_modules().items():
        if not (module.is_package and name.startswith("multiserver.") and name.count(".") == 1):
            continue
        body = module.tree().body
        docstring_only = (
            len(body) == 1
            and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str)
        )
        if name not in ("multiserver.testing", "multiserver.internal") and not docstring_only:
            bad.append(name)
    return bad


def code_lines(node: ast.FunctionDef | ast.AsyncFunctionDef, source: list[str]) -> int:
    """Lines of code of a function: its lines less blank ones, comments and
    its docstring."""
    assert node.end_lineno is not None
    skip: set[int] = set()
    body = node.body
    if (
        body
        and isinstance(body[0], ast.Expr)
        and isinstance(body[0].value, ast.Constant)
        and isinstance(body[0].value.value, str)
    ):
        assert body[0].end_lineno is not None
        skip = set(range(body[0].lineno, body[0].end_lineno + 1))
    count = 0
    for lineno in range(node.lineno, node.end_lineno + 1):
        text = source[lineno - 1].strip()
        if lineno in skip or not text or text.startswith("#"):
            continue
        count += 1
    return count


def long_functions() -> list[str]:
    bad = []
    for module in shipped_modules().values():
        source = module.path.read_text().splitlines()
        for node in ast.walk(module.tree()):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                n = code_lines(node, source)
                if n > FUNCTION_LIMIT:
                    bad.append(f"{module.path.relative_to(ROOT)}:{node.lineno} {node.name}: {n}")
    return bad


def long_cli_modules() -> list[str]:
    bad = []
    for module in shipped_modules().values():
        if module.package == "multiserver_cli":
            n = len(module.path.read_text().splitlines())
            if n > CLI_MODULE_LIMIT:
                bad.append(f"{module.path.relative_to(ROOT)}: {n} lines")
    return bad


def test_no_import_circle_between_files() -> None:
    assert circles(import_graph()) == []


def test_no_import_of_another_packages_private_module() -> None:
    assert private_imports() == []


def test_no_function_over_the_limit() -> None:
    assert long_functions() == []


def test_no_command_line_module_over_the_limit() -> None:
    assert long_cli_modules() == []


def test_the_rooms_keep_their_arrows() -> None:
    modules = shipped_modules()
    outside = {
        name: {n for n in _imported_names(m.tree()) if n.split(".")[0] not in PACKAGES}
        for name, m in modules.items()
    }
    assert room_breaches(import_graph(), outside) == []


def test_a_room_is_a_docstring_and_nothing_else() -> None:
    assert rooms_that_hold_code() == []


def class_definitions(names: set[str], modules: dict[str, Module]) -> dict[str, list[str]]:
    """For each of ``names``, the modules that define a class of that name
    (at any depth: a class under ``if TYPE_CHECKING`` counts)."""
    found: dict[str, list[str]] = {name: [] for name in names}
    for name, module in sorted(modules.items()):
        for node in ast.walk(module.tree()):
            if isinstance(node, ast.ClassDef) and node.name in found:
                found[node.name].append(name)
    return found


def names_used(name: str, modules: dict[str, Module]) -> list[str]:
    """The modules that define or use ``name``."""
    return sorted(
        m
        for m, module in modules.items()
        if any(
            (isinstance(node, ast.Name) and node.id == name)
            or (isinstance(node, ast.Attribute) and node.attr == name)
            or (isinstance(node, ast.FunctionDef) and node.name == name)
            or (isinstance(node, ast.alias) and name in (node.name, node.asname))
            for node in ast.walk(module.tree())
        )
    )


def test_each_message_is_defined_once() -> None:
    """One class per message and per record on the wire: no generated twin
    beside it (a type checker and the run time see the same class)."""
    from multiserver.protocol._codec import FIELDS

    found = class_definitions(set(FIELDS), shipped_modules())
    assert {n: m for n, m in found.items() if m != ["multiserver.protocol._messages"]} == {}


def test_no_code_tells_a_message_by_its_type_code() -> None:
    """``isinstance`` tells a message's class (there is one class of each):
    no ``is_a`` comparing type codes across families."""
    assert names_used("is_a", shipped_modules()) == []


def test_the_face_is_one_list_and_holds_no_plumbing() -> None:
    """``multiserver``'s names are its ``EXPORTS`` (what a terminal app
    needs); what the project's own packages share besides is
    ``multiserver.internal``'s, and no name is in both."""
    import multiserver
    import multiserver.internal

    public, internal = set(multiserver.__all__), set(multiserver.internal.__all__)
    assert public == {n for names in multiserver.EXPORTS.values() for n in names}
    assert public & internal == set()
    plumbing = {"record", "replaced", "lazy_exports", "write_whole", "Twin", "find_sockets"}
    assert plumbing <= internal


def test_the_checks_see_what_they_look_for(tmp_path: Path) -> None:
    """Each check fails on a case made for it."""
    graph = {"a.x": {"a.y"}, "a.y": {"a.z"}, "a.z": {"a.x"}, "b": {"a.x"}}
    assert circles(graph) == [["a.x", "a.y", "a.z"]]
    source = "def f():\n    '''doc\n    more'''\n" + "    x = 1\n\n    # c\n" * 81
    tree = ast.parse(source)
    fn = tree.body[0]
    assert isinstance(fn, ast.FunctionDef)
    assert code_lines(fn, source.splitlines()) == 82
    here = Module("restore._x", tmp_path / "x.py", False)
    modules = {
        "multiserver": Module("multiserver", tmp_path, True),
        "multiserver.system._paths": Module("multiserver.system._paths", tmp_path, False),
        "restore._x": here,
    }
    tree = ast.parse(
        "from multiserver.system._paths import LockBusy\nfrom multiserver import DaemonPaths"
    )
    assert sorted(imports(here, tree, modules)) == ["multiserver", "multiserver.system._paths"]
    rooms = {
        "multiserver.daemon._a": {"multiserver.client._b", "multiserver.protocol._c"},
        "multiserver.protocol._c": {"multiserver.daemon"},
        "multiserver.terminal._d": {"multiserver.protocol._c"},
        "multiserver.system._e": {"multiserver._errors", "multiserver.system._f", "multiserver"},
        "multiserver._top": {"restore"},
    }
    twin = tmp_path / "twin.py"
    twin.write_text("if X:\n    class Hello:\n        pass\nelse:\n    is_a(1, 2)\n")
    modules["restore._twin"] = Module("restore._twin", twin, False)
    del modules["multiserver"], modules["multiserver.system._paths"]
    here.path.write_text("class Hello:\n    pass\n")
    assert class_definitions({"Hello", "Welcome"}, modules) == {
        "Hello": ["restore._twin", "restore._x"],
        "Welcome": [],
    }
    assert names_used("is_a", modules) == ["restore._twin"]
    assert room_breaches(rooms, {"multiserver.client._b": {"tools.lightgen"}}) == [
        "multiserver._top -> restore",
        "multiserver.client._b -> tools.lightgen",
        "multiserver.daemon._a -> multiserver.client._b",
        "multiserver.protocol._c -> multiserver.daemon",
        "multiserver.system._e -> multiserver",
        "multiserver.terminal._d -> multiserver.protocol._c",
    ]
