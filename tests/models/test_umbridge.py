"""UM-Bridge: rnshmc.models.UMBridgeModel (a target evaluated by an UM-Bridge server) and
rnshmc.serve (a fitted surrogate served as an UM-Bridge model, ``rnshmc serve``).

Everything runs against umbridge's own server code (``umbridge.serve_models``, run by
``rnshmc.serve.serve_models`` on 127.0.0.1 and a port the system chooses) and, where a client
other than rnshmc's is wanted, umbridge's own ``HTTPModel``; nothing is mocked. Each server
is stopped at the end of its test.
"""
import pickle
import socket
import sys
import time

import numpy as np
import pytest

umbridge = pytest.importorskip("umbridge")
requests = pytest.importorskip("requests")

import rnshmc  # noqa: E402
from rnshmc.__main__ import build_parser, main  # noqa: E402
from rnshmc.models import UMBridgeModel  # noqa: E402
from rnshmc.models.umbridge import UMBridgeError  # noqa: E402
from rnshmc.serve import load_surrogate, serve_models, serve_surrogate  # noqa: E402

from testkit import check_covariance, check_mean, rng_seed  # noqa: E402

MEAN = np.array([1.0, -0.5])
COVARIANCE = np.array([[1.0, 0.6], [0.6, 2.0]])
PRECISION = np.linalg.inv(COVARIANCE)


def gaussian_log_density(q, shift=0.0):
    d = np.asarray(q) - MEAN
    return -0.5 * d @ PRECISION @ d + shift


class GaussianModel(umbridge.Model):
    """N(MEAN, COVARIANCE) as an UM-Bridge model: output = log density (+ config "shift");
    ``derivative`` is "gradient", "jacobian" (ApplyJacobian only) or None; ``delay`` seconds
    of sleep per evaluation; -inf beyond q[0] > 50, NaN below q[0] < -50."""

    def __init__(self, name, derivative="gradient", delay=0.0, output_sizes=(1,)):
        super().__init__(name)
        self.derivative = derivative
        self.delay = delay
        self.output_sizes = list(output_sizes)

    def get_input_sizes(self, config):
        return [2]

    def get_output_sizes(self, config):
        return self.output_sizes

    def __call__(self, parameters, config):
        time.sleep(self.delay)
        q = np.array(parameters[0])
        if q[0] > 50:
            return [[float("-inf")]]
        if q[0] < -50:
            return [[float("nan")]]
        value = float(gaussian_log_density(q, config.get("shift", 0.0)))
        return [[value] * self.output_sizes[0]]

    def gradient(self, out_wrt, in_wrt, parameters, sens, config):
        return (sens[0] * -(PRECISION @ (np.array(parameters[0]) - MEAN))).tolist()

    def apply_jacobian(self, out_wrt, in_wrt, parameters, vec, config):
        return [float(-(PRECISION @ (np.array(parameters[0]) - MEAN)) @ np.array(vec))]

    def supports_evaluate(self):
        return True

    def supports_gradient(self):
        return self.derivative == "gradient"

    def supports_apply_jacobian(self):
        return self.derivative == "jacobian"


