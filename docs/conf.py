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
# It needs no network: intersphinx reads the inventories in docs/_intersphinx/, and MathJax is
# copied into the site. docs/_ext/api_checks.py makes two silent faults errors: a sampler page
# without its methods, and a cross-reference that links nowhere. So the build passes with -n
# (nitpicky) too, and that is how to list what a new reference lacks.
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
    "sphinx.ext.intersphinx",
    "sphinx.ext.mathjax",
    "sphinx-mathjax-offline",  # MathJax 3 copied into the site (pip: sphinx-mathjax-offline)
    "numpydoc",
    "myst_parser",
    "quick_examples",
    "api_checks",
]

root_doc = "index"
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
templates_path = ["_templates"]
exclude_patterns = ["_build", "_generated", "_templates", "_ext", "_intersphinx", "Thumbs.db",
                    ".DS_Store"]

# Markdown pages (MyST): $...$ and $$...$$ maths (docs/algorithms.md), rendered by MathJax
# from the site's own _static/mathjax/ (sphinx-mathjax-offline: no CDN, so the maths renders
# offline and on machines without internet);
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
# The types in numpydoc sections (``rng : None, int, SeedSequence or Generator``) link to their
# pages: a name written in full links as it is, the short names below through their aliases
# (numpydoc's own cover int, float, str, dict, ndarray, array_like, callable, ...).
# docs/_ext/api_checks.py fails the build on a type that links nowhere (rendered in bold, and
# silent without -n), so every other word of a type is listed in numpydoc_xref_ignore and
# stays plain text.
numpydoc_xref_param_type = True
numpydoc_xref_aliases = {
    "Generator": "numpy.random.Generator",
    "SeedSequence": "numpy.random.SeedSequence",
    "float64": "numpy.float64",
    "ndarrays": "numpy.ndarray",
    "path": ":term:`path <python:path-like object>`",
    "executor": "concurrent.futures.Executor",
    "Summary": "rnshmc.diagnostics.Summary",
    "UMBridgeError": "rnshmc.models.umbridge.UMBridgeError",
    "UMBridgeConnectionError": "rnshmc.models.umbridge.UMBridgeConnectionError",
    "UMBridgeTimeoutError": "rnshmc.models.umbridge.UMBridgeTimeoutError",
    "UMBridgeServer": "rnshmc.serve.UMBridgeServer",
    "ECDFBands": "rnshmc.calibration.ECDFBands",
}
# ... and every class rnshmc exports by its short name (SampleResult, RandomNetworkSurrogate),
# which a page of another module (rnshmc.serve, rnshmc.diagnostics) would not find
numpydoc_xref_aliases.update({name: f"rnshmc.{name}" for name in rnshmc.__all__
                              if isinstance(getattr(rnshmc, name), type)})
numpydoc_xref_ignore = {
    # words of the types' prose ("ndarray of shape (dim,)", "None, a sampler or its name")
    "a", "and", "as", "chain", "class", "coefficients", "default", "density", "duration",
    "for", "in", "its", "log", "model", "name", "of", "one", "ones", "optional", "or",
    "otherwise", "same", "sampler", "samplers", "scale", "self", "shape", "shapes", "shift",
    "surrogate", "the", "true", "values",
    # the sizes in shapes, (chains, draws, dim)
    "N", "Q", "chains", "dim", "draws", "n", "n_components", "n_elements", "n_free",
    "n_hidden", "n_obs", "n_points", "n_rows", "n_steps", "n_units", "solver.n_elements",
    "L", "n_params", "n_draws", "replications", "int64",
    # types of optional packages whose documentation has no inventory here (docs/_intersphinx)
    "arviz.InferenceData", "dask.distributed.Client", "umbridge.Model", "matplotlib",
    "Axes", "matplotlib.axes.Axes",
    "xarray.DataTree",
    # types of the package's internals, which have no page
    "PartState", "Surrogate", "rnshmc._kernels._riemann.LinearPredictorMetric",
    "rnshmc.samplers._base.Sampler",
}

# Links to Python's, NumPy's and SciPy's documentation, from inventories kept in the repository
# (docs/_intersphinx/README.md says where they come from and how to renew them): the build
# never downloads one, so it runs offline (a failed download would be a warning, an error
# under -W).
intersphinx_mapping = {
    "python": ("https://docs.python.org/3", "_intersphinx/python-objects.inv"),
    "numpy": ("https://numpy.org/doc/stable", "_intersphinx/numpy-objects.inv"),
    "scipy": ("https://docs.scipy.org/doc/scipy", "_intersphinx/scipy-objects.inv"),
}

html_theme = "alabaster"
html_title = f"rnshmc {release}"
html_static_path = []
html_theme_options = {"description": "HMC with random-network surrogates for costly posteriors",
                      "fixed_sidebar": True}
