"""The documentation site's sources cover the package: every name rnshmc exports is in the API
reference, and every guide page is in the guide's table of contents (no Sphinx build here:
docs/conf.py has the build command)."""
import re
from pathlib import Path

import pytest

import rnshmc

DOCS = Path(__file__).resolve().parents[2] / "docs"
API = DOCS / "api" / "index.rst"
GUIDE = DOCS / "guide"


def need_docs():
    if not API.exists():  # (tests run from an installed wheel, without docs/ beside them)
        pytest.skip("docs/ is not beside the tests (a source checkout has it)")


def documented_names(text):
    """The names the reference documents, as written after ``.. currentmodule:: rnshmc``:
    autosummary entries and ``.. auto*::`` / ``.. py:*::`` directives."""
    names, in_autosummary = set(), False
    for line in text.splitlines():
        directive = re.match(r"\.\. (?:(autosummary)|auto\w+|py:\w+)::\s*(\S*)", line)
        if directive:
            in_autosummary = bool(directive.group(1))
            if directive.group(2):
                names.add(directive.group(2))
        elif in_autosummary and re.match(r"\s+[\w.]+\s*$", line):
            names.add(line.strip())
        elif line and not line[0].isspace():
            in_autosummary = False
    return names


def test_every_exported_name_is_in_the_api_reference():
    need_docs()
    text = API.read_text(encoding="utf-8")
    assert ".. currentmodule:: rnshmc\n" in text
    missing = sorted(set(rnshmc.__all__) - documented_names(text))
    assert not missing, f"add these names of rnshmc.__all__ to {API.relative_to(DOCS.parent)}: {missing}"


def test_public_modules_are_in_the_api_reference():
    need_docs()
    names = documented_names(API.read_text(encoding="utf-8"))
    assert {"models", "diagnostics", "datasets", "fem"} <= names


def test_every_guide_page_is_in_the_guide_toctree():
    need_docs()
    index = (GUIDE / "index.md").read_text(encoding="utf-8")
    toctree = re.search(r"```\{toctree\}\n(.*?)```", index, re.S)
    assert toctree, "docs/guide/index.md has no toctree"
    listed = {line.strip() for line in toctree.group(1).splitlines()
              if line.strip() and not line.lstrip().startswith(":")}
    pages = {page.stem for page in GUIDE.glob("*.md")} - {"index"}
    assert pages, "docs/guide/ has no pages"
    assert pages == listed, (f"guide pages not in the toctree: {sorted(pages - listed)}; "
                             f"toctree entries without a page: {sorted(listed - pages)}")


def test_the_docstring_examples_run_as_written():
    """Every ``>>>`` example in the package's docstrings gives the output it shows (users copy
    them; the reference renders them)."""
    import doctest
    import importlib
    import pkgutil

    finder, failures = doctest.DocTestFinder(), []
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    for module_info in pkgutil.walk_packages(rnshmc.__path__, "rnshmc."):
        if module_info.name.rsplit(".", 1)[-1] == "__main__":
            continue
        module = importlib.import_module(module_info.name)
        for test in finder.find(module, module.__name__):
            if test.examples:
                runner.run(test, out=failures.append)
    assert runner.failures == 0, "".join(failures)
    assert runner.tries > 10  # the examples were found