def wait_until_up(url, timeout=10.0):
    """Poll GET /Info until the server answers."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if requests.get(f"{url}/Info", timeout=1.0).status_code == 200:
                return
        except requests.RequestException:
            if time.monotonic() > deadline:
                raise
        time.sleep(0.02)


@pytest.fixture
def server():
    """umbridge's server on 127.0.0.1 (a free port) with Gaussian models: "posterior" (with
    Gradient), "jacobian" (ApplyJacobian only), "nograd", "two-outputs"."""
    models = [GaussianModel("posterior"), GaussianModel("jacobian", derivative="jacobian"),
              GaussianModel("nograd", derivative=None),
              GaussianModel("two-outputs", output_sizes=(2,))]
    handle = serve_models(models, port=0, block=False)
    try:
        wait_until_up(handle.url)
        yield handle
    finally:
        handle.stop()


@pytest.fixture
def slow_server():
    """A server whose model sleeps 2 s per evaluation (its own server: umbridge evaluates
    one request at a time)."""
    handle = serve_models([GaussianModel("slow", delay=2.0)], port=0, block=False)
    try:
        wait_until_up(handle.url)
        yield handle
    finally:
        handle.stop()


@pytest.fixture
def surrogate():
    rng = np.random.default_rng(rng_seed(0))
    Q = MEAN + rng.standard_normal((200, 2)) @ np.linalg.cholesky(COVARIANCE).T
    U = np.array([-gaussian_log_density(q) for q in Q])
    return rnshmc.RandomNetworkSurrogate(2, 60, rng=rng_seed(0)).fit(Q, U)


@pytest.fixture
def served_surrogate(surrogate):
    handle = serve_surrogate(surrogate, port=0, block=False)
    try:
        wait_until_up(handle.url)
        yield surrogate, handle
    finally:
        handle.stop()


POINTS = np.array([[0.0, 0.0], [1.0, -0.5], [-2.3, 1.7], [3.1, 4.0]])


# --------------------------------------------------------------------------------------------
# UMBridgeModel: a target evaluated by a server


def test_log_density_is_the_closed_form(server):
    model = UMBridgeModel(server.url, "posterior")
    assert model.dim == 2 and model.has_gradient
    for q in POINTS:
        assert model.log_density(q) == pytest.approx(gaussian_log_density(q), rel=1e-14)
    shifted = UMBridgeModel(server.url, "posterior", config={"shift": 3.5})
    assert shifted.log_density(POINTS[2]) == pytest.approx(
        gaussian_log_density(POINTS[2], 3.5), rel=1e-14)


def test_gradient_is_the_closed_form_and_matches_finite_differences(server):
    model = UMBridgeModel(server.url, "posterior")
    jacobian_only = UMBridgeModel(server.url, "jacobian")
    assert jacobian_only.has_gradient
    h = 1e-6
    for q in POINTS:
        value, gradient = model.log_density_gradient(q)
        assert value == pytest.approx(gaussian_log_density(q), rel=1e-14)
        np.testing.assert_allclose(gradient, -PRECISION @ (q - MEAN), rtol=1e-14, atol=1e-14)
        central = [(model.log_density(q + h * e) - model.log_density(q - h * e)) / (2 * h)
                   for e in np.eye(2)]
        np.testing.assert_allclose(gradient, central, rtol=1e-6, atol=1e-7)
        _, from_jacobian = jacobian_only.log_density_gradient(q)
        np.testing.assert_allclose(from_jacobian, gradient, rtol=1e-14, atol=1e-14)


def test_non_finite_outputs_are_returned_as_floats(server):
    """umbridge's Python server writes -inf and nan as bare words (not JSON); they come back
    as the floats they are (a divergence inside a trajectory), without a gradient request."""
    model = UMBridgeModel(server.url, "posterior")
    assert model.log_density([60.0, 0.0]) == -np.inf
    assert np.isnan(model.log_density([-60.0, 0.0]))
    value, gradient = model.log_density_gradient([60.0, 0.0])
    assert value == -np.inf and np.all(np.isnan(gradient))
    assert np.isnan(model.log_density([np.nan, 0.0]))


def test_a_model_without_gradient_is_refused_by_hmc(server):
    model = UMBridgeModel(server.url, "nograd")
    assert model.has_gradient is False
    assert model.log_density(POINTS[0]) == pytest.approx(gaussian_log_density(POINTS[0]))
    with pytest.raises(ValueError, match="needs the gradient"):
        rnshmc.HMC(model)
    with pytest.raises(TypeError, match="'nograd'.*has no gradient"):
        model.log_density_gradient(POINTS[0])


def test_models_that_break_the_convention_are_refused(server):
    with pytest.raises(ValueError, match=r"no model 'missing'.*'posterior'"):
        UMBridgeModel(server.url, "missing")
    with pytest.raises(ValueError, match=r"output sizes \[2\].*log density"):
        UMBridgeModel(server.url, "two-outputs")
    with pytest.raises(ValueError, match="http"):
        UMBridgeModel("localhost:4242")
    with pytest.raises(ValueError, match="timeout"):
        UMBridgeModel(server.url, "posterior", timeout=0)


def test_a_server_error_is_reported_with_the_model_name(server):
    model = UMBridgeModel(server.url, "posterior")
    model.dim = 3  # a wrong input length: umbridge's server answers InvalidInput
    with pytest.raises(UMBridgeError, match="'posterior'.*InvalidInput"):
        model.log_density(np.zeros(3))


def test_a_slow_model_raises_timeout_error_quickly(slow_server):
    model = UMBridgeModel(slow_server.url, "slow", timeout=0.5)  # sizes and info are quick
    start = time.perf_counter()
    with pytest.raises(TimeoutError) as error:
        model.log_density(POINTS[0])
    assert time.perf_counter() - start < 1.5
    assert slow_server.url in str(error.value) and "timeout=0.5 s" in str(error.value)


def test_a_server_that_is_down_raises_connection_error():
    # a bound socket that does not listen: connections to its port are refused
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        start = time.perf_counter()
        with pytest.raises(ConnectionError, match=f"{url}.*is it running"):
            UMBridgeModel(url, "posterior", timeout=5.0)
        assert time.perf_counter() - start < 2.0


def test_a_server_that_goes_down_raises_connection_error_at_evaluation(server):
    model = UMBridgeModel(server.url, "posterior")
    model.log_density(POINTS[0])  # a kept-alive connection
    server.stop()
    with pytest.raises(ConnectionError, match=server.url):
        model.log_density(POINTS[0])


def test_the_model_pickles_and_reconnects(server):
    model = UMBridgeModel(server.url, "posterior", config={"shift": 1.0})
    model.log_density(POINTS[0])
    copy = pickle.loads(pickle.dumps(model))
    assert (copy.url, copy.name, copy.config, copy.dim) == (server.url, "posterior",
                                                            {"shift": 1.0}, 2)
    assert copy.log_density(POINTS[2]) == model.log_density(POINTS[2])


def test_hmc_on_an_umbridge_gaussian(server):
    model = UMBridgeModel(server.url, "posterior")
    result = rnshmc.HMC(model, step_size=0.9, n_steps=3).sample(
        draws=300, tune=20, rng=rng_seed(3), init=MEAN, progress=False)
    assert result.samples.shape == (4, 300, 2)
    assert 0.6 < result.acceptance_rate[0] and not result.diverging.any()
    check_mean(result.samples, MEAN)
    check_covariance(result.samples, MEAN, COVARIANCE)


# --------------------------------------------------------------------------------------------
# a fitted surrogate served


def test_a_served_surrogate_reproduces_its_potential_and_gradient(served_surrogate):
    surrogate, handle = served_surrogate
    model = UMBridgeModel(handle.url, "surrogate")
    assert model.dim == 2 and model.has_gradient
    for q in POINTS:
        value, gradient = model.log_density_gradient(q)
        assert value == pytest.approx(-surrogate.potential(q), rel=1e-12, abs=1e-12)
        assert model.log_density(q) == value
        np.testing.assert_allclose(gradient, -surrogate.gradient(q), rtol=1e-12, atol=1e-12)
    # umbridge's own client: the Jacobian and Hessian actions
    client = umbridge.HTTPModel(handle.url, "surrogate")
    assert client.get_input_sizes() == [2] and client.get_output_sizes() == [1]
    q, vec = POINTS[2], np.array([0.3, -1.2])
    assert client([q.tolist()])[0][0] == pytest.approx(-surrogate.potential(q), rel=1e-12)
    assert client.gradient(0, 0, [q.tolist()], [2.0]) == pytest.approx(
        -2.0 * surrogate.gradient(q), rel=1e-12)
    assert client.apply_jacobian(0, 0, [q.tolist()], vec.tolist())[0] == pytest.approx(
        -surrogate.gradient(q) @ vec, rel=1e-12)
    np.testing.assert_allclose(client.apply_hessian(0, 0, 0, [q.tolist()], [1.0], vec.tolist()),
                               -surrogate.hessian(q) @ vec, rtol=1e-12, atol=1e-12)


def test_a_served_surrogate_listens_on_loopback_only(served_surrogate):
    _, handle = served_surrogate
    assert handle.host == "127.0.0.1" and handle.url == f"http://127.0.0.1:{handle.port}"
    assert [address[:2] for address in handle.addresses] == [("127.0.0.1", handle.port)]
    with socket.create_connection(("127.0.0.1", handle.port), timeout=2.0):
        pass
    # bound to 127.0.0.1 and not to every address: another loopback address is refused
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.2", handle.port), timeout=2.0).close()


def test_serving_stops(surrogate):
    with serve_surrogate(surrogate, port=0, block=False) as handle:
        assert handle.running
        url = handle.url
        assert UMBridgeModel(url, "surrogate").dim == 2
    assert not handle.running
    with pytest.raises(ConnectionError):
        UMBridgeModel(url, "surrogate", timeout=2.0)


def test_an_unfitted_surrogate_is_refused():
    with pytest.raises(RuntimeError, match="not fitted"):
        serve_surrogate(rnshmc.RandomNetworkSurrogate(2, 10, rng=rng_seed(0)), port=0, block=False)
    with pytest.raises(TypeError, match="RandomNetworkSurrogate"):
        serve_surrogate(rnshmc.models.Gaussian(MEAN, COVARIANCE), port=0, block=False)


def test_missing_umbridge_names_the_extra(surrogate, monkeypatch):
    monkeypatch.setitem(sys.modules, "umbridge", None)  # what `import umbridge` then raises
    with pytest.raises(ImportError, match=r"rnshmc\[umbridge\]"):
        serve_surrogate(surrogate, port=0, block=False)


def test_load_surrogate_from_a_saved_result(surrogate, tmp_path):
    other = rnshmc.RandomNetworkSurrogate(2, 30, rng=rng_seed(1)).fit(
        POINTS, [-gaussian_log_density(q) for q in POINTS])
    path = tmp_path / "result.npz"
    rnshmc.SampleResult(surrogate=[surrogate.get_state(), other.get_state()]).save(path)
    for chain, expected in enumerate((surrogate, other)):
        loaded = load_surrogate(path, chain=chain)
        for q in POINTS:
            assert loaded.potential(q) == expected.potential(q)
    with pytest.raises(ValueError, match="no chain 2"):
        load_surrogate(path, chain=2)
    single = tmp_path / "single.npz"
    rnshmc.SampleResult(surrogate=surrogate.get_state()).save(single)
    assert load_surrogate(single).potential(POINTS[1]) == surrogate.potential(POINTS[1])
    rnshmc.SampleResult(samples=np.zeros((1, 2, 2))).save(tmp_path / "nosurrogate.npz")
    with pytest.raises(ValueError, match="no fitted surrogate"):
        load_surrogate(tmp_path / "nosurrogate.npz")


# --------------------------------------------------------------------------------------------
# the command line


def test_serve_command_line_arguments():
    args = build_parser().parse_args(["serve", "result.npz"])
    assert (args.command, args.surrogate, args.port, args.host, args.name, args.chain) == (
        "serve", "result.npz", 4242, "127.0.0.1", "surrogate", 0)
    args = build_parser().parse_args(["serve", "s.npz", "--port", "0", "--host", "0.0.0.0",
                                      "--name", "posterior", "--chain", "1"])
    assert (args.port, args.host, args.name, args.chain) == (0, "0.0.0.0", "posterior", 1)


@pytest.mark.parametrize("extra, message", [([], "no such file"),
                                           (["--port", "70000"], "--port")])
def test_serve_command_line_errors_are_one_line(tmp_path, capsys, extra, message):
    with pytest.raises(SystemExit) as exit_:
        main(["serve", str(tmp_path / "missing.npz")] + extra)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("rnshmc: error: ") and err.count("\n") == 1 and message in err


def test_serve_command_line_refuses_a_missing_chain(surrogate, tmp_path, capsys):
    path = tmp_path / "result.npz"
    rnshmc.SampleResult(surrogate=[surrogate.get_state()]).save(path)
    with pytest.raises(SystemExit):
        main(["serve", str(path), "--chain", "3"])
    assert "no chain 3" in capsys.readouterr().err
