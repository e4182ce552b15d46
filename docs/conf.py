# Sphinx configuration of rnshmc's documentation site.
#
# Build it (from the repository root, with rnshmc installed: pip install ".[docs]"):
#
#     sphinx-build -W --keep-going -b html docs docs/_build/html
#
# -W makes every warning an error. The build runs the quick modes of the examples that have
# one (examples/figures.py and examples/l2hmc_toys.py, `--quick`) for the figures of their
# pages (docs/_ext/quick_examples.py), and takes under a minute on two cores. Generated files
# (docs/_build/, docs/_generated/, docs/api/generated/) are not part of the repository.
#
# The API reference documents the installed rnshmc: this file does not put the source tree on
# sys.path (without kernels built in place, the checkout cannot be imported).
import sys
from pathlib import Path

import rnshmc

sys.path.insert(0, str(Path(__file__).parent / "_ext"))

project = "rnshmc"
author = "rnshmc developers"
copyright = "rnshmc developers"
version = release = rnshmc.__version__

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.mathjax",
    "numpydoc",
    "myst_parser",
    "quick_examples",
]

root_doc = "index"
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
templates_path = ["_templates"]
exclude_patterns = ["_build", "_generated", "_templates", "_ext", "Thumbs.db", ".DS_Store"]

# Markdown pages (MyST): $...$ and $$...$$ maths (docs/algorithms.md), rendered by MathJax;
# anchors for headings, so that pages can link to a section (page.md#section).
myst_enable_extensions = ["dollarmath", "amsmath"]
myst_heading_anchors = 3

# API reference: one page per object (docs/api/generated/, written at build time).
autosummary_generate = True
autosummary_ignore_module_all = False  # a module's __all__ lists what its page documents
autodoc_member_order = "groupwise"
autodoc_typehints = "none"  # the numpydoc sections give the types
numpydoc_show_class_members = False  # autodoc lists the members (docs/_templates/autosummary)
numpydoc_class_members_toctree = False

html_theme = "alabaster"
html_title = f"rnshmc {release}"
html_static_path = []
html_theme_options = {"description": "HMC with random-network surrogates for costly posteriors",
                      "fixed_sidebar": True}
