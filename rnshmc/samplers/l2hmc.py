"""L2HMC: a learned, non-volume-preserving generalized leapfrog (Levy, Hoffman and
Sohl-Dickstein 2018; docs/algorithms.md section 7), trained in C by a hand-written reverse pass."""
import dataclasses
import math
import time
import warnings

import numpy as np

from .._kernels._l2hmc import (AugmentedLeapfrog, Trainer, TransformedTarget, net_shapes,
                                parameter_layout)
from .._kernels._metrics import EuclideanMetric
from .._kernels._transition import Chain
from ..state import PartState
from ..surrogate import Surrogate, surrogate_from_state
from ..targets import as_ctarget, target_dim
from ..validation import check_integer, check_real, refuse_renamed, user_stacklevel
from ._base import Sampler
from ._progress import Progress
from .phases.base import Phase, by_name, euclidean_chain, start_where_finite
from .phases.dynamics import (DynamicsState, WatchedPhase, running_exact, sampling_evals,
                              trust_report, trust_watch, warn_about_trust_events)
from .phases.fit import FitState, jump_reference
from .rns import RNSHMC

__all__ = ["L2HMC"]

# variance-scaling factors of the reference code's initialisation (weights ~ N(0, 2 factor /
# fan_in), biases 0): the input embeddings 1/3 each, the hidden layer 1, the heads 0.001 (so
# training starts from the leapfrog); the heads' log-scales lS, lQ start at 0
_INIT_FACTORS = {"Wa": 1.0 / 3.0, "Wb": 1.0 / 3.0, "Wt": 1.0 / 3.0, "W2": 1.0,
                 "WS": 0.001, "WQ": 0.001, "WT": 0.001}
_FORMAT = "rnshmc.L2HMC/1"
# training collapse (the chains' acceptance over a chunk of iterations) and recovery: see
# L2HMC.history; and the acceptance under which the trained weights are refused for sampling
COLLAPSED_ACCEPTANCE = 0.01
HEALTHY_ACCEPTANCE = 0.1
MAX_RECOVERIES = 3
# the trust watch on a surrogate: no refits (the weights were trained on that surrogate)
# (a window is compared with the training's acceptance on the surrogate itself, which the
# test on the model does not reach even where the surrogate is good: a lower ratio)
TRUST_DEFAULTS = dict(max_refits=0, ratio=1 / 3)
# earlier keyword arguments: (their group, their new name), named by the error they raise
RENAMED = dict(hidden=(None, "net_width"), n_hidden=(None, "net_width"),
               surrogate=(None, "fitted_surrogate"),
               rng=("train", "rng", "L2HMC(...).initialize(rng) (the same weights), or let "
                                    "train(rng=...) draw them"))


