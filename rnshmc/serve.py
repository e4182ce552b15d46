"""Serve a fitted random-network surrogate as an UM-Bridge model.

A surrogate fitted by RNS-HMC is a cheap stand-in for a costly posterior; served over
UM-Bridge (https://um-bridge-benchmarks.readthedocs.io) any UM-Bridge client -- in Python,
C++, MATLAB, R or Julia, or :class:`rnshmc.models.UMBridgeModel` -- can evaluate it and its
gradient::

    server = rnshmc.serve_surrogate(surrogate, port=4242, block=False)    # or: rnshmc serve result.npz
    ...
    server.stop()

The served model has one input, q (input sizes ``[dim]``), and one output of size one, the
**log density** -z(q), where z is the surrogate's potential (``surrogate.potential``, which
approximates U = -log density): the output is minus the potential, the convention of
:class:`~rnshmc.models.UMBridgeModel` and of the UM-Bridge benchmark posteriors. The model has
``Gradient`` (``sens[0] * -grad z(q)``), ``ApplyJacobian`` (``-grad z(q) . vec``) and
``ApplyHessian`` (``sens[0] * -(Hessian of z) vec``).

The requests are answered by umbridge's own server code (``umbridge.serve_models``). That
function binds every network interface and blocks; here its application is run on the
address asked for -- ``127.0.0.1`` by default, so that only this machine can connect -- in
a background thread that :meth:`UMBridgeServer.stop` ends.
"""
import asyncio
import inspect
import threading

import numpy as np

from .models.umbridge import import_umbridge
from .results import load
from .surrogate import RandomNetworkSurrogate

__all__ = ["serve_surrogate", "serve_models", "load_surrogate", "UMBridgeServer"]

# seconds a request still being answered gets to finish when the server stops
_SHUTDOWN_TIMEOUT = 1.0
# seconds to wait for the server thread to bind its address
_START_TIMEOUT = 30.0
# serve_models swaps umbridge's module-level `web` while it builds an application
_BUILD_LOCK = threading.Lock()


class UMBridgeServer:
    """A running UM-Bridge server (what :func:`serve_models` and :func:`serve_surrogate`
    return with ``block=False``); a context manager that stops the server at exit.

    Attributes
    ----------
    url : str
        Its address, such as ``"http://127.0.0.1:4242"``, for UM-Bridge clients.
    host : str
        The address it listens on.
    port : int
        The port it listens on (the one the system chose when 0 was asked for).
    addresses : list of tuple
        Every (host, port, ...) socket address it listens on.
    model_names : list of str
        The names of the models it serves.
    """

    def __init__(self, app, host, port, model_names):
        self._app = app
        self.host = host
        self.port = port
        self.addresses = []
        self.model_names = list(model_names)
        self._loop = None
        self._error = None
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name=f"rnshmc-umbridge-{host}:{port}")

    @property
    def url(self):
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    @property
    def running(self):
        """Whether the server is answering requests."""
        return self._started.is_set() and self._error is None and self._thread.is_alive()

    def _start(self):
        self._thread.start()
        if not self._started.wait(_START_TIMEOUT):
            raise RuntimeError(f"the UM-Bridge server did not start on {self.host}:{self.port} "
                               f"within {_START_TIMEOUT:g} s")
        if self._error is not None:
            self._thread.join()
            error, self._error = self._error, None
            if isinstance(error, OSError):
                raise OSError(error.errno, f"cannot serve on {self.host}:{self.port}: "
                                           f"{error.strerror or error}") from error
            raise error

    def _run(self):
        from aiohttp import web
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        try:
            # aiohttp >= 3.9 takes the grace period on the runner, earlier ones on the site
            on_runner = "shutdown_timeout" in inspect.signature(web.BaseRunner).parameters
            grace = {"shutdown_timeout": _SHUTDOWN_TIMEOUT}
            runner = web.AppRunner(self._app, handle_signals=False, access_log=None,
                                   **(grace if on_runner else {}))
            try:
                loop.run_until_complete(runner.setup())
                site = web.TCPSite(runner, self.host, self.port,
                                   **({} if on_runner else grace))
                loop.run_until_complete(site.start())
                self.addresses = [tuple(address) for address in runner.addresses]
                self.port = self.addresses[0][1]
                self._loop = loop
            except BaseException as error:  # reported by _start in the caller's thread
                self._error = error
                loop.run_until_complete(runner.cleanup())
                return
            finally:
                self._started.set()
            loop.run_forever()
            loop.run_until_complete(runner.cleanup())
            # requests still waiting for a model after the grace period are cancelled (their
            # evaluation itself runs on in umbridge's worker thread until it returns)
            pending = asyncio.all_tasks(loop)
            for task in pending:
                task.cancel()
            loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        finally:
            loop.close()

    def stop(self, timeout=10.0):
        """Stop the server: it closes its socket, and requests being answered get a second
        to finish. Stopping a stopped server does nothing.

        Parameters
        ----------
        timeout : float
            Seconds to wait for the server thread to end.
        """
        loop = self._loop
        if loop is not None and self._thread.is_alive():
            try:
                loop.call_soon_threadsafe(loop.stop)
            except RuntimeError:  # closed meanwhile
                pass
            self._thread.join(timeout)

    def wait(self):
        """Block until the server stops, or until Ctrl-C, which stops it."""
        try:
            while self._thread.is_alive():
                self._thread.join(0.5)  # wakes up for Ctrl-C
        except KeyboardInterrupt:
            pass
        finally:
            self.stop()

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.stop()

    def __repr__(self):
        state = "running" if self.running else "stopped"
        return f"<UMBridgeServer {self.url} serving {self.model_names} ({state})>"


