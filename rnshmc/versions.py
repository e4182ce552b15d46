"""What rnshmc runs on: ``rnshmc.show_versions()`` and ``rnshmc info`` (for bug reports)."""
import os
import platform
import sys

__all__ = ["show_versions", "versions"]

#: rnshmc's version (``rnshmc.__version__``; pyproject.toml's)
__version__ = "0.1.0"


def versions():
    """The versions and build of rnshmc and what it runs on.

    Returns
    -------
    dict
        ``rnshmc``, ``python``, ``platform``, ``numpy``, ``scipy``, ``cython`` (the installed
        one, None if absent: the kernels are compiled already), ``cpus`` (this machine's
        count, and the ones this process may use), ``kernels`` (built with OpenMP, OpenMP's
        maximum threads, built with bounds checks) and ``threadpools`` (the BLAS and OpenMP
        libraries loaded in this process, as threadpoolctl sees them: their API, internal
        API, version, threads and file).
    """
    import numpy
    import scipy
    import scipy.linalg  # (loads the BLAS that SciPy ships or links)
    from threadpoolctl import threadpool_info

    from ._kernels._build import build_info
    try:
        import Cython
        cython = Cython.__version__
    except ImportError:
        cython = None
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    pools = [{key: pool.get(key) for key in ("user_api", "internal_api", "version",
                                             "num_threads", "filepath")}
             for pool in threadpool_info()]
    return dict(rnshmc=__version__, python=sys.version.split()[0],
                platform=platform.platform(), numpy=numpy.__version__,
                scipy=scipy.__version__, cython=cython,
                cpus=dict(machine=os.cpu_count(), usable=usable),
                kernels=build_info(), threadpools=pools)


def show_versions(file=None):
    """Print :func:`~rnshmc.versions.versions` as text (to ``file``, default standard output).

    Parameters
    ----------
    file : file-like or None
    """
    info = versions()
    out = file if file is not None else sys.stdout
    kernels = info["kernels"]
    lines = [f"rnshmc      {info['rnshmc']}",
             f"python      {info['python']} ({info['platform']})",
             f"numpy       {info['numpy']}",
             f"scipy       {info['scipy']}",
             f"cython      {info['cython'] or 'not installed (not needed at run time)'}",
             f"cpus        {info['cpus']['machine']} on the machine, "
             f"{info['cpus']['usable'] or '?'} usable by this process",
             f"kernels     OpenMP {'on' if kernels['openmp'] else 'off'}"
             + (f" (up to {kernels['openmp_max_threads']} threads)" if kernels["openmp"] else "")
             + f", bounds checks {'on' if kernels['bounds_checks'] else 'off'}"]
    for pool in info["threadpools"]:
        lines.append(f"threadpool  {pool['user_api']}: {pool['internal_api']} "
                     f"{pool['version'] or ''}, {pool['num_threads']} threads, "
                     f"{pool['filepath']}")
    if not info["threadpools"]:
        lines.append("threadpool  none loaded")
    print("\n".join(lines), file=out)
