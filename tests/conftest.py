"""pytest configuration for the rnshmc tests: the ``slow`` marker, the ``shared_data``
fixture, and the seed offset (``$RNSHMC_TEST_SEED_OFFSET``, testkit.SEED_OFFSET) applied to a
test parameter named ``seed``. The helpers the tests share are in ``testkit.py``, imported
explicitly by the test modules (this file's folder is on ``sys.path`` once pytest has loaded
it).
"""
import signal

import pytest

# testkit's asserts (check_mean, check_covariance) get pytest's assertion introspection too
pytest.register_assert_rewrite("testkit")

from testkit import SEED_OFFSET, rng_seed, shared_data_dir  # noqa: E402


def pytest_configure(config):
    # registered here too, so the marker is known when the tests run outside the checkout
    config.addinivalue_line("markers", "slow: long statistical tests (deselect with -m 'not slow')")
    # a shell starts a background job (`pytest ... &`) with SIGINT ignored, and the child
    # processes of the Ctrl-C tests inherit that: give them Python's handler back
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_report_header(config):
    return f"rnshmc test seed offset: {SEED_OFFSET} (RNSHMC_TEST_SEED_OFFSET)"


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem):
    # a parametrised ``seed`` is shifted by the offset as the literal seeds are (rng_seed);
    # the test's id keeps the unshifted value, so ``test_x[1]`` names the same test at every
    # offset
    if "seed" in pyfuncitem.funcargs and isinstance(pyfuncitem.funcargs["seed"], int):
        pyfuncitem.funcargs["seed"] = rng_seed(pyfuncitem.funcargs["seed"])


@pytest.fixture
def shared_data():
    """Path of the papers' data folder; skips the test when it is absent (a user's clone)."""
    path = shared_data_dir()
    if path is None:
        pytest.skip("needs the papers' data in ../shared/data beside the checkout (or "
                    "$RNSHMC_SHARED_DATA); absent here")
    return path
