"""The documentation site's sources cover the package: every name rnshmc exports is in the API
reference, every sampler's page comes from the sampler template (its methods, sample() first),
and every guide page is in the guide's table of contents; the build needs no network (no Sphinx
build here: docs/conf.py has the build command, and docs/_ext/api_checks.py the checks that
need one)."""
import ast
import importlib.util
import re
from pathlib import Path

import pytest

import rnshmc

DOCS = Path(__file__).resolve().parents[2] / "docs"
API = DOCS / "api" / "index.rst"
GUIDE = DOCS / "guide"
CONF = DOCS / "conf.py"


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


def conf_value(name):
    """A setting of docs/conf.py, read from its source (the tests do not run conf.py)."""
    for node in ast.parse(CONF.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and any(getattr(target, "id", None) == name
                                                for target in node.targets):
            return ast.literal_eval(node.value)
    raise KeyError(f"docs/conf.py sets no {name}")


def api_checks():
    """docs/_ext/api_checks.py, the build's check of the sampler pages (importable without
    Sphinx)."""
    spec = importlib.util.spec_from_file_location("api_checks", DOCS / "_ext" / "api_checks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def autosummaries(text):
    """({option: value}, [entries]) of each autosummary directive of an .rst page."""
    blocks = []
    for body in re.findall(r"^\.\. autosummary::\n((?:[ \t]+\S.*\n|[ \t]*\n)*)", text, re.M):
        lines = [line.strip() for line in body.splitlines() if line.strip()]
        options = dict(re.match(r":([\w-]+):\s*(.*)", line).groups() for line in lines
                       if line.startswith(":"))
        blocks.append((options, [line for line in lines if not line.startswith(":")]))
    return blocks


def test_the_templates_the_api_reference_names_exist_where_autosummary_looks():
    """autosummary looks for a ``:template:`` under templates_path, and without one of that
    name it uses its plain template, silently: the sampler pages lost their methods, sample()
    included, to ``:template: sampler.rst`` (the file is autosummary/sampler.rst)."""
    need_docs()
    roots = [DOCS / path for path in conf_value("templates_path")]
    named = [(page, options["template"]) for page in sorted((DOCS / "api").glob("*.rst"))
             for options, _ in autosummaries(page.read_text(encoding="utf-8"))
             if "template" in options]
    assert named, "docs/api/index.rst names no template (the samplers' is autosummary/sampler.rst)"
    for page, template in named:
        assert any((root / template).is_file() for root in roots), (
            f"{page.relative_to(DOCS.parent)}: ':template: {template}' is not under "
            f"templates_path {conf_value('templates_path')} (relative to docs/)")


def test_every_sampler_has_a_page_from_the_sampler_template():
    need_docs()
    checks = api_checks()
    blocks = [entries for options, entries in autosummaries(API.read_text(encoding="utf-8"))
              if options.get("template") == checks.SAMPLER_TEMPLATE]
    assert len(blocks) == 1, \
        f"one autosummary of docs/api/index.rst has :template: {checks.SAMPLER_TEMPLATE}"
    assert sorted(blocks[0]) == sorted(checks.samplers()), \
        "the samplers' autosummary lists every sampler rnshmc exports, and only them"


def test_the_sampler_pages_keep_the_methods_the_reference_promises():
    """The methods index.rst says every sampler has are the ones the build checks
    (api_checks.PROMISED), and the sampler template leaves none of them out (nor
    L2HMC.train)."""
    need_docs()
    checks = api_checks()
    promise = re.search(r"Every sampler has (.*?)\.\s", API.read_text(encoding="utf-8"), re.S)
    assert promise, "docs/api/index.rst no longer says which methods every sampler has"
    assert set(re.findall(r"``(\w+)(?:\(\))?``", promise.group(1))) == set(checks.PROMISED)
    assert "sample" in checks.PROMISED
    template = next(DOCS / path / checks.SAMPLER_TEMPLATE for path in conf_value("templates_path"))
    excluded = checks.excluded_members(template.read_text(encoding="utf-8"))
    assert excluded, "the sampler template excludes the hooks (the check reads the list)"
    assert not excluded & set(checks.PROMISED), \
        f"the sampler template excludes {sorted(excluded & set(checks.PROMISED))}"
    assert "train" in checks.required_members(rnshmc.L2HMC, excluded)
    for name, cls in checks.samplers().items():  # (the check asks for methods that exist)
        assert all(hasattr(cls, member) for member in checks.required_members(cls, excluded)), name


def test_intersphinx_reads_inventories_kept_in_the_repository():
    """The docs build offline: intersphinx never downloads an inventory (a failed download is
    a warning, an error under -W)."""
    need_docs()
    mapping = conf_value("intersphinx_mapping")
    assert {"python", "numpy", "scipy"} <= set(mapping)
    for name, (url, inventory) in mapping.items():
        assert url.startswith("https://") and isinstance(inventory, str), name
        assert "://" not in inventory, f"{name}: the inventory is downloaded ({inventory})"
        path = DOCS / inventory
        assert path.is_file(), f"{name}: {path.relative_to(DOCS.parent)} is missing"
        with open(path, "rb") as file:
            assert file.readline() == b"# Sphinx inventory version 2\n", path


def test_the_docs_extra_installs_every_extension_conf_py_loads():
    need_docs()
    pyproject = (DOCS.parent / "pyproject.toml").read_text(encoding="utf-8")
    extra = re.search(r"^docs = \[(.*)\]", pyproject, re.M)
    assert extra, "pyproject.toml has no docs extra"
    installed = {re.split(r"[<>=!~\[ ]", name)[0].lower().replace("_", "-")
                 for name in re.findall(r'"([^"]+)"', extra.group(1))}
    local = {path.stem for path in (DOCS / "_ext").glob("*.py")}
    needed = {extension.split(".")[0].lower().replace("_", "-")
              for extension in conf_value("extensions") if extension not in local}
    assert needed <= installed, \
        f"add to the docs extra of pyproject.toml: {sorted(needed - installed)}"
