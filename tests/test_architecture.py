"""The mirror rule (README.md, Layout): two studies (stressprobe.persona, stressprobe.cdv) over one shared
core that imports neither, neither study importing the other; test helpers in tests/support, never in bench/;
and the Layout section listing every module of the library."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.support.helpers import ROOT

PACKAGE = ROOT / "src" / "stressprobe"
STUDIES = ("persona", "cdv")


def imported_modules(source: str, package: str) -> set[str]:
    """Every module a file of `package` imports, at any depth (also inside functions), relative imports
    resolved."""
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package.rsplit(".", node.level - 1)[0] if node.level else ""
            module = ".".join(part for part in (base, node.module) if part)
            names.add(module)
            # `from stressprobe import persona` imports the study as well as `import stressprobe.persona`.
            names.update(f"{module}.{alias.name}" for alias in node.names)
    return names


def package_of(path: Path) -> str:
    """The dotted package a file of src/ belongs to (src/stressprobe/llm/cache.py: stressprobe.llm)."""
    return ".".join(path.relative_to(PACKAGE.parent).parts[:-1])


def study_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "stressprobe" and parts[1] in STUDIES else None


def modules_in(area: str | None) -> list[Path]:
    """The files of one study, or of the core (area None: everything outside the studies' folders)."""
    files = sorted(PACKAGE.rglob("*.py"))
    if area is None:
        return [f for f in files if f.relative_to(PACKAGE).parts[0] not in STUDIES]
    return [f for f in files if f.relative_to(PACKAGE).parts[0] == area]


def crossings(area: str | None) -> list[str]:
    """`file -> module` for each import of a study other than the file's own."""
    return [
        f"{path.relative_to(ROOT)} -> {module}"
        for path in modules_in(area)
        for module in sorted(imported_modules(path.read_text(), package_of(path)))
        if study_of(module) not in (None, area)
    ]


def test_the_core_imports_neither_study():
    assert len(modules_in(None)) > 10, "the core's files were not found"
    assert crossings(None) == []


@pytest.mark.parametrize("study", STUDIES)
def test_a_study_does_not_import_the_other(study):
    assert modules_in(study), f"stressprobe/{study} was not found"
    assert crossings(study) == []


def test_the_check_sees_every_form_of_import():
    """The import reader catches each way of importing a study, so that the tests above can fail."""
    forms = {
        "import stressprobe.cdv.search": "stressprobe.cdv.search",
        "from stressprobe.persona.judging import x": "stressprobe.persona.judging",
        "from stressprobe import cdv": "stressprobe.cdv",
        "from ...persona import judging": "stressprobe.persona.judging",
        "def f():\n    from ... import cdv": "stressprobe.cdv",
    }
    for source, module in forms.items():
        assert module in imported_modules(source, "stressprobe.llm.backends"), source
    assert imported_modules("from ..persona import x", "stressprobe.llm.backends") >= {
        "stressprobe.llm.persona"
    }
    assert package_of(PACKAGE / "llm" / "backends" / "vllm.py") == "stressprobe.llm.backends"


def test_the_tests_do_not_import_the_benchmarks():
    """Test helpers live in tests/support (bench/ may use them, not the other way round)."""
    files = sorted((ROOT / "tests").rglob("*.py"))
    assert files, "the tests were not found"
    importing = [
        f"{path.relative_to(ROOT)} -> {module}"
        for path in files
        for module in sorted(imported_modules(path.read_text(), "tests"))
        if module == "bench" or module.startswith("bench.")
    ]
    assert importing == []


def layout_paths() -> set[str]:
    """The paths README.md's Layout section lists: one entry a line in its code block, each folder's
    entries indented two spaces under it (continuation lines, indented further, name nothing)."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text[text.index("\n## Layout\n") :]
    block = section.split("```")[1]
    stack: list[str] = []
    paths = set()
    for line in block.splitlines():
        depth = (len(line) - len(line.lstrip(" "))) // 2
        if not line.strip() or depth > 8:
            continue
        stack[depth:] = [line.split()[0]]
        paths.add("".join(stack))
    return paths


def test_the_readmes_layout_lists_every_module_of_the_library():
    modules = {
        str(path.relative_to(ROOT))
        for path in PACKAGE.rglob("*.py")
        if path.name != "__init__.py"  # a package's face: its folder's line stands for it
    }
    listed = {path for path in layout_paths() if path.startswith("src/stressprobe/") and path.endswith(".py")}
    assert sorted(modules - listed) == [], "modules missing from README.md's Layout"
    assert sorted(p for p in listed if not (ROOT / p).is_file()) == [], "Layout lists modules that are gone"