class L2HMC(Sampler):
    """L2HMC: HMC whose leapfrog is replaced by a learned augmented leapfrog.

    The state is (x, v, d) with a direction d = +-1 drawn with the momentum each iteration; a
    trajectory runs ``n_steps`` learned steps (each with its own fixed binary mask and time
    features; V- and X-networks of width ``net_width`` scale, shear and translate the
    leapfrog's updates). The Metropolis test adds the log-Jacobian of the map, so the chain
    targets the posterior exactly for any weights; with the networks' heads at zero (as they
    start, to 1e-3) it is HMC with step size ``step_size`` and a random time direction.
    :meth:`train` draws the initial weights and masks from its ``rng`` (the first time) and
    fits them and the step size to maximise the expected squared jump; :meth:`load` reads
    saved ones. See ``docs/algorithms.md`` (L2HMC).

    Parameters
    ----------
    target : rnshmc.Target, built-in model or BridgeStan-style object
        The log density to sample; needs a gradient and a known ``dim``. Training also needs
        Hessian-vector products: exact for the toy models, central differences of the
        gradient otherwise (two more gradients per step).
    n_steps : int
        Learned leapfrog steps T per trajectory (default 10).
    net_width : int
        Width of the networks' two hidden layers (default 10).
    step_size : float
        The initial step size eps (default 0.1); trained with the weights.
    max_energy_error : float
        Proposals with a larger energy error (log-Jacobian included) are rejected as
        divergences.
    fitted_surrogate : optional
        A target for the dynamics and the training instead of ``target`` (e.g. a fitted
        :class:`~rnshmc.RandomNetworkSurrogate` of a costly model): training then evaluates
        no model, and each sampling iteration one exact density (the Metropolis test, on
        ``target``) and no exact gradient. The chain stays exact: the map is a fixed
        invertible one whose log-Jacobian the test includes. :meth:`with_surrogate` explores
        the model and fits one as RNS-HMC does.
    wall : float or None
        With a ``fitted_surrogate``: its dynamics and training add ``(|z_i| - wall)_+^2 / 2`` to the
        surrogate's potential, in the standardised coordinates z (default 5: five standard
        deviations of the exploration). A surrogate is fitted where the exploration went and
        may fall without bound beyond it; trained on it without a wall, L2HMC learned to jump
        there (the surrogate promised acceptance 1) and on the authors' PDE every chain then
        stopped. The test is always on the model, so the chain stays exact. None: no wall.
    trust : dict or bool
        With a ``fitted_surrogate``: the trust watch of :class:`~rnshmc.RNSHMC` over the sampling
        phase (default True). A window of ``window`` draws whose acceptance is under
        ``ratio`` (here 1/3) times the training chains' final acceptance on the surrogate, or (after
        :meth:`with_surrogate`) whose moves are under ``jump_ratio`` times the exploration's,
        hands the rest of the chain to exact HMC (the initial ``step_size``, ``n_steps``
        steps, jittered, in z), with a warning and ``fallback``, ``trust_events`` and
        ``exact_dynamics`` in the result. No refits: the weights were trained on this
        surrogate. False: no watch.
    standardize : None or (shift, scale), ndarrays of shape (dim,)
        Run the learned dynamics in z = (x - shift) / scale (as a diagonal mass matrix
        would; the constant Jacobian cancels in the test). Inputs (``init``) and outputs
        (samples) stay in x. None: z = x, as in the reference code.

    Attributes
    ----------
    parameters : ndarray or None
        None until :meth:`train` or :meth:`load`; then the flat parameter vector (log eps, then the V- and X-networks' arrays;
        :meth:`weights` names them).
    masks : ndarray of shape (n_steps, dim) or None
    history : dict of ndarrays
        Per training iteration: ``loss``, ``acceptance`` (mean over the training chains),
        ``step_size``, ``temperature``; and ``recovered_at``, the iterations where training
        collapsed (a chunk of iterations, a hundredth of a call's, accepting under
        ``COLLAPSED_ACCEPTANCE``) and the best weights so far (the lowest mean loss of a chunk
        accepting at least ``HEALTHY_ACCEPTANCE``), their Adam moments and chains were
        restored, at half the learning rate (at most ``MAX_RECOVERIES`` times a call).
    training_evals : dict
        What training has cost so far: the training target's ``gradient`` evaluations (with
        its potential where needed), ``hessian_vector`` products (two more gradients each
        where they are differenced) and ``seconds``.

    Notes
    -----
    Earlier names raise a TypeError naming the new spelling: ``hidden`` and ``n_hidden``
    (now ``net_width``: ``n_hidden`` is a surrogate's hidden units in every other sampler),
    ``surrogate`` (now ``fitted_surrogate``: ``surrogate`` is an unfitted specification
    elsewhere) and ``rng`` (the initial weights' stream: now ``train(rng=...)``'s, or
    ``initialize(rng)``).

    Examples
    --------
    >>> import rnshmc
    >>> model = rnshmc.models.correlated_gaussian_2d()
    >>> l2 = rnshmc.L2HMC(model).train(200, chains=20, rng=1, progress=False)
    >>> res = l2.sample(200, tune=50, rng=2, progress=False)
    >>> res.samples.shape
    (4, 200, 2)
    """

    name = "L2HMC"

    def __init__(self, target, *, n_steps=10, net_width=10, step_size=0.1,
                 max_energy_error=1000.0, fitted_surrogate=None, standardize=None, wall=5.0,
                 trust=True, **renamed):
        refuse_renamed(type(self).__name__, renamed, RENAMED)
        surrogate = fitted_surrogate
        if not hasattr(target, "dim"):
            raise ValueError("L2HMC needs the target's dim (give dim to rnshmc.Target)")
        dim = target_dim(target)
        if surrogate is not None and (not hasattr(surrogate, "dim") or target_dim(surrogate) != dim):
            raise ValueError(f"fitted_surrogate must be a target of the model's dim {dim}")
        self.surrogate = surrogate
        self.wall = None if wall is None else check_real(wall, "wall", lower=0.0)
        self.exploration = None  # what with_surrogate's exploration cost and found
        if standardize is None:
            self.shift, self.scale = np.zeros(dim), np.ones(dim)
        else:
            self.shift, self.scale = (np.array(a, dtype=np.float64) for a in standardize)
            if (self.shift.shape != (dim,) or self.scale.shape != (dim,)
                    or not np.all(np.isfinite(self.shift)) or not np.all(np.isfinite(self.scale))
                    or not np.all(self.scale > 0)):
                raise ValueError(f"standardize must be (shift, scale): {dim} finite numbers "
                                 "each, scale > 0")
        self.n_hidden = check_integer(net_width, "net_width", minimum=1)
        self.n_steps = check_integer(n_steps, "n_steps", minimum=1)
        super().__init__(target)
        self.parameters = self.masks = None  # drawn by the first train(), or loaded
        self._initial_step_size = check_real(step_size, "step_size", lower=0.0)
        self.max_energy_error = check_real(max_energy_error, "max_energy_error", lower=0.0)
        # on a surrogate, a watch with exact HMC as its fallback (no refits: L2HMC's weights
        # were trained on the surrogate it has)
        self.trust = (None if surrogate is None
                      else trust_watch(trust, reference="surrogate", kernels=("hmc",),
                                       **TRUST_DEFAULTS))
        # a burn-in of ``tune`` iterations (nothing adapted), then ``draws``
        self.phases = by_name(LearnedPhase(Phase.WARMUP, self),
                              LearnedPhase(Phase.SAMPLING, self, keep=("samples", "records"),
                                           trust=self.trust))
        size = parameter_layout(dim, self.n_hidden)["size"]
        self._adam = (np.zeros(size), np.zeros(size), 0)
        self.history = {key: np.empty(0) for key in ("loss", "acceptance", "step_size",
                                                     "temperature", "recovered_at", "stopped_at")}
        # the training target's evaluations over all train() calls
        self.training_evals = {"gradient": 0, "hessian_vector": 0, "seconds": 0.0}

    @property
    def step_size(self):
        """The step size eps = exp(log eps) of the current parameters (before any: the
        initial one)."""
        if self.parameters is None:
            return self._initial_step_size
        return float(np.exp(self.parameters[0]))

    @step_size.setter
    def step_size(self, value):
        value = check_real(value, "step_size", lower=0.0)
        if self.parameters is None:
            self._initial_step_size = value
        else:
            self.parameters[0] = np.log(value)

    @property
    def dim(self):
        return target_dim(self.target)

    def initialize(self, rng=None):
        """Draw the initial weights and masks (the first :meth:`train` does it itself, from a
        child of its stream); the networks' heads start near zero, so the untrained sampler is
        HMC with a random time direction.

        Parameters
        ----------
        rng : None, int, SeedSequence or Generator

        Returns
        -------
        self
        """
        generator = np.random.default_rng(rng)
        self.parameters = _initial_parameters(self.dim, self.n_hidden, generator)
        self.masks = _draw_masks(generator, self.n_steps, self.dim)
        self.parameters[0] = np.log(self._initial_step_size)
        return self

    def _check_weights(self):
        if self.parameters is None:
            raise ValueError("this L2HMC has no weights yet: train() it (its rng draws the "
                             "initial weights), initialize(rng) it, or load() saved ones")

    def weights(self):
        """The parameters by name: {"log_eps": float, "V.Wa": ndarray, ...} (views)."""
        self._check_weights()
        layout = parameter_layout(self.dim, self.n_hidden)
        del layout["size"]
        return {name: self.parameters[offset:offset + int(np.prod(shape))].reshape(shape)
                for name, (offset, shape) in layout.items()}

    # ------------------------------------------------------------------------------------------
    # training

    def train(self, n_iterations=5000, chains=200, rng=None, learning_rate=1e-3,
              decay_rate=0.96, decay_steps=1000, scale=0.1, burnin_weight=1.0, temperature=1.0,
              init=None, burnin_mean=None, burnin_sd=None, target=None, patience=None,
              progress=True):
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
            The chains' starting points (default: draws from the initial distribution).
        burnin_mean, burnin_sd : None or ndarrays of shape (dim,)
            The initial distribution N(mean, diag(sd^2)) of the burn-in term and of the
            default ``init``. Unless given: N(0, I) in the dynamics' coordinates (the
            reference's N(0, I) without ``standardize``, N(shift, diag(scale^2)) with it),
            or, after :meth:`with_surrogate`, the exploration's training states' mean and
            standard deviations (where the surrogate was fitted). The burn-in term rewards
            long jumps from there: far from the posterior (the reference's N(0, I) on its
            50-d Gaussian with variances 1e-2 to 1e2), volume-expanding jumps from those
            starts came to dominate the loss and the chains' acceptance fell to 0.001
            within 300 steps (``benchmarks/bench_l2hmc.py``): standardise, or lower
            ``burnin_weight``.
        target : optional
            Train on this target instead of the sampler's dynamics (its ``surrogate`` if it
            has one, else its target).
        progress : bool
            A progress bar with the loss (needs tqdm).
        patience : int or None
            Stop before ``n_iterations`` when the loss has stopped improving: the mean loss
            of ``patience`` chunks in a row (a chunk is a hundredth of ``n_iterations``) was
            not below the best chunk's by 1% of its magnitude, with the temperature at 1.
            ``history["stopped_at"]`` holds the iteration (of all calls) where a call
            stopped so. None (default): all ``n_iterations``.

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
        if target is None:
            target = self.target if self.surrogate is None else self.surrogate
        ctarget = as_ctarget(target, self.dim)
        if ctarget.dim != self.dim:
            raise ValueError(f"the training target has dim {ctarget.dim}, the sampler {self.dim}")
        transformed = self._transformed(ctarget)
        generator = np.random.default_rng(rng)
        if self.parameters is None:  # (a child stream: training's own draws are unchanged)
            self.initialize(generator.spawn(1)[0])
        mean, sd = self._initial_distribution(burnin_mean, burnin_sd)
        if init is None:
            x = mean + sd * generator.standard_normal((chains, self.dim))
        else:
            x = np.array(np.broadcast_to(np.asarray(init, dtype=np.float64),
                                         (chains, self.dim)))
            if not np.all(np.isfinite(x)):
                raise ValueError("init contains non-finite values")
        z = np.ascontiguousarray((x - self.shift) / self.scale)  # the dynamics' coordinates
        mean, sd = (mean - self.shift) / self.scale, sd / self.scale
        fraction = np.arange(n_iterations) / max(n_iterations - 1, 1)
        temperatures = temperature ** (1.0 - fraction)
        trainer = Trainer(self.dim, self.n_steps, self.n_hidden, self.parameters, self.masks)
        m, v, step = self._adam
        losses, acceptance = np.empty(n_iterations), np.empty(n_iterations)
        step_sizes = np.empty(n_iterations)
        chunk = max(1, n_iterations // 100)
        started = time.perf_counter()
        bar = Progress(progress, n_iterations, "L2HMC training")
        if patience is not None:
            patience = check_integer(patience, "patience", minimum=1)
        done = skipped = 0
        best = None  # (mean loss, weights, Adam moments, chains) of the best healthy chunk
        recoveries = []
        lowest, flat = math.inf, 0  # the best chunk's mean loss; chunks since it improved
        try:
            while done < n_iterations:
                n = min(chunk, n_iterations - done)
                part = slice(done, done + n)
                skipped += trainer.train(transformed, z, generator, n, m, v, step, learning_rate,
                                         decay_rate, decay_steps, scale, burnin_weight,
                                         temperatures[part], mean, sd, losses[part],
                                         acceptance[part])
                step += n
                step_sizes[part] = self.step_size
                done += n
                rate, loss = float(acceptance[part].mean()), float(losses[part].mean())
                if rate >= HEALTHY_ACCEPTANCE and (best is None or loss < best[0]):
                    best = (loss, self.parameters.copy(), m.copy(), v.copy(), z.copy())
                elif (rate < COLLAPSED_ACCEPTANCE and best is not None
                      and len(recoveries) < MAX_RECOVERIES):
                    # collapsed: back to the best weights (the step size among them), their
                    # Adam moments and chains, at half the learning rate (the trainer
                    # evaluates U and grad U afresh at a chain whose state it did not leave)
                    for array, saved in zip((self.parameters, m, v, z), best[1:]):
                        array[...] = saved
                    learning_rate /= 2
                    recoveries.append(dict(iteration=done, acceptance=rate,
                                           learning_rate=learning_rate))
                self._adam = (m, v, step)
                bar.update(n, loss=f"{losses[done - 1]:.3g}",
                           accept=f"{acceptance[done - 1]:.2f}")
                if lowest == math.inf or loss < lowest - 0.01 * abs(lowest):
                    lowest, flat = loss, 0
                else:
                    flat += 1
                if (patience is not None and flat >= patience
                        and temperatures[done - 1] == 1.0 and done < n_iterations):
                    stopped = len(self.history["loss"]) + done
                    self.history["stopped_at"] = np.append(
                        self.history.get("stopped_at", np.empty(0)), stopped)
                    break
        finally:  # what was trained stays (also on Ctrl-C)
            bar.close()
            self.training_evals["gradient"] += trainer.n_gradient_evals
            self.training_evals["hessian_vector"] += trainer.n_hessian_vector_evals
            self.training_evals["seconds"] += time.perf_counter() - started
            for key, values in (("loss", losses), ("acceptance", acceptance),
                                ("step_size", step_sizes), ("temperature", temperatures)):
                self.history[key] = np.concatenate([self.history[key], values[:done]])
        self.history["recovered_at"] = np.concatenate([
            self.history.get("recovered_at", np.empty(0)),
            [len(self.history["loss"]) - done + r["iteration"] for r in recoveries]])
        if recoveries:
            warnings.warn(f"L2HMC training collapsed {len(recoveries)} time(s) (the training "
                          f"chains' acceptance fell under {COLLAPSED_ACCEPTANCE} at iterations "
                          f"{[r['iteration'] for r in recoveries]}): each time the best weights "
                          "so far were restored and the learning rate halved (to "
                          f"{learning_rate:.3g}; history['recovered_at'])",
                          RuntimeWarning, stacklevel=user_stacklevel())
        recent = acceptance[max(0, done - max(10, done // 10)):done]
        if done and recent.mean() < COLLAPSED_ACCEPTANCE and acceptance[:done].max() > 0.1:
            warnings.warn("L2HMC training collapsed: the training chains' acceptance fell from "
                          f"{acceptance[:done].max():.2f} to {recent.mean():.3f} (a few long "
                          "jumps dominated the loss); the weights will hardly move a chain. "
                          "Lower learning_rate or burnin_weight, or standardise",
                          RuntimeWarning, stacklevel=user_stacklevel())
        if skipped:
            warnings.warn(f"L2HMC training: {skipped} of {n_iterations} updates skipped for a "
                          "non-finite gradient (lower learning_rate or step_size)",
                          RuntimeWarning, stacklevel=user_stacklevel())
        if not np.all(np.isfinite(self.parameters)):
            raise FloatingPointError("L2HMC training produced non-finite weights")
        return self

    def _transformed(self, ctarget, dynamics=True):
        """``ctarget`` in the dynamics' coordinates z = (x - shift) / scale; a surrogate's
        dynamics (and training) inside the ``wall``."""
        standardized = np.any(self.shift != 0.0) or np.any(self.scale != 1.0)
        wall = self.wall if dynamics and self.surrogate is not None else None
        return TransformedTarget(ctarget, self.shift, self.scale, wall) if standardized \
            else TransformedTarget(ctarget, wall=wall)

    def _initial_distribution(self, mean, sd):
        # N(0, I) in the dynamics' coordinates: N(shift, diag(scale^2)) in x
        default_mean, default_sd = self.shift, self.scale
        if self.exploration is not None:
            default_mean, default_sd = self.exploration["mean"], self.exploration["sd"]
        out = []
        for value, default, name in ((mean, default_mean, "burnin_mean"),
                                     (sd, default_sd, "burnin_sd")):
            value = default if value is None else np.asarray(value, dtype=np.float64)
            if value.shape != (self.dim,) or not np.all(np.isfinite(value)):
                raise ValueError(f"{name} must be {self.dim} finite numbers")
            out.append(value)
        if not np.all(out[1] > 0):
            raise ValueError("burnin_sd must be positive")
        return out

    @classmethod
    def with_surrogate(cls, target, tune=200, rng=None, init=None, progress=True,
                       rns_options=None, **options):
        """Explore a costly ``target`` with exact HMC and fit a random-network surrogate as
        :class:`~rnshmc.RNSHMC` does (one chain), and return an L2HMC sampler whose dynamics
        and training run on that surrogate; :meth:`train` it (no model evaluations), then
        :meth:`sample` (one exact density per iteration).

        Parameters
        ----------
        target : the model
        tune : int
            Exploration iterations (RNS-HMC's ``tune``).
        rng : None, int, SeedSequence or Generator
            The exploration's randomness and (a child stream) the L2HMC weights'.
        init : None or ndarray of shape (dim,)
            The exploration's starting point.
        progress : bool
        rns_options : dict, optional
            Arguments of :class:`~rnshmc.RNSHMC` (the surrogate and the exploration's HMC).
        **options
            Arguments of :class:`L2HMC`. ``standardize`` defaults to the training states'
            mean and standard deviations, ``step_size`` to the exploration's step size in
            those coordinates (times the smallest ratio of its mass matrix's scales to them).

        Returns
        -------
        L2HMC
            With ``surrogate`` set and ``exploration``: a dict of its exact evaluations
            (``n_density_evals``, ``n_gradient_evals``), ``seconds``, the training states'
            ``mean`` and ``sd`` (the default initial distribution of :meth:`train`), the
            ``states`` themselves and the surrogate's ``fit_residual``.
        """
        explore_seed, weights_seed = np.random.default_rng(rng).spawn(2)
        # (one chain, run here: its own surrogate)
        rns = RNSHMC(target, **dict(dict(share_surrogate=False), **(rns_options or {})))
        start = time.perf_counter()
        state = rns.init_states(draws=1, tune=tune, rng=explore_seed, init=init)[0]
        # the exploration, then the fit (training has no iterations)
        rns.run_chain(state, progress=progress, stop_after=state.phases[0][1])
        seconds = time.perf_counter() - start
        surrogate = surrogate_from_state(FitState.of(state).surrogate)
        states = state.outputs[Phase.EXPLORATION]["samples"][rns.exploration.window(state)]
        sd = states.std(axis=0)
        sd = np.where(sd > 0, sd, 1.0)
        options.setdefault("standardize", (states.mean(axis=0), sd))
        if "step_size" not in options:  # the exploration's, in the dynamics' coordinates
            inverse_mass = np.ones(state.dim) if state.inverse_mass is None else state.inverse_mass
            scales = np.sqrt(np.diag(inverse_mass) if inverse_mass.ndim == 2 else inverse_mass)
            unit = np.ones(state.dim) if options["standardize"] is None else options["standardize"][1]
            options["step_size"] = float(state.kernel["step_size"] * np.min(scales / unit))
        sampler = cls(target, fitted_surrogate=surrogate, **options)
        sampler.initialize(weights_seed)
        sampler.exploration = dict(
            n_density_evals=int(state.evals[Phase.EXPLORATION][0]
                                + state.evals[Phase.TRAINING][0]),
            n_gradient_evals=int(state.evals[Phase.EXPLORATION][1]), seconds=seconds,
            mean=states.mean(axis=0), sd=sd, states=states,
            fit_residual=float(surrogate.fit_residual_))
        return sampler

    # ------------------------------------------------------------------------------------------
    # sampling: a burn-in of ``tune`` iterations (default 1000), then ``draws``

    def plan(self, draws, tune, chains, dim):
        self._check_not_collapsed()
        return [[Phase.WARMUP, tune], [Phase.SAMPLING, draws]]

    def _final_training_acceptance(self):
        """The training chains' acceptance over the last hundredth of training (at least its
        last 10 iterations; empty before any)."""
        acceptance = self.history["acceptance"]
        return acceptance[-max(10, len(acceptance) // 100):]

    def _check_not_collapsed(self):
        """Refuse weights whose training chains accepted almost nothing at the end of
        training: they would hand back chains that never move."""
        acceptance = self.history["acceptance"]
        recent = self._final_training_acceptance()
        if recent.size and recent.mean() < COLLAPSED_ACCEPTANCE:
            raise ValueError(
                f"L2HMC: the trained weights accepted {recent.mean():.3f} of the training "
                f"chains' proposals over the last {recent.size} training iterations (at most "
                f"{acceptance.max():.2f} before): chains sampled with them would not move. "
                "Train again with a lower learning_rate or burnin_weight, or standardize "
                "(or initialize() afresh).")

    # the weights and masks and the standardisation are saved as "weights"; a surrogate as
    # its state
    NOT_CHECKPOINTED = ("standardize", "fitted_surrogate")

    def checkpoint_arguments(self):
        self._check_weights()
        if self.surrogate is not None and not isinstance(self.surrogate, Surrogate):
            raise ValueError("L2HMC on a surrogate is checkpointed only with one of rnshmc's "
                             "surrogates (saved as arrays)")
        arguments = super().checkpoint_arguments()
        arguments["weights"] = dict(parameters=self.parameters, masks=self.masks,
                                    shift=self.shift, scale=self.scale)
        if self.surrogate is not None:
            arguments["surrogate_state"] = self.surrogate.get_state()
        if self.exploration is not None:
            arguments["exploration"] = dict(self.exploration)
        return arguments

    @classmethod
    def from_checkpoint_arguments(cls, target, arguments):
        arguments = dict(arguments)
        weights = dict(arguments.pop("weights"))
        surrogate = arguments.pop("surrogate_state", None)
        exploration = arguments.pop("exploration", None)
        if surrogate is not None:
            arguments["fitted_surrogate"] = surrogate_from_state(surrogate)
        if "n_hidden" in arguments:  # (a checkpoint written before the rename)
            arguments["net_width"] = arguments.pop("n_hidden")
        sampler = cls(target, standardize=(weights["shift"], weights["scale"]), **arguments)
        sampler.parameters = np.array(weights["parameters"], dtype=np.float64)
        sampler.masks = np.ascontiguousarray(weights["masks"], dtype=np.float64)
        sampler.exploration = exploration
        return sampler

    def init_states(self, draws=1000, tune=None, chains=1, rng=None, init=None):
        self._check_weights()
        states = super().init_states(draws, tune, chains, rng, init)
        for state in states:  # the weights' fingerprint: a chain continues with its own
            state.parts[WeightsState.KEY] = WeightsState(weights_checksum(self.parameters))
        return states

    def watch_references(self):
        """What the trust watch compares a sampling window with (see ``trust``): the training
        chains' final acceptance on the surrogate, the exploration's moves (scaled by its
        states' variances, in z) after :meth:`with_surrogate`, and the fallback's step size."""
        recent = self._final_training_acceptance()
        fit = FitState(surrogate_acceptance_rate=float(recent.mean()) if recent.size
                       else np.nan, explore_step_size=self._initial_step_size)
        if self.exploration is not None:
            fit.jump_scale, fit.exploration_jump = jump_reference(
                (np.asarray(self.exploration["states"]) - self.shift) / self.scale)
        return fit

    def report(self, result, states):
        result["samples"] = self.shift + self.scale * result["samples"]
        if self.surrogate is not None:  # the learned dynamics' gradients were the surrogate's
            phases = [self.phase(name) for name, _ in states[0].phases]
            counts = np.array([np.sum([p.exact_evals(s) for p in phases], axis=0)
                               for s in states], dtype=np.int64)
            sampling = np.array([self.phase(Phase.SAMPLING).exact_evals(s) for s in states],
                                dtype=np.int64)
            result["n_density_evals"] = counts[:, 0]
            result["n_gradient_evals"] = counts[:, 1]
            result["n_density_evals_sampling"] = sampling[:, 0]
            result["n_gradient_evals_sampling"] = sampling[:, 1]
            result["n_surrogate_gradient_evals"] = np.array(
                [sum(s.evals.get(name, [0, 0])[1] for name, _ in s.phases
                     if name != Phase.SAMPLING)
                 + (sampling_evals(s)[2] if DynamicsState.find(s) is not None
                    else s.evals.get(Phase.SAMPLING, [0, 0])[1]) for s in states],
                dtype=np.int64)
        if self.trust is not None:
            trust_report(result, states)
            warn_about_trust_events(self.name, self.trust, result, exact="exact HMC")
        if self.exploration is not None:  # what the surrogate cost, once for all chains
            result["n_density_evals_explore"] = self.exploration["n_density_evals"]
            result["n_gradient_evals_explore"] = self.exploration["n_gradient_evals"]
        # what training has cost so far (a Hessian-vector product counts as one gradient)
        result["training"] = dict(
            iterations=int(len(self.history["loss"])),
            gradient_equivalents=int(self.training_evals["gradient"]
                                     + self.training_evals["hessian_vector"]),
            seconds=float(self.training_evals["seconds"]),
            on_surrogate=self.surrogate is not None)

    @staticmethod
    def break_even(result, baseline):
        """The effective draws (min bulk ESS) from which an L2HMC run, its training
        included, costs fewer model evaluations than ``baseline`` (e.g. HMC at its best),
        warm-ups included: both costs are overhead + draws x cost per effective draw of the
        sampling phase, in model evaluations (a density, with or without its gradient,
        counts one; a training gradient or Hessian-vector product one). Training on a
        surrogate costs no model evaluation; its exploration does. Also stored in
        ``result["training"]["break_even"]`` (printed by ``result.summary()``).

        Parameters
        ----------
        result : SampleResult
            Of :meth:`sample`.
        baseline : SampleResult
            Of another sampler on the same model.

        Returns
        -------
        float
            0 when L2HMC is never dearer, ``inf`` when it never pays for its training.
        """
        def per_draw_and_overhead(run, extra):
            cost = run["cost"]
            sampling = cost["phases"]["sampling"]["density_evals"]
            return sampling / cost["ess_bulk_min"], cost["density_evals"] - sampling + extra

        training = result["training"]
        extra = 0 if training["on_surrogate"] else training["gradient_equivalents"]
        extra += int(result.get("n_density_evals_explore", 0))
        ours, overhead = per_draw_and_overhead(result, extra)
        theirs, their_overhead = per_draw_and_overhead(baseline, 0)
        if overhead <= their_overhead and ours <= theirs:
            draws = 0.0
        elif ours >= theirs:
            draws = math.inf
        else:
            draws = (overhead - their_overhead) / (theirs - ours)
        training["break_even"] = dict(draws=float(draws), baseline=baseline.sampler)
        return float(draws)

    # ------------------------------------------------------------------------------------------
    # saving the weights

    def save(self, path):
        """Save the weights, masks, Adam state and training history to ``path`` (``.npz``,
        no pickle)."""
        m, v, step = self._adam
        np.savez(path, format=np.array(_FORMAT), dim=self.dim, n_steps=self.n_steps,
                 hidden=self.n_hidden, parameters=self.parameters, masks=self.masks,
                 shift=self.shift, scale=self.scale,
                 adam_m=m, adam_v=v, adam_step=step,
                 training_evals=np.array([self.training_evals["gradient"],
                                          self.training_evals["hessian_vector"],
                                          self.training_evals["seconds"]]),
                 **{f"history_{key}": value for key, value in self.history.items()})

    @classmethod
    def load(cls, path, target, max_energy_error=1000.0, fitted_surrogate=None):
        """An L2HMC sampler of ``target`` with the weights saved by :meth:`save` (and the
        standardisation; a surrogate is not saved with them: pass it again).

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
        sampler = cls(target, n_steps=n_steps, net_width=hidden,
                      max_energy_error=max_energy_error, fitted_surrogate=fitted_surrogate,
                      standardize=(data["shift"], data["scale"]))
        sampler.parameters = parameters.copy()
        sampler.masks = masks
        sampler._adam = (np.array(data["adam_m"], dtype=np.float64),
                         np.array(data["adam_v"], dtype=np.float64), int(data["adam_step"]))
        gradient, hessian_vector, seconds = data["training_evals"]
        sampler.training_evals = {"gradient": int(gradient), "hessian_vector": int(hessian_vector),
                                  "seconds": float(seconds)}
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


def weights_checksum(parameters):
    return float(np.sum(parameters * np.arange(1, parameters.size + 1)))


@dataclasses.dataclass
class WeightsState(PartState):
    """The fingerprint of the weights a chain was started with."""
    KEY = "weights"
    checksum: float


class LearnedPhase(WatchedPhase):
    """A phase of L2HMC's learned leapfrog with ``sampler``'s current weights (nothing
    adapted). The chain runs in z = (x - shift) / scale: its states, kept outputs and
    ChainState too (the sampler's report maps the samples back). With a ``trust`` watch
    (sampling on a surrogate), a poor window hands the rest of the chain to exact HMC (the
    segments of :class:`~rnshmc.samplers.phases.dynamics.WatchedPhase`, without refits: the
    weights were trained on that surrogate)."""

    REFITS = False

    def __init__(self, name, sampler, keep=(), trust=None):
        super().__init__(name, trust)
        self.sampler, self.keep = sampler, tuple(keep)

    def exact(self, state):
        """Whether the chain has fallen back to exact HMC."""
        return self.trust is not None and running_exact(state)

    def trajectory(self, run):
        return self.sampler.n_steps, self.exact(run.state)  # (exact HMC's jittered)

    def make_chain(self, run):
        l2, state = self.sampler, run.state
        if WeightsState.of(state).checksum != weights_checksum(l2.parameters):
            raise ValueError("this chain was started with other L2HMC weights (trained or "
                             "loaded since): continue it with the sampler that started it")
        if self.exact(state):
            return euclidean_chain(l2._transformed(run.target, dynamics=False), state,
                                   l2.max_energy_error)
        if l2.surrogate is None:
            dynamics, test = l2._transformed(run.target), None
        else:
            dynamics = l2._transformed(as_ctarget(l2.surrogate, state.dim))
            test = l2._transformed(run.target, dynamics=False)
        # the integrator reads a copy of the weights: training later changes no running chain
        integrator = AugmentedLeapfrog(state.dim, l2.n_steps, l2.n_hidden, l2.parameters.copy(),
                                       l2.masks)
        chain = Chain(dynamics, test, EuclideanMetric(state.dim), integrator,
                      max_energy_error=l2.max_energy_error)
        chain.step_size = integrator.step_size  # recorded; the integrator uses its own
        return chain

    def begin(self, run, chain):
        state, l2 = run.state, self.sampler
        if state.kernel is None:
            start_where_finite(run, chain, l2.shift, l2.scale)
        else:
            chain.set_state(state.kernel, counters=False)
        if self.trust is not None:  # (kept in the state: a resumed chain has the same)
            state.parts[DynamicsState.KEY] = DynamicsState()
            state.parts[FitState.KEY] = l2.watch_references()

    def exact_evals(self, state):
        if self.sampler.surrogate is None:
            return Phase.exact_evals(self, state)
        if self.trust is None or DynamicsState.find(state) is None:
            return [Phase.exact_evals(self, state)[0], 0, 0]  # (gradients: the surrogate's)
        return super().exact_evals(state)
