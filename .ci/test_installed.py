"""Test an installed rnshmc (a wheel) from outside the source tree.

The subset is what a wheel's linking, vendored OpenMP runtime and NumPy version can break: the
compiled kernels (against NumPy/SciPy references and finite differences), the models, every
sampler's contract and the build report. The whole fast suite runs on the source build
(.ci/run). Used by .ci/run and by cibuildwheel's test-command (pyproject.toml).

usage: python test_installed.py TESTS_DIR [--also-oldest-numpy]
       python test_installed.py --print-oldest-numpy

``--also-oldest-numpy`` then installs the oldest NumPy the package supports that has wheels for
this Python (pyproject.toml: numpy>=1.25) and runs the subset again.
``--print-oldest-numpy`` prints that release's version pattern (for .ci/run's own venv).
"""
import os
import subprocess
import sys
import tempfile

#: the oldest NumPy release with wheels for each Python (1.25 is the package's lower bound)
OLDEST_NUMPY = {(3, 10): "1.25.*", (3, 11): "1.25.*", (3, 12): "1.26.*"}


def run_subset(tests):
    code = ("import rnshmc; print('testing', rnshmc.__file__); rnshmc.show_versions()")
    subprocess.run([sys.executable, "-c", code], check=True)
    paths = [os.path.join(tests, part) for part in
             ("kernels", "models", os.path.join("samplers", "test_contract.py"),
              os.path.join("run", "test_versions.py"))]
    subprocess.run([sys.executable, "-m", "pytest", *paths, "-m", "not slow", "-q",
                    "-p", "no:cacheprovider"], check=True)


def main(argv):
    if argv == ["--print-oldest-numpy"]:
        print(OLDEST_NUMPY[sys.version_info[:2]])
        return
    tests = os.path.abspath(argv[0])
    os.chdir(tempfile.mkdtemp())  # never import the checkout
    run_subset(tests)
    if "--also-oldest-numpy" in argv[1:]:
        oldest = OLDEST_NUMPY.get(sys.version_info[:2])
        if oldest is None:
            print(f"no NumPy 1.x has wheels for Python {sys.version.split()[0]}: "
                  "the newest NumPy was tested")
            return
        subprocess.run([sys.executable, "-m", "pip", "install", f"numpy=={oldest}"], check=True)
        run_subset(tests)


if __name__ == "__main__":
    main(sys.argv[1:])
