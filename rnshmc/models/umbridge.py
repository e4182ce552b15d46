"""A sampling target served over HTTP by an UM-Bridge model (https://um-bridge-benchmarks.readthedocs.io).

UM-Bridge is a language-independent protocol for numerical models: a server answers
``GET /Info`` and ``POST /ModelInfo``, ``/InputSizes``, ``/OutputSizes``, ``/Evaluate``,
``/Gradient``, ``/ApplyJacobian`` with JSON. :class:`UMBridgeModel` makes such a model an
rnshmc target, so that ``rnshmc.HMC(UMBridgeModel(url, name)).sample()`` samples a density
computed in another process, container or machine.

The client speaks the protocol itself with ``requests`` (the package that ``umbridge``
installs) rather than through ``umbridge.HTTPModel``, whose requests have no timeout: a model
that hangs would hang the chain. Both come with ``pip install rnshmc[umbridge]``.
"""
import json
import math
import re
import threading

import numpy as np

__all__ = ["UMBridgeModel", "UMBridgeError", "UMBridgeConnectionError", "UMBridgeTimeoutError"]

INSTALL_HINT = "pip install 'rnshmc[umbridge]'"
PROTOCOL_VERSION = 1.0


class UMBridgeError(RuntimeError):
    """An UM-Bridge server answered with an error, or with something the protocol does not
    allow."""


class UMBridgeConnectionError(UMBridgeError, ConnectionError):
    """The UM-Bridge server cannot be reached (not running, wrong address, connection lost)."""


class UMBridgeTimeoutError(UMBridgeError, TimeoutError):
    """The UM-Bridge server did not answer within the model's ``timeout``."""


def import_requests():
    """The ``requests`` module, or an ImportError saying how to install the UM-Bridge extra."""
    try:
        import requests
    except ImportError as error:
        raise ImportError(f"UM-Bridge models need the 'requests' package ({error}): "
                          f"{INSTALL_HINT}") from error
    return requests


def import_umbridge():
    """The ``umbridge`` module, or an ImportError saying how to install the UM-Bridge extra."""
    try:
        import umbridge
    except ImportError as error:
        raise ImportError(f"serving UM-Bridge models needs the 'umbridge' package ({error}): "
                          f"{INSTALL_HINT}") from error
    return umbridge


# umbridge's Python server writes its answers with Python's repr of the numbers, so a
# non-finite output arrives as the bare words nan / inf, which are not JSON (its C++ server
# writes null); these are read as NaN, +-Infinity
_NON_FINITE_WORDS = re.compile(r"(?<![\w\"])(-?)(nan|inf)(?![\w\"])")


def _parse_json(text):
    try:
        return json.loads(text)
    except ValueError:
        pass
    try:
        return json.loads(_NON_FINITE_WORDS.sub(
            lambda m: "NaN" if m.group(2) == "nan" else m.group(1) + "Infinity", text))
    except ValueError:
        return None


def _number(value):
    """A JSON number of an answer as a float (null, which C++ servers write for NaN, is NaN)."""
    if value is None:
        return math.nan
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{value!r} is not a number")
    return float(value)