def _umbridge_app(models, max_workers):
    """The aiohttp application that ``umbridge.serve_models(models)`` builds, without its
    ``web.run_app`` (which would bind every interface and block for ever)."""
    umbridge = import_umbridge()
    um = getattr(umbridge, "um", None)
    real_web = getattr(um, "web", None)
    if real_web is None or not hasattr(um, "serve_models"):
        raise RuntimeError(f"umbridge {getattr(umbridge, '__version__', '')} is laid out "
                           "differently from the 1.2 series (umbridge.um.serve_models with "
                           "aiohttp's web.run_app): cannot run its server on a chosen address")
    captured = []

    class CaptureRunApp:  # umbridge.um's `web`, whose run_app keeps the application
        def __getattr__(self, name):
            return getattr(real_web, name)

        @staticmethod
        def run_app(app, *args, **kwargs):
            captured.append(app)

    options = {}
    if "max_workers" in inspect.signature(um.serve_models).parameters:
        options["max_workers"] = max_workers
    with _BUILD_LOCK:
        # the request handlers look `web` up when they run, after it is put back
        um.web = CaptureRunApp()
        try:
            um.serve_models(list(models), port=0, **options)
        finally:
            um.web = real_web
    if len(captured) != 1:
        raise RuntimeError("umbridge.serve_models did not build its application as expected")
    return captured[0]


def serve_models(models, port=4242, host="127.0.0.1", block=True, max_workers=1):
    """Serve ``umbridge.Model`` objects with umbridge's own server, on ``host``.

    Parameters
    ----------
    models : list of umbridge.Model
        The models, each with its own ``name``.
    port : int
        TCP port (default 4242, UM-Bridge's usual one); 0 lets the system choose a free one
        (the handle's ``port`` and ``url`` say which).
    host : str
        Address to listen on: ``"127.0.0.1"`` (default) accepts connections from this
        machine only; ``"0.0.0.0"`` from the network (the models then answer anyone who can
        reach the port).
    block : bool
        True (default): serve until Ctrl-C, then return None. False: serve from a
        background thread and return at once.
    max_workers : int
        Threads that evaluate the models (umbridge's default, 1, answers one request at a
        time).

    Returns
    -------
    UMBridgeServer or None
        With ``block=False``, the running server: ``.url``, ``.stop()``, a context manager.

    Raises
    ------
    OSError
        If ``host:port`` cannot be listened on (the port is in use, the address is not
        this machine's).
    ImportError
        Without umbridge (``pip install rnshmc[umbridge]``).
    """
    if isinstance(port, bool) or not isinstance(port, (int, np.integer)) or not 0 <= port <= 65535:
        raise ValueError(f"port must be an integer from 0 to 65535, got {port!r}")
    if not isinstance(host, str) or not host:
        raise ValueError(f"host must be an address such as '127.0.0.1', got {host!r}")
    models = list(models)
    names = [model.name for model in models]
    if len(set(names)) != len(names):
        raise ValueError(f"the models' names must differ, got {names}")
    server = UMBridgeServer(_umbridge_app(models, max_workers), host, int(port), names)
    server._start()
    if not block:
        return server
    server.wait()
    return None


def _surrogate_model(surrogate, name):
    """The surrogate as an ``umbridge.Model`` (log density -z, with derivatives)."""
    umbridge = import_umbridge()

    def point(parameters):
        return np.asarray(parameters[0], dtype=np.float64)

    class SurrogateModel(umbridge.Model):
        def get_input_sizes(self, config=None):
            return [surrogate.dim]

        def get_output_sizes(self, config=None):
            return [1]

        def __call__(self, parameters, config=None):
            return [[-float(surrogate.potential(point(parameters)))]]

        def gradient(self, out_wrt, in_wrt, parameters, sens, config=None):
            return (-float(sens[0]) * surrogate.gradient(point(parameters))).tolist()

        def apply_jacobian(self, out_wrt, in_wrt, parameters, vec, config=None):
            return [-float(surrogate.gradient(point(parameters)) @ np.asarray(vec, dtype=float))]

        def apply_hessian(self, out_wrt, in_wrt1, in_wrt2, parameters, sens, vec, config=None):
            hessian = surrogate.hessian(point(parameters))
            return (-float(sens[0]) * (hessian @ np.asarray(vec, dtype=float))).tolist()

        def supports_evaluate(self):
            return True

        def supports_gradient(self):
            return True

        def supports_apply_jacobian(self):
            return True

        def supports_apply_hessian(self):
            return True

    return SurrogateModel(name)


