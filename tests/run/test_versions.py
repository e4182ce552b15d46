"""rnshmc.show_versions() and ``rnshmc info``: what a bug report needs."""
import io

import numpy as np
import scipy

import rnshmc
from rnshmc.__main__ import main
from rnshmc.versions import versions


def test_versions_name_the_build_and_the_thread_pools():
    info = versions()
    assert info["rnshmc"] == rnshmc.__version__
    assert (info["numpy"], info["scipy"]) == (np.__version__, scipy.__version__)
    kernels = info["kernels"]
    assert isinstance(kernels["openmp"], bool) and isinstance(kernels["bounds_checks"], bool)
    assert kernels["openmp_max_threads"] >= 1
    apis = {pool["user_api"] for pool in info["threadpools"]}
    assert "blas" in apis  # SciPy's BLAS, loaded by versions()
    if kernels["openmp"]:  # the kernels link the OpenMP runtime
        assert "openmp" in apis
    assert info["cpus"]["machine"] >= 1


def test_show_versions_and_the_info_command_print_them(capsys):
    out = io.StringIO()
    rnshmc.show_versions(file=out)
    text = out.getvalue()
    assert f"rnshmc      {rnshmc.__version__}" in text and "bounds checks" in text
    assert main(["info"]) == 0
    printed = capsys.readouterr().out
    assert "numpy" in printed and "threadpool  blas" in printed
