"""L2HMC: a learned, non-volume-preserving generalized leapfrog (Levy, Hoffman and
Sohl-Dickstein 2018; algorithms.md sec. 7), trained in C by a hand-written reverse pass."""
import warnings

import numpy as np

from .._kernels._l2hmc import AugmentedLeapfrog, Trainer, net_shapes, parameter_layout
from .._kernels._metrics import EuclideanMetric
from .._kernels._transition import Chain
from ..targets import as_ctarget, target_dim
from ..validation import check_integer, check_real
from .driver import ChainSampler, Phase, Progress, user_stacklevel

__all__ = ["L2HMC"]

# variance-scaling factors of the reference code's initialisation (weights ~ N(0, 2 factor /
# fan_in), biases 0): the input embeddings 1/3 each, the hidden layer 1, the heads 0.001 (so
# training starts from the leapfrog); the heads' log-scales lS, lQ start at 0
_INIT_FACTORS = {"Wa": 1.0 / 3.0, "Wb": 1.0 / 3.0, "Wt": 1.0 / 3.0, "W2": 1.0,
                 "WS": 0.001, "WQ": 0.001, "WT": 0.001}
_FORMAT = "rnshmc.L2HMC/1"


class L2HMC(ChainSampler):
    """L2HMC: HMC whose leapfrog is replaced by a learned augmented leapfrog.

    The state is (x, v, d) with a direction d = +-1 drawn with the momentum each iteration; a
    trajectory runs ``n_steps`` learned steps (each with its own fixed binary mask and time
    features; V- and X-networks of width ``hidden`` scale, shear and translate the leapfrog's
    updates). The Metropolis test adds the log-Jacobian of the map, so the chain targets the
    posterior exactly for any weights; with the networks' heads at zero (as after
    construction, to 1e-3) it is HMC with step size ``step_size`` and a random time direction.
    :meth:`train` fits the weights and the step size to maximise the expected squared jump.

    Parameters
    ----------
    target : rnshmc.Target, built-in model or BridgeStan-style object
        The log density to sample; needs a gradient and a known ``dim``. Training also needs
        Hessian-vector products: exact for the toy models, central differences of the
        gradient otherwise (two more gradients per step).
    n_steps : int
        Learned leapfrog steps T per trajectory (default 10).
    hidden : int
        Width of the networks' two hidden layers (default 10).
    step_size : float
        The initial step size eps (default 0.1); trained with the weights.
    rng : None, int, SeedSequence or Generator
        Draws the initial weights and the masks (kept with the weights).
    max_energy_error : float
        Proposals with a larger energy error (log-Jacobian included) are rejected as
        divergences.

    Attributes
    ----------
    parameters : ndarray
        The flat parameter vector (log eps, then the V- and X-networks' arrays;
        :meth:`weights` names them).
    masks : ndarray of shape (n_steps, dim)
    history : dict of ndarrays
        Per training iteration: ``loss``, ``acceptance`` (mean over the training chains),
        ``step_size``, ``temperature``.

    Examples
    --------
    >>> import rnshmc
    >>> model = rnshmc.models.correlated_gaussian_2d()
    >>> l2 = rnshmc.L2HMC(model, rng=0).train(200, chains=20, rng=1, progress=False)
    >>> res = l2.sample(200, tune=50, rng=2, progress=False)
    >>> res.samples.shape
    (1, 200, 2)
    """

    name = "L2HMC"
    PHASES = {"warmup": Phase(), "sampling": Phase(keep=("samples", "records"))}

    def __init__(self, target, n_steps=10, hidden=10, step_size=0.1, rng=None,
                 max_energy_error=1000.0):
        if not hasattr(target, "dim"):
            raise ValueError("L2HMC needs the target's dim (give dim to rnshmc.Target)")
        dim = target_dim(target)
        self.hidden = check_integer(hidden, "hidden", minimum=1)
        n_steps = check_integer(n_steps, "n_steps", minimum=1)
        generator = np.random.default_rng(rng)
        self.parameters = _initial_parameters(dim, self.hidden, generator)
        self.masks = _draw_masks(generator, n_steps, dim)
        super().__init__(target, step_size=step_size, n_steps=n_steps, jitter=False,
                         adapt_mass_matrix=False, max_energy_error=max_energy_error)
        self._adam = (np.zeros(self.parameters.size), np.zeros(self.parameters.size), 0)
        self.history = {key: np.empty(0) for key in ("loss", "acceptance", "step_size",
                                                     "temperature")}

    @property
    def step_size(self):
        """The step size eps = exp(log eps) of the current parameters."""
        return float(np.exp(self.parameters[0]))

    @step_size.setter
    def step_size(self, value):
        value = check_real(value, "step_size", lower=0.0)
        self.parameters[0] = np.log(value)

    @property
    def dim(self):
        return self.masks.shape[1]

    def weights(self):
        """The parameters by name: {"log_eps": float, "V.Wa": ndarray, ...} (views)."""
        layout = parameter_layout(self.dim, self.hidden)
        del layout["size"]
        return {name: self.parameters[offset:offset + int(np.prod(shape))].reshape(shape)
                for name, (offset, shape) in layout.items()}

    # ------------------------------------------------------------------------------------------
    # training

    def train(self, n_iterations=5000, chains=200, rng=None, learning_rate=1e-3,
              decay_rate=0.96, decay_steps=1000, scale=0.1, burnin_weight=1.0, temperature=1.0,
              init=None, target=None, progress=True):
        """Train the weights and the step size (Adam on the expected-squared-jump loss).

        Each iteration draws momenta and directions for ``chains`` chains, runs their
        trajectories, takes the mean loss lambda/delta - delta/lambda (delta = the squared jump
        times the acceptance probability, + 1e-4; lambda = ``scale``) plus ``burnin_weight``
        times that of as many trajectories started afresh from N(0, I), differentiates it by a
        reverse pass in C, takes one Adam step and moves each chain by a Metropolis test. A
        further call continues the chains' Adam state and learning-rate schedule (not the
        chains, which start afresh).

        Parameters
        ----------
        n_iterations : int
            Adam steps (the reference: 5000).
        chains : int
            Chains in a batch (the reference: 200).
        rng : None, int, SeedSequence or Generator
        learning_rate, decay_rate, decay_steps : float, float, int
            Adam's learning rate, multiplied by ``decay_rate`` every ``decay_steps`` steps
            (the reference: 1e-3, 0.96, 1000).
        scale : float
            lambda of the loss (the reference: 0.1).
        burnin_weight : float
            Weight of the trajectories from the initial distribution (0: none).
        temperature : float
            Initial temperature: the dynamics use U / T_i, T_i annealed geometrically from
            ``temperature`` to 1 over the iterations (> 1 for multimodal targets).
        init : None or ndarray of shape (chains, dim) or (dim,)
            The chains' starting points (default: N(0, I) draws).
        target : optional
            Train on this target instead of the sampler's (e.g. a fitted surrogate of a costly
            model: training then costs no evaluation of the model).
        progress : bool
            A progress bar with the loss (needs tqdm).

        Returns
        -------
        self
        """
        n_iterations = check_integer(n_iterations, "n_iterations", minimum=1)
        chains = check_integer(chains, "chains", minimum=1)
        learning_rate = check_real(learning_rate, "learning_rate", lower=0.0)
        decay_rate = check_real(decay_rate, "decay_rate", lower=0.0, upper=1.0,
                                upper_inclusive=True)
        decay_steps = check_integer(decay_steps, "decay_steps", minimum=1)
        scale = check_real(scale, "scale", lower=0.0)
        burnin_weight = check_real(burnin_weight, "burnin_weight", lower=0.0,
                                   lower_inclusive=True)
        temperature = check_real(temperature, "temperature", lower=0.0)
        ctarget = as_ctarget(self.target if target is None else target, self.dim)
        if ctarget.dim != self.dim:
            raise ValueError(f"the training target has dim {ctarget.dim}, the sampler {self.dim}")
        generator = np.random.default_rng(rng)
        if init is None:
            x = generator.standard_normal((chains, self.dim))
        else:
            x = np.array(np.broadcast_to(np.asarray(init, dtype=np.float64),
                                         (chains, self.dim)))
            if not np.all(np.isfinite(x)):
                raise ValueError("init contains non-finite values")
        fraction = np.arange(n_iterations) / max(n_iterations - 1, 1)
        temperatures = temperature ** (1.0 - fraction)
        trainer = Trainer(self.dim, self.n_steps, self.hidden, self.parameters, self.masks)
        m, v, step = self._adam
        losses, acceptance = np.empty(n_iterations), np.empty(n_iterations)
        step_sizes = np.empty(n_iterations)
        zeros, ones = np.zeros(self.dim), np.ones(self.dim)
        chunk = max(1, n_iterations // 100)
        bar = Progress(progress, n_iterations, "L2HMC training")
        done = skipped = 0
        try:
            while done < n_iterations:
                n = min(chunk, n_iterations - done)
                part = slice(done, done + n)
                skipped += trainer.train(ctarget, x, generator, n, m, v, step, learning_rate,
                                         decay_rate, decay_steps, scale, burnin_weight,
                                         temperatures[part], zeros, ones, losses[part],
                                         acceptance[part])
                step += n
                step_sizes[part] = self.step_size
                done += n
                self._adam = (m, v, step)
                bar.update(n, loss=f"{losses[done - 1]:.3g}",
                           accept=f"{acceptance[done - 1]:.2f}")
        finally:  # what was trained stays (also on Ctrl-C)
            bar.close()
            for key, values in (("loss", losses), ("acceptance", acceptance),
                                ("step_size", step_sizes), ("temperature", temperatures)):
                self.history[key] = np.concatenate([self.history[key], values[:done]])
        if skipped:
            warnings.warn(f"L2HMC training: {skipped} of {n_iterations} updates skipped for a "
                          "non-finite gradient (lower learning_rate or step_size)",
                          RuntimeWarning, stacklevel=user_stacklevel())
        if not np.all(np.isfinite(self.parameters)):
            raise FloatingPointError("L2HMC training produced non-finite weights")
        return self

    # ------------------------------------------------------------------------------------------
    # sampling (the driver's phases: a burn-in of ``tune`` iterations, then ``draws``)

    def plan(self, draws, tune):
        return [["warmup", tune], ["sampling", draws]]

    def phase_spec(self, name):
        return self.PHASES[name]

    def trajectory(self, name, state):
        return self.n_steps, False

    def adapts_step_size(self, state):
        return False

    def new_chain(self, dynamics, state, test=None, delayed_acceptance=False):
        # the integrator reads a copy of the weights: training later changes no running chain
        integrator = AugmentedLeapfrog(state.dim, self.n_steps, self.hidden,
                                       self.parameters.copy(), self.masks)
        chain = Chain(dynamics, test, EuclideanMetric(state.dim), integrator,
                      max_energy_error=self.max_energy_error)
        chain.step_size = integrator.step_size  # recorded; the integrator uses its own
        return chain

    def init_states(self, draws=1000, tune=1000, chains=1, rng=None, init=None):
        states = super().init_states(draws, tune, chains, rng, init)
        for state in states:  # the weights' fingerprint: a chain continues with its own
            state.extras["parameters_checksum"] = _checksum(self.parameters)
        return states

    def run_chain(self, state, ctarget=None, progress=False, stop_after=None):
        if state.extras.get("parameters_checksum") != _checksum(self.parameters):
            raise ValueError("this chain was started with other L2HMC weights (trained or "
                             "loaded since): continue it with the sampler that started it")
        return super().run_chain(state, ctarget, progress, stop_after)

    def sample(self, draws=1000, tune=1000, chains=1, rng=None, init=None, progress=True,
               pool=None):
        """Draw samples with the current weights (see :meth:`ChainSampler.sample` for the
        arguments; ``tune`` iterations of burn-in are discarded, nothing is adapted).

        Returns
        -------
        SampleResult
            As :meth:`HMC.sample`'s; ``step_size`` is the learned eps, ``n_steps`` the
            trajectory length, and ``n_gradient_evals`` counts one gradient per learned step.
        """
        return super().sample(draws=draws, tune=tune, chains=chains, rng=rng, init=init,
                              progress=progress, pool=pool)

    # ------------------------------------------------------------------------------------------
    # saving the weights

    def save(self, path):
        """Save the weights, masks, Adam state and training history to ``path`` (``.npz``,
        no pickle)."""
        m, v, step = self._adam
        np.savez(path, format=np.array(_FORMAT), dim=self.dim, n_steps=self.n_steps,
                 hidden=self.hidden, parameters=self.parameters, masks=self.masks,
                 adam_m=m, adam_v=v, adam_step=step,
                 **{f"history_{key}": value for key, value in self.history.items()})

    @classmethod
    def load(cls, path, target, max_energy_error=1000.0):
        """An L2HMC sampler of ``target`` with the weights saved by :meth:`save`.

        Raises
        ------
        ValueError
            If the file is not an L2HMC weights file, is inconsistent or was saved for another
            dimension.
        """
        try:
            with np.load(path, allow_pickle=False) as npz:
                data = {key: npz[key] for key in npz.files}
        except (OSError, ValueError) as error:
            raise ValueError(f"{path}: not a readable .npz file ({error})") from None
        if "format" not in data or str(data["format"]) != _FORMAT:
            raise ValueError(f"{path}: not an rnshmc L2HMC weights file")
        dim, n_steps, hidden = (int(data[k]) for k in ("dim", "n_steps", "hidden"))
        if hasattr(target, "dim") and target_dim(target) != dim:
            raise ValueError(f"{path}: weights for dim {dim}, the target has dim "
                             f"{target_dim(target)}")
        size = parameter_layout(dim, hidden)["size"]
        parameters = np.ascontiguousarray(data["parameters"], dtype=np.float64)
        masks = np.ascontiguousarray(data["masks"], dtype=np.float64)
        if (parameters.shape != (size,) or masks.shape != (n_steps, dim)
                or not np.all(np.isfinite(parameters))
                or not np.all((masks == 0.0) | (masks == 1.0))):
            raise ValueError(f"{path}: inconsistent L2HMC weights")
        sampler = cls(target, n_steps=n_steps, hidden=hidden, rng=0,
                      max_energy_error=max_energy_error)
        sampler.parameters[:] = parameters
        sampler.masks = masks
        sampler._adam = (np.array(data["adam_m"], dtype=np.float64),
                         np.array(data["adam_v"], dtype=np.float64), int(data["adam_step"]))
        sampler.history = {key[len("history_"):]: np.array(value)
                           for key, value in data.items() if key.startswith("history_")}
        return sampler


def _initial_parameters(dim, hidden, generator):
    layout = parameter_layout(dim, hidden)
    parameters = np.zeros(layout["size"])
    for net in ("V", "X"):
        for field, shape in net_shapes(dim, hidden).items():
            if field in _INIT_FACTORS:
                offset, _ = layout[f"{net}.{field}"]
                fan_in = shape[1]
                parameters[offset:offset + int(np.prod(shape))] = generator.normal(
                    0.0, np.sqrt(2.0 * _INIT_FACTORS[field] / fan_in), size=int(np.prod(shape)))
    return parameters


def _draw_masks(generator, n_steps, dim):
    """Binary masks with floor(dim / 2) ones (at least one zero), a fresh permutation per step."""
    half = np.zeros(dim)
    half[:dim // 2] = 1.0
    return np.array([generator.permutation(half) for _ in range(n_steps)])


def _checksum(parameters):
    return float(np.sum(parameters * np.arange(1, parameters.size + 1)))