def serve_surrogate(surrogate, port=4242, host="127.0.0.1", name="surrogate", block=True):
    """Serve a fitted surrogate as an UM-Bridge model whose output is its log density.

    The model (see the module docstring) has input sizes ``[dim]``, output sizes ``[1]``
    and output ``-surrogate.potential(q)``: the surrogate's log density, minus its
    potential. Its gradient is ``sens[0] * -surrogate.gradient(q)``.

    Parameters
    ----------
    surrogate : RandomNetworkSurrogate
        A fitted surrogate, e.g. ``rnshmc.RNSHMC.fitted_surrogates(result)[0]``. It is
        served as it is when asked: refitting it changes the answers.
    port : int
        TCP port (default 4242); 0 lets the system choose a free one.
    host : str
        Address to listen on (default ``"127.0.0.1"``: this machine only; ``"0.0.0.0"``
        serves the network).
    name : str
        The model's name, which clients give (default ``"surrogate"``).
    block : bool
        True (default): serve until Ctrl-C. False: serve from a background thread and return
        the server (``.url``, ``.stop()``, a context manager).

    Returns
    -------
    UMBridgeServer or None
        The running server with ``block=False``, else None once stopped.

    Raises
    ------
    RuntimeError
        If the surrogate is not fitted.
    OSError
        If ``host:port`` cannot be listened on.
    ImportError
        Without umbridge (``pip install rnshmc[umbridge]``).

    Examples
    --------
    >>> with rnshmc.serve_surrogate(surrogate, port=0, block=False) as server:           # doctest: +SKIP
    ...     model = rnshmc.models.UMBridgeModel(server.url, "surrogate")
    ...     model.log_density(q) == -surrogate.potential(q)
    True
    """
    if not isinstance(surrogate, RandomNetworkSurrogate):
        raise TypeError(f"surrogate must be a RandomNetworkSurrogate, got "
                        f"{type(surrogate).__name__}")
    if not surrogate.fitted:
        raise RuntimeError("cannot serve a surrogate that is not fitted: call fit(Q, t) first")
    if not isinstance(name, str) or not name:
        raise ValueError(f"name must be a non-empty string, got {name!r}")
    return serve_models([_surrogate_model(surrogate, name)], port=port, host=host, block=block)


def load_surrogate(path, chain=0):
    """The fitted surrogate saved in an ``.npz`` file.

    The file is a saved :class:`rnshmc.SampleResult` (``result.save(path)``) with a
    ``"surrogate"`` entry: an RNS-HMC result, whose entry lists one surrogate per chain, or a
    single surrogate saved as
    ``rnshmc.SampleResult(surrogate=surrogate.get_state()).save(path)``.

    Parameters
    ----------
    path : str or path-like
    chain : int
        Which chain's surrogate, for a result of several chains (default 0).

    Returns
    -------
    RandomNetworkSurrogate

    Raises
    ------
    FileNotFoundError
        If there is no such file.
    ValueError
        If it is not such a file, holds no surrogate, or no chain ``chain``.
    """
    result = load(path)
    states = result.get("surrogate")
    if isinstance(states, dict):
        states = [states]
    if not isinstance(states, list) or not states or not all(isinstance(s, dict) for s in states):
        raise ValueError(f"{str(path)!r} holds no fitted surrogate (a saved RNS-HMC result, or "
                         "SampleResult(surrogate=surrogate.get_state()).save(path), has one)")
    if isinstance(chain, bool) or not isinstance(chain, (int, np.integer)) \
            or not 0 <= chain < len(states):
        raise ValueError(f"{str(path)!r} holds the surrogates of {len(states)} chain(s), "
                         f"numbered 0 to {len(states) - 1}: there is no chain {chain!r}")
    try:
        surrogate = RandomNetworkSurrogate.from_state(states[chain])
    except (TypeError, ValueError, KeyError) as error:
        raise ValueError(f"{str(path)!r}: chain {chain}'s surrogate cannot be rebuilt "
                         f"({error})") from error
    if not surrogate.fitted:
        raise ValueError(f"{str(path)!r}: chain {chain}'s surrogate is not fitted")
    return surrogate
