"""Check what the release files hold (run from the repository's root by .ci/run).

``python .ci/check_dist.py sdist DIST.tar.gz``
    The sdist holds every file git tracks under rnshmc/ and tests/ (sources, Cython sources
    and headers, data sets), the licence and the build files, and nothing generated: no C
    from Cython, no built modules, no caches.
``python .ci/check_dist.py wheel WHEEL.whl AUDITWHEEL_SHOW.txt``
    The repaired wheel is manylinux (by ``auditwheel show``'s own words), carries a compiled
    module for every .pyx, vendors the OpenMP runtime, and links no BLAS or LAPACK (SciPy's
    are used at run time, through scipy.linalg.cython_blas/cython_lapack).
"""
import fnmatch
import re
import subprocess
import sys
import tarfile
import zipfile

GENERATED = ["*.so", "*.pyd", "*.pyc", "*/__pycache__/*", "*/.pytest_cache/*",
             "*/.hypothesis/*", "rnshmc/_kernels/*.c", "rnshmc/_kernels/*.cpp"]


def tracked(*folders):
    out = subprocess.run(["git", "ls-files", *folders], check=True, capture_output=True,
                         text=True).stdout
    return set(out.split())


def check_sdist(path):
    with tarfile.open(path) as tar:
        names = {name.split("/", 1)[1] for name in tar.getnames() if "/" in name}
    wanted = tracked("rnshmc", "tests") | {"LICENSE", "README.md", "pyproject.toml",
                                           "setup.py", "MANIFEST.in"}
    missing = sorted(wanted - names)
    generated = sorted(name for name in names
                       if any(fnmatch.fnmatch(name, pattern) for pattern in GENERATED))
    assert not missing, f"the sdist lacks tracked files: {missing}"
    assert not generated, f"the sdist holds generated files: {generated}"
    print(f"sdist ok: {len(names)} entries, every tracked source, no generated file")


def check_wheel(path, show_file):
    show = open(show_file).read()
    tag = re.search(r'consistent with\s+the following platform tag:\s+"(manylinux_2_\d+_\w+)"',
                    show)
    assert tag, f"auditwheel show does not call the wheel manylinux:\n{show}"
    assert not re.search(r"blas|lapack|mkl", show, re.IGNORECASE), \
        f"the wheel links a BLAS or LAPACK:\n{show}"
    names = zipfile.ZipFile(path).namelist()
    modules = {name.split("/")[-1].split(".")[0] for name in names
               if name.startswith("rnshmc/_kernels/") and name.endswith((".so", ".pyd"))}
    sources = {name.split("/")[-1][:-4] for name in tracked("rnshmc/_kernels")
               if name.endswith(".pyx")}
    assert sources <= modules, f"modules missing from the wheel: {sorted(sources - modules)}"
    vendored = [name for name in names if name.startswith("rnshmc.libs/") and name[-1] != "/"]
    assert any("gomp" in name or "omp" in name for name in vendored), \
        f"the OpenMP runtime is not vendored: {vendored}"
    assert not any(re.search(r"blas|lapack|mkl", name, re.IGNORECASE) for name in vendored), \
        f"a BLAS or LAPACK is vendored: {vendored}"
    print(f"wheel ok: {tag.group(1)}, {len(modules)} compiled modules, vendored {vendored}")


if __name__ == "__main__":
    kind, *args = sys.argv[1:]
    {"sdist": check_sdist, "wheel": check_wheel}[kind](*args)
