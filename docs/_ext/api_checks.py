"""Checks of the API reference that a plain build does not make (each a build warning, an error
under ``-W``).

Sampler pages. autosummary looks for a ``:template:`` under ``templates_path``
(``autosummary/sampler.rst``, not ``sampler.rst``), and when it does not find one it falls
back to its plain template without a word: the sampler pages then show the class docstring and
no method, not even ``sample()``, and the build passes. So once every page is read, each
sampler rnshmc exports (a subclass of its ``Sampler`` base) must have a page, and on that page:

- the methods docs/api/index.rst promises for every sampler (``PROMISED``);
- every other public method or property it has that carries a docstring (``L2HMC.train``,
  ``RNSHMC.fitted_surrogates``, ...), except the hooks the sampler template leaves to
  docs/architecture.md (its ``:exclude-members:``).

Cross-references that link nowhere. A role (``:func:`x```, ``{class}`x```) or a type name in a
numpydoc Parameters section whose target Sphinx cannot find renders as bold code with no link.
Sphinx says so only in nitpicky mode (``-n``), and not even then for a name it takes for a
builtin or a ``typing`` one (``Generator``, ``Callable``). Every page is checked after its
references are resolved. The fixes: the full name (``~rnshmc.state.ChainState``), a name of
Python's, NumPy's or SciPy's documentation (intersphinx, docs/conf.py), an alias in
``numpydoc_xref_aliases``, a word numpydoc leaves plain (``numpydoc_xref_ignore``), or
double backquotes for a name that has no page.

tests/run/test_docs.py checks what can be checked without a build (that the templates named in
index.rst exist where autosummary looks, that ``PROMISED`` is what index.rst says); it imports
this module, so Sphinx is imported inside the functions only.
"""
import inspect
import re
from pathlib import Path

# what docs/api/index.rst says every sampler has ("Every sampler has ``sample()``, and ...")
PROMISED = ("sample", "init_states", "run_states", "join", "result")
# the template of the sampler pages, as index.rst names it (relative to templates_path)
SAMPLER_TEMPLATE = "autosummary/sampler.rst"
PAGES = "api/generated"  # autosummary's :toctree: in index.rst


def samplers():
    """The samplers rnshmc exports: {name: class}."""
    import rnshmc
    from rnshmc.samplers._base import Sampler

    return {name: getattr(rnshmc, name) for name in rnshmc.__all__
            if inspect.isclass(getattr(rnshmc, name))
            and issubclass(getattr(rnshmc, name), Sampler)}


def excluded_members(template_text):
    """The names a template's ``:exclude-members:`` option lists."""
    found = re.search(r":exclude-members:(.*)", template_text)
    return {name.strip() for name in found.group(1).split(",")} if found else set()


def required_members(cls, excluded):
    """The members a sampler's page must document: ``PROMISED``, and every public method or
    property with a docstring (its own or inherited), but the excluded hooks."""
    required = set(PROMISED)
    for name, member in inspect.getmembers(cls):
        if name.startswith("_") or name in excluded:
            continue
        if (inspect.isfunction(member) or inspect.ismethod(member)
                or isinstance(inspect.getattr_static(cls, name), property)) \
                and inspect.getdoc(member):
            required.add(name)
    return required


def check_sampler_pages(app, env):
    from sphinx.util import logging

    logger = logging.getLogger(__name__)
    template = next((Path(app.confdir) / path / SAMPLER_TEMPLATE
                     for path in app.config.templates_path
                     if (Path(app.confdir) / path / SAMPLER_TEMPLATE).exists()), None)
    if template is None:
        logger.warning("the sampler template %s is not under templates_path %s",
                       SAMPLER_TEMPLATE, app.config.templates_path)
        return
    excluded = excluded_members(template.read_text(encoding="utf-8"))
    objects = env.get_domain("py").objects  # full name -> (docname, node id, type, ...)
    for name, cls in samplers().items():
        page = f"{PAGES}/rnshmc.{name}"
        if page not in env.found_docs:
            logger.warning("the API reference has no page for the sampler rnshmc.%s (add it to "
                           "the samplers' autosummary in docs/api/index.rst)", name)
            continue
        missing = sorted(member for member in required_members(cls, excluded)
                         if getattr(objects.get(f"rnshmc.{name}.{member}"), "docname", None)
                         != page)
        if missing:
            logger.warning("the page of rnshmc.%s documents no %s: is its autosummary entry in "
                           "docs/api/index.rst given ':template: %s' (the path under "
                           "templates_path; autosummary uses its plain template, without "
                           "members, when it finds no template of that name)?", name,
                           ", ".join(missing), SAMPLER_TEMPLATE, location=page)


def check_references(app, doctree, docname):
    """Warn of every cross-reference on the page that did not resolve (Sphinx leaves its
    text, a literal of class ``xref``, outside any link)."""
    from docutils import nodes
    from sphinx.util import logging

    logger = logging.getLogger(__name__)
    for node in doctree.findall(nodes.literal):
        if "xref" in node["classes"] and not isinstance(node.parent, nodes.reference):
            role = next((c for c in node["classes"] if c.count("-") == 1), "xref")
            logger.warning("a cross-reference that links nowhere: %s `%s`", role,
                           node.astext(), location=node)


def setup(app):
    app.connect("env-check-consistency", check_sampler_pages)
    app.connect("doctree-resolved", check_references)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
