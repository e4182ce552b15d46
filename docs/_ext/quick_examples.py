"""Run the examples' quick modes during a docs build, for the figures of their pages.

Each example in ``QUICK`` runs once per build, in a subprocess started when the build starts,
so the two scripts (and Sphinx reading the other pages) share the machine's cores. Its figures
and printed output go to ``docs/_generated/<script>/``; the page ``examples/<script>`` shows
them, and waits for its script before it is read. A script that fails is a build warning (an
error under ``-W``), with the end of its output.
"""
import os
import subprocess
import sys
from pathlib import Path

from sphinx.util import logging

logger = logging.getLogger(__name__)

# script in examples/ -> its arguments (the quick modes: seconds, not minutes)
QUICK = {
    "figures": ["--quick"],
    "l2hmc_toys": ["--quick"],
}
OUTPUT = "output.txt"  # what the script printed, beside its figures


def _paths(app):
    examples = Path(app.srcdir).parent / "examples"
    generated = Path(app.srcdir) / "_generated"
    return examples, generated


def start(app):
    examples, generated = _paths(app)
    # one BLAS thread each: two scripts and Sphinx on two cores, no oversubscription
    env = dict(os.environ, MPLBACKEND="Agg", OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1",
               MKL_NUM_THREADS="1")
    app.quick_examples = {}
    for script, arguments in QUICK.items():
        out = generated / script
        out.mkdir(parents=True, exist_ok=True)
        for old in out.iterdir():
            old.unlink()
        log = open(out / OUTPUT, "w")
        # run in the output folder (so that it prints "wrote figure1.png", not a path of the
        # build machine); the script imports the installed rnshmc, never the checkout
        process = subprocess.Popen(
            [sys.executable, str(examples / f"{script}.py"), *arguments, "--out", "."],
            cwd=out, env=env, stdout=log, stderr=subprocess.STDOUT)
        app.quick_examples[script] = (process, log)


def finish(app, script):
    """Wait for ``script``; warn (once) if it failed."""
    process, log = app.quick_examples.pop(script, (None, None))
    if process is None:
        return
    returncode = process.wait()
    log.close()
    if returncode != 0:
        _, generated = _paths(app)
        tail = (generated / script / OUTPUT).read_text().splitlines()[-15:]
        logger.warning("examples/%s.py %s failed (exit status %d):\n%s", script,
                       " ".join(QUICK[script]), returncode, "\n".join(tail))


def wait_before_reading(app, docname, source):
    if docname.startswith("examples/"):
        finish(app, docname.split("/", 1)[1])


def always_reread(app, env, added, changed, removed):
    # the figures are made anew each build: their pages must be read (and copied) again
    return [f"examples/{script}" for script in QUICK if f"examples/{script}" in env.found_docs]


def wait_for_all(app, exception):
    for script in list(getattr(app, "quick_examples", {})):
        finish(app, script)


def setup(app):
    app.connect("builder-inited", start)
    app.connect("env-get-outdated", always_reread)
    app.connect("source-read", wait_before_reading)
    app.connect("build-finished", wait_for_all)
    return {"parallel_read_safe": False, "parallel_write_safe": True}
