"""Checks on the source tree itself: documentation that must be code, and the import graph."""

import ast
import glob
import os
import re

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")


def _example_in_lowering_header():
    """The indented code lines of aten/lowering.h's first comment block."""
    lines = []
    for line in open(os.path.join(ROOT, "aten", "lowering.h")):
        if not line.startswith("//"):
            break
        if line.startswith("//   "):
            lines.append(line[len("//   "):].strip())
    return lines


def test_the_lowering_header_example_is_compiled_code():
    """The example at the top of the central header is a registration the build compiles, so it
    cannot name functions that do not exist."""
    example = _example_in_lowering_header()
    assert len(example) >= 3, example
    sources = {path: re.sub(r"\s+", " ", open(path).read())
               for path in glob.glob(os.path.join(ROOT, "aten", "ops", "*.cpp"))}
    family, registration = example[0], example[1]
    assert any(family in text and registration in text for text in sources.values()), example


def _module_name(path, package_root):
    name = os.path.relpath(path, package_root)[:-3].replace(os.sep, ".")
    return name[: -len(".__init__")] if name.endswith(".__init__") else name


def _module_level_imports(name, path, modules):
    """The torchtpu modules ``name`` imports when it is imported (not inside functions)."""
    package = name if path.endswith("__init__.py") else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.parse(open(path).read()).body:
        if isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(parts + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:
                if alias.name == "_C":  # the extension module
                    continue
                submodule = f"{target}.{alias.name}"
                found.add(submodule if submodule in modules else target)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {m for m in found if m in modules and m != name}


def test_the_python_package_has_no_import_cycles():
    package_root = os.path.join(ROOT, "python")
    paths = glob.glob(os.path.join(package_root, "torchtpu", "**", "*.py"), recursive=True)
    modules = {_module_name(p, package_root): p for p in paths}
    imports = {m: _module_level_imports(m, p, modules) for m, p in modules.items()}
    assert imports["torchtpu"], "the import scan found nothing: it is broken"
    cycles, state, path = [], {}, []

    def visit(module):
        state[module] = "open"
        path.append(module)
        for imported in sorted(imports[module]):
            if state.get(imported) == "open":
                cycles.append(" -> ".join(path[path.index(imported):] + [imported]))
            elif imported not in state:
                visit(imported)
        path.pop()
        state[module] = "done"

    for module in sorted(modules):
        if module not in state:
            visit(module)
    assert cycles == []