class UMBridgeModel:
    """A log density evaluated by an UM-Bridge model server, as an rnshmc target.

    The UM-Bridge model must have one input vector, the parameters q (input sizes ``[dim]``),
    and one output of size one, the **log density** log p(q) up to a constant (output sizes
    ``[1]``) -- as the UM-Bridge benchmark posteriors do. A model that computes something
    else (a forward map, a potential) is wrapped on the server side. Its gradient is taken
    from the server's ``Gradient`` endpoint (``out_wrt=0, in_wrt=0, sens=[1.0]``), or, when
    the server only has ``ApplyJacobian``, from ``dim`` Jacobian-vector products.

    Parameters
    ----------
    url : str
        The server's address, such as ``"http://localhost:4242"``.
    name : str
        The model's name on the server (default ``"forward"``, UM-Bridge's usual name; the
        benchmark posteriors are called ``"posterior"``, :func:`rnshmc.serve_surrogate`
        says ``"surrogate"``).
    config : dict, optional
        The model configuration sent with every request (JSON-serialisable).
    timeout : float or None
        Seconds to wait for the server to accept a connection and to answer each request
        (default 60); None waits for ever. A slower answer raises
        :class:`~rnshmc.models.umbridge.UMBridgeTimeoutError` (a :class:`TimeoutError`).

    Attributes
    ----------
    dim : int
        The model's input size.
    url, name, config, timeout
        As given (``url`` without a trailing slash).
    supports : dict
        The server's ``ModelInfo``: which of ``Evaluate``, ``Gradient``, ``ApplyJacobian``
        and ``ApplyHessian`` the model has.

    Raises
    ------
    UMBridgeConnectionError
        If the server cannot be reached (a :class:`ConnectionError`): it is checked here,
        with ``GET /Info``, as well as at every evaluation.
    UMBridgeTimeoutError
        If the server does not answer within ``timeout`` (a :class:`TimeoutError`).
    ValueError
        If the server has no model ``name``, speaks another protocol version, or the model
        does not follow the convention above (its sizes are named) or cannot be evaluated.
    ImportError
        Without ``requests`` (``pip install rnshmc[umbridge]``).

    Notes
    -----
    Each density is one HTTP request (``Evaluate``); each density with gradient is two
    (``Evaluate`` and ``Gradient``; UM-Bridge has no request for both). Requests reuse one
    connection per thread. A non-finite output (``NaN``, ``-inf``, or ``null`` from a C++
    server) is returned as the float it is: inside a trajectory the proposal is then a
    divergence (rejected), at the initial point it is a ``ValueError``, as for any target.
    At a non-finite ``q`` the density is NaN without asking the server, and at a point of
    non-finite density the gradient is NaN without asking it either. An error the model
    reports raises :class:`~rnshmc.models.umbridge.UMBridgeError` naming it, which stops the sampler.

    The object pickles as its address, name, configuration and sizes, and connects again at
    its first request, so that chains can run on a process pool or a Dask cluster (whose
    workers must reach ``url``).

    Examples
    --------
    With a model server running on port 4243 (here the UM-Bridge benchmark posteriors' name):

    >>> import rnshmc
    >>> model = rnshmc.models.UMBridgeModel("http://localhost:4243", "posterior")  # doctest: +SKIP
    >>> result = rnshmc.HMC(model).sample(draws=1000)  # doctest: +SKIP
    """

    def __init__(self, url, name="forward", config=None, timeout=60.0):
        import_requests()
        if not isinstance(url, str) or not re.match(r"^https?://[^/\s]+", url):
            raise ValueError(f"url must be an http:// or https:// address, got {url!r}")
        if not isinstance(name, str) or not name:
            raise ValueError(f"name must be a non-empty string, got {name!r}")
        config = {} if config is None else config
        if not isinstance(config, dict):
            raise TypeError(f"config must be a dict, got {type(config).__name__}")
        try:
            json.dumps(config, allow_nan=False)
        except (TypeError, ValueError) as error:
            raise TypeError(f"config must be JSON-serialisable: {error}") from None
        if timeout is not None:
            if isinstance(timeout, bool) or not isinstance(timeout, (int, float, np.floating)) \
                    or not (0 < timeout < math.inf):
                raise ValueError(f"timeout must be a positive number of seconds or None, "
                                 f"got {timeout!r}")
            timeout = float(timeout)
        self.url = url.rstrip("/")
        self.name = name
        self.config = dict(config)
        self.timeout = timeout
        self._local = threading.local()
        self._connect()

    def _connect(self):
        info = self._request("Info", None)
        if not isinstance(info, dict) or "models" not in info:
            raise ValueError(f"{self.url} does not answer GET /Info as an UM-Bridge server")
        if info.get("protocolVersion") != PROTOCOL_VERSION:
            raise ValueError(f"the UM-Bridge server at {self.url} speaks protocol version "
                             f"{info.get('protocolVersion')!r}; this client speaks "
                             f"{PROTOCOL_VERSION}")
        if self.name not in info["models"]:
            raise ValueError(f"the UM-Bridge server at {self.url} has no model {self.name!r}; "
                             f"it serves {info['models']}")
        support = self._request("ModelInfo", {"name": self.name}).get("support", {})
        self.supports = {key: bool(support.get(key, False))
                         for key in ("Evaluate", "Gradient", "ApplyJacobian", "ApplyHessian")}
        inputs = self._request("InputSizes", self._payload()).get("inputSizes")
        outputs = self._request("OutputSizes", self._payload()).get("outputSizes")
        where = f"the UM-Bridge model {self.name!r} at {self.url}"
        if not (isinstance(inputs, list) and len(inputs) == 1 and isinstance(inputs[0], int)
                and not isinstance(inputs[0], bool) and inputs[0] >= 1):
            raise ValueError(f"{where} has input sizes {inputs}: a target needs one input "
                             "vector, the parameters (input sizes [dim])")
        if outputs != [1]:
            raise ValueError(f"{where} has output sizes {outputs}: a target needs one output "
                             "of size one, the log density (output sizes [1])")
        if not self.supports["Evaluate"]:
            raise ValueError(f"{where} cannot be evaluated (its ModelInfo says Evaluate: false)")
        self.dim = inputs[0]

    # ------------------------------------------------------------------------------------------
    # the target protocol

    @property
    def has_gradient(self):
        """Whether the server gives gradients (``Gradient`` or ``ApplyJacobian``)."""
        return self.supports["Gradient"] or self.supports["ApplyJacobian"]

    def log_density(self, q):
        """Log density at ``q`` (ndarray of shape (dim,)): the model's output, as a float."""
        q = self._point(q)
        if not np.all(np.isfinite(q)):
            return math.nan
        answer = self._request("Evaluate", self._payload(input=[q.tolist()]))
        output = answer.get("output")
        try:
            if not (isinstance(output, list) and len(output) == 1 and isinstance(output[0], list)
                    and len(output[0]) == 1):
                raise TypeError("not [[value]]")
            return _number(output[0][0])
        except TypeError:
            raise UMBridgeError(f"the UM-Bridge model {self.name!r} at {self.url} answered "
                                f"{_call('Evaluate', q)} with output {output!r:.200}, not "
                                "[[log density]]") from None

    def log_density_gradient(self, q):
        """(log density, gradient) at ``q``: (float, ndarray of shape (dim,)).

        Raises
        ------
        TypeError
            If the server has neither ``Gradient`` nor ``ApplyJacobian`` for this model.
        """
        if not self.has_gradient:
            raise TypeError(f"the UM-Bridge model {self.name!r} at {self.url} has no gradient "
                            "(its server supports neither Gradient nor ApplyJacobian)")
        q = self._point(q)
        value = self.log_density(q)
        if not math.isfinite(value):  # a divergence whatever the gradient: spare the request
            return value, np.full(self.dim, math.nan)
        point = [q.tolist()]
        if self.supports["Gradient"]:
            answer = self._request("Gradient", self._payload(
                outWrt=0, inWrt=0, input=point, sens=[1.0]))
            gradient = self._vector(answer, "Gradient", self.dim, q)
        else:  # output size one: row i of the Jacobian's transpose is J e_i
            gradient = np.empty(self.dim)
            for i in range(self.dim):
                unit = [0.0] * self.dim
                unit[i] = 1.0
                answer = self._request("ApplyJacobian", self._payload(
                    outWrt=0, inWrt=0, input=point, vec=unit))
                gradient[i] = self._vector(answer, "ApplyJacobian", 1, q)[0]
        return value, gradient

    # ------------------------------------------------------------------------------------------
    # HTTP

    def _payload(self, **entries):
        return {"name": self.name, **entries, "config": self.config}

    def _point(self, q):
        q = np.asarray(q, dtype=np.float64)
        if q.shape != (self.dim,):
            raise ValueError(f"q must have shape ({self.dim},), got {q.shape}")
        return q

    def _vector(self, answer, endpoint, size, q):
        output = answer.get("output")
        try:
            if not (isinstance(output, list) and len(output) == size):
                raise TypeError("wrong length")
            return np.array([_number(value) for value in output])
        except TypeError:
            raise UMBridgeError(f"the UM-Bridge model {self.name!r} at {self.url} answered "
                                f"{_call(endpoint, q)} with output {output!r:.200}, not a "
                                f"list of {size} numbers") from None

    def _session(self):
        session = getattr(self._local, "session", None)
        if session is None:  # one per thread: requests' sessions are not thread-safe
            session = self._local.session = import_requests().Session()
        return session

    def _request(self, endpoint, payload):
        """The JSON answer of the server to ``GET /endpoint`` (``payload`` None) or
        ``POST /endpoint`` with ``payload``."""
        requests = import_requests()
        from urllib3.exceptions import ProtocolError, ReadTimeoutError  # (with requests)
        address = f"{self.url}/{endpoint}"
        # an evaluation's errors name the model and the point: a run that stops on one says
        # where the model failed (its chains' states say when)
        call = endpoint
        if payload is not None and "input" in payload:
            call = _call(endpoint, payload["input"][0])
        # (for the messages that do not say "the UM-Bridge model ..." already)
        of_model = "" if payload is None else f" (model {self.name!r})"
        try:
            if payload is None:
                response = self._session().get(address, timeout=self.timeout)
            else:
                # serialised here: requests refuses NaN, the server's JSON reader accepts it
                response = self._session().post(
                    address, data=json.dumps(payload), timeout=self.timeout,
                    headers={"Content-Type": "application/json"})
        except requests.Timeout:
            raise self._timeout_error(call + of_model) from None
        except requests.ConnectionError as error:
            reason = error.args[0] if error.args else error
            if isinstance(reason, ReadTimeoutError):  # a timeout while reading the body
                raise self._timeout_error(call + of_model) from None
            if isinstance(reason, ProtocolError):  # connected, then dropped before an answer
                raise UMBridgeConnectionError(
                    f"the UM-Bridge server at {self.url} closed the connection without "
                    f"answering {call}{of_model}: did it crash or stop? "
                    f"({_reason(reason)})") from None
            raise UMBridgeConnectionError(
                f"cannot reach the UM-Bridge server at {self.url} ({call}{of_model}): is it "
                f"running and listening there? ({_reason(reason)})") from None
        except requests.RequestException as error:
            raise UMBridgeConnectionError(
                f"request {call}{of_model} to the UM-Bridge server at {self.url} failed: "
                f"{error}") from None
        body = _parse_json(response.text)
        if isinstance(body, dict) and isinstance(body.get("error"), dict):
            error = body["error"]
            raise UMBridgeError(f"the UM-Bridge model {self.name!r} at {self.url} answered "
                                f"{call} with {error.get('type', 'an error')}: "
                                f"{error.get('message', '')}")
        if response.status_code != 200 or not isinstance(body, dict):
            raise UMBridgeError(f"the UM-Bridge server at {self.url} answered {call} with "
                                f"HTTP {response.status_code}: {response.text[:200]!r}")
        return body

    def _timeout_error(self, call):
        return UMBridgeTimeoutError(f"the UM-Bridge server at {self.url} did not answer "
                                    f"{call} within timeout={self.timeout} s")

    # ------------------------------------------------------------------------------------------

    def close(self):
        """Close this thread's connection to the server (the next request opens another)."""
        session = getattr(self._local, "session", None)
        if session is not None:
            session.close()
            self._local.session = None

    def __getstate__(self):
        state = dict(self.__dict__)
        del state["_local"]  # connections do not travel: a new one at the first request
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._local = threading.local()

    def __repr__(self):
        gradient = "with gradient" if self.has_gradient else "no gradient"
        return (f"UMBridgeModel({self.url!r}, name={self.name!r}, dim={self.dim}, "
                f"{gradient})")


def _call(endpoint, q):
    """``"Evaluate at q = [...]"``: a request and its point (at most 6 coordinates shown)."""
    values = [f"{float(x):.6g}" for x in np.ravel(q)]
    if len(values) > 6:
        values = values[:3] + ["..."] + values[-3:]
    return f"{endpoint} at q = [{', '.join(values)}]"


def _reason(reason):
    """The last, most specific part of a requests/urllib3 connection error's message."""
    text = str(reason)
    match = re.search(r"\[Errno [-\d]+\][^')\"]*", text)
    return match.group(0).strip() if match else text[-200:]
