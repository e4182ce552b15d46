"""Warm-up adaptation: dual averaging of the step size and the running variance of the
positions (both inside the C loop of ``Chain.run``), Stan's windowed schedule
(rnshmc.adaptation.WarmupSchedule), the shrunk variance estimate, the initial step-size
heuristic, and what the sampler makes of them (target acceptance reached, adapted inverse mass,
short and zero warm-ups)."""
import math
import os
import warnings

import numpy as np
import pytest

from rnshmc import HMC, Target
from rnshmc.adaptation import (WarmupSchedule, initial_step_size, regularized_variance,
                               trajectory_length_for_min_ess,
                               terminal_buffer)

from testkit import gaussian_target, harmonic_target, hmc_sample, make_chain, run_chain, rng_seed

SEEDS = [0, 1, 2]
# more seeds for the statistical tests, in the slow suite (pytest -m slow)
SLOW_SEEDS = [pytest.param(seed, marks=pytest.mark.slow) for seed in range(3, 11)]


# ============================================================================================
# dual averaging


class ReferenceDualAveraging:
    """Dual averaging of the step size as docs/algorithms.md states it (section 1, warm-up),
    written with the H-bar recursion and Stan's constants: the reference the C loop's dual
    averaging is compared against."""

    def __init__(self, eps0, delta, gamma=0.05, t0=10.0, kappa=0.75):
        self.delta, self.gamma, self.t0, self.kappa = delta, gamma, t0, kappa
        self.mu = math.log(10 * eps0)
        self.H_bar, self.log_eps_bar, self.m = 0.0, 0.0, 0
        self.step = eps0

    def update(self, a):
        """Feed one acceptance probability; returns the next step size."""
        self.m += 1
        m, t0 = self.m, self.t0
        self.H_bar = (1 - 1 / (m + t0)) * self.H_bar + (self.delta - a) / (m + t0)
        log_eps = self.mu - math.sqrt(m) / self.gamma * self.H_bar
        eta = m ** -self.kappa
        self.log_eps_bar = eta * log_eps + (1 - eta) * self.log_eps_bar
        self.step = math.exp(log_eps)
        return self.step

    @property
    def final_step_size(self):
        return math.exp(self.log_eps_bar) if self.m else self.step


def test_reference_dual_averaging_finds_the_root_of_a_deterministic_curve():
    """The reference itself: fed a deterministic acceptance curve, it converges to the root."""
    def acceptance(step):            # decreasing in the step size, 0.8 at sqrt(-log 0.8)
        return math.exp(-step ** 2)

    reference = ReferenceDualAveraging(2.0, 0.8)
    for _ in range(3000):
        reference.update(acceptance(reference.step))
    assert reference.final_step_size == pytest.approx(math.sqrt(-math.log(0.8)), rel=0.02)


SDS = np.array([0.5, 1.0, 2.0])


def adapting_chain(eps0, delta, seed=0):
    """A chain on a 3-d Gaussian (sds 0.5, 1, 2) with dual averaging started from eps0 (no
    position or adaptation yet if eps0 is None)."""
    chain = make_chain(gaussian_target(np.zeros(3), np.diag(1 / SDS ** 2)), 3)
    if eps0 is not None:
        chain.set_position(np.random.default_rng(seed).standard_normal(3) * SDS)
        chain.restart_step_size_adaptation(eps0, delta)
    return chain


def replay(records, eps0, delta):
    """The reference fed the recorded acceptance probabilities: the step size it gives after
    each transition, and the reference itself."""
    reference = ReferenceDualAveraging(eps0, delta)
    return np.array([reference.update(a) for a in records["accept_prob"]]), reference


@pytest.mark.parametrize("jitter", [False, True])
def test_dual_averaging_matches_hoffman_gelman_recursion(jitter):
    """The C loop's dual averaging (Chain.run with adapt_step_size=True) == the reference
    recursion replayed on the recorded acceptance probabilities: the step size of every
    transition, the current step size and the averaged final one."""
    eps0, delta = 2.0, 0.8
    chain = adapting_chain(eps0, delta)
    assert chain.step_size == eps0
    out = run_chain(chain, np.random.default_rng(rng_seed(1)), 3000, None, 5, jitter=jitter,
                    adapt_step_size=True)
    accept_prob = out["accept_prob"]
    assert 0.05 < accept_prob.mean() < 0.99 and accept_prob.std() > 0.05  # a real test
    steps, reference = replay(out, eps0, delta)
    assert out["step_size"][0] == eps0
    np.testing.assert_allclose(out["step_size"][1:], steps[:-1], rtol=1e-12)
    assert chain.step_size == pytest.approx(steps[-1], rel=1e-12)
    assert chain.final_step_size == pytest.approx(reference.final_step_size, rel=1e-10)
    # the adapted step size gives the target acceptance on this target (loosely)
    assert abs(accept_prob[1000:].mean() - delta) < 0.1


def test_dual_averaging_restart():
    """restart_step_size_adaptation forgets everything but the new starting point: the next
    run matches a fresh reference started there; without adaptation the step size stays."""
    chain = adapting_chain(2.0, 0.8)
    run_chain(chain, np.random.default_rng(rng_seed(2)), 300, None, 5, adapt_step_size=True)
    chain.restart_step_size_adaptation(0.3, 0.9)
    assert chain.step_size == 0.3
    assert chain.final_step_size == pytest.approx(0.3)
    da = chain.get_state()["dual_averaging"]
    assert da["mu"] == pytest.approx(math.log(3.0))
    assert (da["count"], da["error_sum"], da["log_step_bar"]) == (0, 0.0, 0.0)
    assert da["target_accept"] == 0.9
    out = run_chain(chain, np.random.default_rng(rng_seed(3)), 500, None, 5, adapt_step_size=True)
    steps, reference = replay(out, 0.3, 0.9)
    assert out["step_size"][0] == 0.3
    np.testing.assert_allclose(out["step_size"][1:], steps[:-1], rtol=1e-12)
    assert chain.final_step_size == pytest.approx(reference.final_step_size, rel=1e-10)
    # not adapting: the step size is left as it is
    chain.step_size = 0.2
    out = run_chain(chain, np.random.default_rng(rng_seed(4)), 50, None, 5)
    assert np.all(out["step_size"] == 0.2) and chain.step_size == 0.2
    with pytest.raises(ValueError):
        chain.restart_step_size_adaptation(1.0, 1.0)


def test_adaptation_state_survives_get_state_set_state():
    """A run of 2n adapting (and variance-accumulating) transitions == n, get_state, a new
    chain set_state, n more: the step sizes, records and draws, bit for bit."""
    flags = dict(adapt_step_size=True, accumulate_variance=True)
    whole = adapting_chain(1.5, 0.8)
    first = adapting_chain(1.5, 0.8)
    a = run_chain(whole, np.random.default_rng(rng_seed(5)), 400, None, 4, jitter=True, **flags)
    generator = np.random.default_rng(rng_seed(5))
    b1 = run_chain(first, generator, 200, None, 4, jitter=True, **flags)
    second = adapting_chain(None, None)
    second.set_state(first.get_state())
    b2 = run_chain(second, generator, 200, None, 4, jitter=True, **flags)
    np.testing.assert_array_equal(a["records"], np.concatenate([b1["records"], b2["records"]]))
    np.testing.assert_array_equal(a["samples"], np.concatenate([b1["samples"], b2["samples"]]))
    assert whole.final_step_size == second.final_step_size
    na, va = whole.take_variance()
    nb, vb = second.take_variance()
    assert na == nb == 400
    np.testing.assert_array_equal(va, vb)


# ============================================================================================
# Stan's windowed schedule


def simulate_window_ends(num_warmup, init_buffer, term_buffer, base_window):
    """The last iteration of each metric window of Stan's windowed_adaptation
    (stan/mcmc/windowed_adaptation.hpp) for the given buffers, simulated iteration by
    iteration."""
    size, next_end, ends = base_window, init_buffer + base_window - 1, []
    last = num_warmup - term_buffer - 1
    for counter in range(num_warmup):
        in_window = init_buffer <= counter < num_warmup - term_buffer
        if in_window and counter == next_end:
            ends.append(counter)
            if next_end == last:
                continue
            size *= 2
            next_end = counter + size
            if next_end != last and next_end + 2 * size >= num_warmup - term_buffer:
                next_end = last
    return ends


def stan_window_ends(num_warmup, init_buffer=75, term_buffer=50, base_window=25):
    """Stan's window ends (its own buffers for a short warm-up: 15%, 75%, 10%)."""
    if num_warmup < 20:
        return []                                   # no metric estimation at all
    if init_buffer + base_window + term_buffer > num_warmup:
        init_buffer = int(0.15 * num_warmup)
        term_buffer = int(0.1 * num_warmup)
        base_window = num_warmup - (init_buffer + term_buffer)
    return simulate_window_ends(num_warmup, init_buffer, term_buffer, base_window)


def short_warmup_buffers(num_warmup, init_buffer=75, term_buffer=50):
    """rnshmc's split of a warm-up shorter than init_buffer + base_window + term_buffer: Stan's
    15% initial buffer, a terminal buffer of at least min(term_buffer, num_warmup // 2)
    iterations (Stan's 10% otherwise), the rest one slow window: (init, term, window)."""
    term = max(int(0.1 * num_warmup), min(term_buffer, num_warmup // 2))
    init = int(0.15 * num_warmup)
    return init, term, num_warmup - init - term


def short_window_ends(num_warmup):
    """rnshmc's window ends of a short warm-up: none when the window would be shorter than
    20 iterations, otherwise Stan's simulation with the buffers above."""
    init, term, window = short_warmup_buffers(num_warmup)
    if num_warmup < 20 or window < 20:
        return []
    return simulate_window_ends(num_warmup, init, term, window)


def test_warmup_schedule_for_1000_is_stans():
    s = WarmupSchedule(1000)
    assert (s.slow_start, s.slow_end) == (75, 950)
    assert s.ends == [99, 149, 249, 449, 949]
    starts = [75] + [e + 1 for e in s.ends[:-1]]
    assert [e - b + 1 for b, e in zip(starts, s.ends)] == [25, 50, 100, 200, 500]
    assert [i for i in range(1000) if s.window_end(i)] == s.ends
    assert not s.in_slow_window(74) and s.in_slow_window(75)
    assert s.in_slow_window(949) and not s.in_slow_window(950)
    assert s.ends == stan_window_ends(1000)
    # where the C loop hands back to Python: the adaptation flags change or a window ends
    assert s.boundaries() == [75, 100, 150, 250, 450, 950]


@pytest.mark.parametrize("tune", [20, 21, 50, 100, 149, 150, 200, 201, 300, 500, 999, 1000,
                                  1001, 1500, 2000, 2345, 5000])
def test_warmup_schedule_windows_cover_the_slow_phase(tune):
    """Windows are contiguous, double in length (the last one stretched), start at the end
    of the initial buffer and end exactly where the terminal buffer begins; from 150
    iterations the window ends are Stan's. Below 150 the split is rnshmc's (see
    short_warmup_buffers): no window at all when it would be shorter than 20 iterations."""
    s = WarmupSchedule(tune)
    assert all(s.in_slow_window(i) == (s.slow_start <= i < s.slow_end) for i in range(tune))
    if tune < 150:
        init, term, window = short_warmup_buffers(tune)
        assert s.ends == short_window_ends(tune)
        if window < 20:
            assert (s.slow_start, s.slow_end, s.ends) == (tune, tune, [])
            assert not any(s.window_end(i) or s.in_slow_window(i) for i in range(tune))
            return
        assert (s.slow_start, s.slow_end) == (init, tune - term)
    else:
        assert (s.slow_start, s.slow_end) == (75, tune - 50)
    starts = [s.slow_start] + [e + 1 for e in s.ends[:-1]]
    sizes = [e - b + 1 for b, e in zip(starts, s.ends)]
    assert s.ends[-1] == s.slow_end - 1
    assert all(size > 0 for size in sizes)
    assert all(b >= 2 * a for a, b in zip(sizes[:-2], sizes[1:-1]))
    if tune == 100:
        assert (s.slow_start, s.slow_end, s.ends) == (15, 50, [49])
    if tune >= 150 and not 150 < tune < 200:
        assert s.ends == stan_window_ends(tune)


def test_warmup_schedule_first_window_like_stan():
    assert WarmupSchedule(175).ends == stan_window_ends(175) == [99, 124]


@pytest.mark.parametrize("tune", [2, 5, 10, 19])
def test_no_metric_adaptation_below_20(tune):
    assert WarmupSchedule(tune).ends == []


def test_short_warmup_keeps_a_terminal_buffer_and_no_short_window():
    """Below init_buffer + base_window + term_buffer iterations: the terminal buffer keeps at
    least min(50, tune // 2) iterations, and a slow window is never shorter than 20."""
    for tune in range(1, 150):
        s = WarmupSchedule(tune)
        assert s.ends == short_window_ends(tune), tune
        if s.ends:
            assert tune - s.slow_end >= min(50, tune // 2), tune
            assert s.ends == [s.slow_end - 1], tune          # one window ...
            assert s.slow_end - s.slow_start >= 20, tune     # ... of 20 or more
    # by hand: 53 = 7 + 20 + 26 has a window, 54 = 8 + 19 + 27 none, 55 = 8 + 20 + 27 one
    assert (WarmupSchedule(53).slow_start, WarmupSchedule(53).ends) == (7, [26])
    assert WarmupSchedule(54).ends == []
    assert (WarmupSchedule(55).slow_start, WarmupSchedule(55).ends) == (8, [27])


def test_terminal_buffer():
    """The sampler's terminal buffer: at least 50, a fifth of a long warm-up."""
    assert [terminal_buffer(n) for n in (0, 100, 250, 251, 1000)] == [50, 50, 50, 50, 200]


# ============================================================================================
# the running variance (Welford, in the C loop) and its regularisation


def test_running_variance_and_regularisation():
    """The positions accumulated by Chain.run(accumulate_variance=True), over two runs, have
    the mean and variance NumPy gives for the same draws; take_variance hands them out and
    starts again; regularized_variance is Stan's shrinkage."""
    sd = np.array([1.0, 10.0, 0.01])
    chain = make_chain(gaussian_target(np.full(3, 5.0), np.diag(1 / sd ** 2)), 3, sd ** 2)
    chain.set_position(np.full(3, 5.0) + sd)
    generator = np.random.default_rng(rng_seed(0))
    not_kept = run_chain(chain, generator, 10, 0.7, 4, jitter=True)
    assert chain.get_state()["variance_count"] == 0          # not accumulating
    a = run_chain(chain, generator, 30, 0.7, 4, jitter=True, accumulate_variance=True)
    b = run_chain(chain, generator, 27, 0.7, 4, jitter=True, accumulate_variance=True)
    x = np.concatenate([a["samples"], b["samples"]])
    assert not_kept["accepted"].any() and len(np.unique(x[:, 0])) > 20   # the chain moves
    state = chain.get_state()
    assert state["variance_count"] == 57
    np.testing.assert_allclose(state["variance_mean"], x.mean(0), rtol=1e-13)
    n, variance = chain.take_variance()
    assert n == 57
    np.testing.assert_allclose(variance, x.var(0, ddof=1), rtol=1e-12)
    expected = n / (n + 5) * x.var(0, ddof=1) + 1e-3 * 5 / (n + 5)
    np.testing.assert_allclose(regularized_variance(n, variance), expected, rtol=1e-12)
    # a new accumulation
    state = chain.get_state()
    assert state["variance_count"] == 0 and np.all(state["variance_mean"] == 0)
    n, variance = chain.take_variance()
    assert n == 0 and np.all(variance == 0)


# ============================================================================================
# the initial step size


def test_initial_step_size_heuristic():
    chain = make_chain(harmonic_target(3), 3)
    chain.set_position(np.ones(3))
    step = initial_step_size(chain, np.random.default_rng(rng_seed(0)))
    assert 0.1 < step <= 4.0  # (0.5, 2 or 4 over seeds 0-199: halved or doubled from 1)
    # a flat density never lowers the acceptance: the heuristic gives up
    flat = make_chain(Target(lambda q: 0.0, grad_logp=np.zeros_like, dim=2), 2)
    flat.set_position(np.zeros(2))
    with pytest.raises(RuntimeError, match="step size"):
        initial_step_size(flat, np.random.default_rng(rng_seed(0)))


# ============================================================================================
# the sampler's adaptation


@pytest.mark.parametrize("target_accept", [0.75, 0.8, 0.9])
@pytest.mark.parametrize("jitter", [False, True])
def test_dual_averaging_reaches_target_accept(target_accept, jitter):
    """Fixed (identity) mass, step size adapted over 1000 iterations: the mean acceptance
    probability while sampling is within 0.1 of target_accept, and a higher target gives a
    smaller step."""
    d = 10
    sd = np.geomspace(1.0, 3.0, d)
    target = gaussian_target(np.ones(d), np.diag(1 / sd ** 2))
    results = {}
    for ta in sorted({target_accept, 0.6}):
        results[ta] = hmc_sample(target, draws=1000, tune=1000, chains=2, rng=rng_seed(21),
                                 n_steps=10,
                                 jitter=jitter, target_accept=ta, adapt_mass_matrix=False)
    res = results[target_accept]
    assert abs(res.accept_prob.mean() - target_accept) < 0.1
    assert np.all(np.abs(res.accept_prob.mean(axis=1) - target_accept) < 0.1)
    assert res.step_size.max() < results[0.6].step_size.min()


@pytest.mark.parametrize("tune", [10, 15, 19])
def test_short_tune_gives_a_usable_step_size(tune):
    res = hmc_sample(gaussian_target(np.zeros(5), np.eye(5)), draws=300, tune=tune, chains=4,
                     rng=rng_seed(1))
    assert np.all(res.acceptance_rate > 0.3), res.acceptance_rate


@pytest.mark.parametrize("seed", SEEDS + SLOW_SEEDS)
def test_adapted_inverse_mass_matches_the_variances(seed):
    """Diagonal Gaussian with standard deviations from 0.1 to 10 (100x): after tune=2000 the
    adapted diagonal inverse mass is within 30% of the true variances (the last window has
    1100 draws; the relative sd of a variance estimate is sqrt(2/ESS) ~ 5-10%)."""
    d = 10
    sd = np.geomspace(0.1, 10.0, d)
    res = hmc_sample(gaussian_target(np.arange(d, dtype=float), np.diag(1 / sd ** 2)), draws=200,
                     tune=2000, chains=2, rng=seed)
    assert res.inverse_mass_matrix.shape == (2, d)
    ratio = res.inverse_mass_matrix / sd ** 2
    assert np.all((ratio > 0.7) & (ratio < 1.3)), ratio


def test_tune_zero_without_step_size_warns():
    with pytest.warns(UserWarning, match="tune=0"):
        res = hmc_sample(harmonic_target(2), draws=50, tune=0)
    assert np.isfinite(res.step_size).all()


def test_tune_zero_warning_points_at_the_caller():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        HMC(harmonic_target(2)).sample(10, tune=0, progress=False)   # called from here
    assert any("tune=0" in str(w.message) for w in caught)
    assert {os.path.basename(w.filename) for w in caught} == {os.path.basename(__file__)}


# ----------------------------------------------------------------------------------------------
# the trajectory length for min ESS (RNS-HMC's n_steps="auto")


def test_trajectory_length_closed_form_without_jitter():
    """A unit Gaussian, no jitter, free steps: the smallest L whose rotation l theta reaches
    pi/2 (lag-1 autocorrelation cos(L theta) <= 0: one effective sample per iteration)."""
    for eps in (0.05, 0.1, 0.3):
        theta = math.acos(1 - eps ** 2 / 2)
        L, ess = trajectory_length_for_min_ess(np.eye(1), None, eps, jitter=False, fraction=1.0)
        assert L == math.ceil(math.pi / 2 / theta - 1e-12)
        assert ess == pytest.approx(1.0)


def test_trajectory_length_is_invariant_to_preconditioning():
    """With M^-1 = Sigma every direction is a unit one: the answer of the unit Gaussian."""
    rng = np.random.default_rng(rng_seed(0))
    A = rng.standard_normal((4, 4))
    cov = A @ A.T + 0.5 * np.eye(4)
    for jitter in (False, True):
        assert (trajectory_length_for_min_ess(cov, cov, 0.2, jitter)[0]
                == trajectory_length_for_min_ess(np.eye(1), None, 0.2, jitter)[0])
        # a diagonal M^-1 equal to the variances: the answer of the correlation matrix
        sd = np.sqrt(np.diag(cov))
        assert (trajectory_length_for_min_ess(cov, np.diag(cov), 0.2, jitter)[0]
                == trajectory_length_for_min_ess(cov / np.outer(sd, sd), None, 0.2, jitter)[0])


def test_trajectory_length_is_the_shortest_near_the_best():
    """With jitter the predicted min ESS grows to 1 and stays: the shortest L within the
    fraction of it, and the fraction 1 gives the first L at the best."""
    from rnshmc.adaptation import trajectory_length_for_min_ess as length
    L90, ess90 = length(np.eye(1), None, 0.1, True, fraction=0.9)
    L100, ess100 = length(np.eye(1), None, 0.1, True, fraction=1.0)
    assert L90 < L100 and ess90 >= 0.9 and ess100 == pytest.approx(1.0)
    assert length(np.eye(1), None, 0.1, True, max_steps=L90 - 1, fraction=1.0)[1] < 0.9


def test_trajectory_length_per_step_maximises_ess_per_gradient():
    """Priced per leapfrog step (exact dynamics): the L maximising the predicted min ESS per
    step, checked against the AR(1) closed form of a unit Gaussian (no jitter: ESS(L) =
    tan^2(L theta / 2), capped at 1, per L steps), never longer than the per-iteration
    choice; a bad ``per`` is refused."""
    for eps in (0.05, 0.1, 0.3):
        theta = math.acos(1 - eps ** 2 / 2)
        steps = np.arange(1, 1025)
        closed = np.minimum(np.tan(steps * theta / 2) ** 2, 1.0)
        closed[np.cos(steps * theta) <= 0] = 1.0
        L, ess = trajectory_length_for_min_ess(np.eye(1), None, eps, jitter=False,
                                               fraction=1.0, per="step")
        assert L == int(np.argmax(closed / steps)) + 1
        assert ess == pytest.approx(closed[L - 1])
        for jitter in (False, True):
            assert (trajectory_length_for_min_ess(np.eye(1), None, eps, jitter, per="step")[0]
                    <= trajectory_length_for_min_ess(np.eye(1), None, eps, jitter)[0])
    with pytest.raises(ValueError, match="per must be"):
        trajectory_length_for_min_ess(np.eye(1), None, 0.1, per="gradient")


def test_trajectory_length_with_priced_steps():
    """Surrogate steps at ``step_cost`` exact densities each: the L maximising the predicted
    min ESS per (1 + step_cost L), against the AR(1) closed form of a unit Gaussian (no
    jitter); free steps are the default; a dearer step never gives a longer L, and a very dear
    one gives the per-step choice; a negative or non-finite cost is refused."""
    for eps in (0.05, 0.1, 0.3):
        theta = math.acos(1 - eps ** 2 / 2)
        steps = np.arange(1, 1025)
        closed = np.minimum(np.tan(steps * theta / 2) ** 2, 1.0)
        closed[np.cos(steps * theta) <= 0] = 1.0
        for cost in (0.01, 0.1, 1.0):
            L, ess = trajectory_length_for_min_ess(np.eye(1), None, eps, jitter=False,
                                                   fraction=1.0, step_cost=cost)
            assert L == int(np.argmax(closed / (1 + cost * steps))) + 1
            assert ess == pytest.approx(closed[L - 1])
    # the spectrum of eps omega of the authors' PDE after a 200-iteration warm-up (step size
    # and diagonal mass adapted): with jitter the predicted min ESS creeps towards 1 long after
    # it is near 0.9, where free steps put the 90% threshold; any price ends that creep
    eps_omega = np.array([0.31, 0.34, 0.36, 0.36, 0.38, 0.39, 0.42, 0.42, 0.44, 0.46, 0.47, 0.50,
                          0.51, 0.52, 0.55, 0.57, 0.62, 0.64, 0.71, 0.73])
    cov = np.diag(eps_omega ** -2.0)
    for jitter in (False, True):
        choices = [trajectory_length_for_min_ess(cov, None, 1.0, jitter, step_cost=c)
                   for c in (0.0, 0.001, 0.01, 0.1, 1.0, 1e9)]
        lengths = [L for L, _ in choices]
        assert lengths[0] == trajectory_length_for_min_ess(cov, None, 1.0, jitter)[0]
        assert lengths == sorted(lengths, reverse=True)
        assert lengths[-1] == trajectory_length_for_min_ess(cov, None, 1.0, jitter,
                                                            per="step")[0]
        if jitter:  # a third of the steps at 1% less predicted ESS
            assert lengths[0] >= 3 * lengths[2] and choices[2][1] > 0.99 * choices[0][1] - 0.01
    for bad in (-0.1, np.inf, np.nan):
        with pytest.raises(ValueError, match="step_cost"):
            trajectory_length_for_min_ess(np.eye(1), None, 0.1, step_cost=bad)


@pytest.mark.parametrize("n_steps", [20, 40, 78])
def test_predicted_min_ess_matches_hmc_on_a_gaussian(n_steps):
    """The prediction is what a chain gives: exact HMC (eps = 0.2, jittered L, acceptance
    about 0.99) on a Gaussian with sds 1 and 5, min ESS per iteration within 25% (measured
    0.059, 0.25, 1.0 against predicted 0.059, 0.24, 1.0; 78 is the optimum)."""
    from rnshmc.models import Gaussian
    cov = np.diag([1.0, 25.0])
    L, predicted = trajectory_length_for_min_ess(cov, None, 0.2, True, max_steps=n_steps,
                                                 fraction=1.0)
    assert L == n_steps  # longer is better up to 78 here
    res = HMC(Gaussian(np.zeros(2), cov), step_size=0.2, n_steps=n_steps).sample(
        5000, tune=0, chains=4, rng=n_steps, init=np.zeros(2), progress=False)
    measured = res.ess().min() / 20000
    assert measured == pytest.approx(predicted, rel=0.25), (measured, predicted)


# --------------------------------------------------------------------------------------------
# the metric estimators from draws and gradients (rnshmc.adaptation.fisher_diagonal, _dense)


def gaussian_draws_and_gradients(seed, dim, n, covariance):
    rng = np.random.default_rng(rng_seed(seed))
    mean = rng.standard_normal(dim)
    draws = rng.multivariate_normal(mean, covariance, size=n)
    gradients = -(draws - mean) @ np.linalg.inv(covariance)
    return draws, gradients


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_fisher_diagonal_is_exact_for_a_diagonal_gaussian(seed):
    from rnshmc.adaptation import fisher_diagonal
    variances = np.logspace(-4, 4, 6)
    for n in (3, 10, 200):
        draws, gradients = gaussian_draws_and_gradients(seed, 6, n, np.diag(variances))
        np.testing.assert_allclose(fisher_diagonal(draws, gradients), variances, rtol=1e-8)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_fisher_dense_is_exact_for_any_gaussian_from_more_than_dim_plus_one_draws(seed):
    """S Cov(grad) S = Cov(x) has the covariance as its solution whatever the draws (the
    gradients are a linear map of them): exact from dim + 2 draws, while the draws' own
    covariance (Stan's estimate) is far off."""
    from rnshmc.adaptation import fisher_dense
    dim = 5
    rng = np.random.default_rng(rng_seed(seed))
    A = rng.standard_normal((dim, dim))
    covariance = A @ A.T + 0.01 * np.eye(dim)  # (condition number in the thousands)
    draws, gradients = gaussian_draws_and_gradients(seed, dim, dim + 2, covariance)
    S = fisher_dense(draws, gradients)
    np.testing.assert_allclose(S, covariance, rtol=1e-6, atol=1e-8 * np.abs(covariance).max())
    assert np.abs(np.cov(draws, rowvar=False) - covariance).max() > 1e-3
    np.testing.assert_allclose(S, S.T)


def test_fisher_dense_solves_its_equation_off_the_gaussian_case():
    """For non-Gaussian draws the estimate is the SPD geometric mean: S Cov(g) S = Cov(x)."""
    from rnshmc.adaptation import fisher_dense
    rng = np.random.default_rng(rng_seed(3))
    draws = rng.standard_t(5, size=(400, 3)) @ np.array([[1, 0.5, 0], [0, 1, 0.3], [0, 0, 2]])
    gradients = -draws ** 3 / 10 - draws
    S = fisher_dense(draws, gradients)
    np.testing.assert_allclose(S @ np.cov(gradients, rowvar=False) @ S,
                               np.cov(draws, rowvar=False), rtol=1e-8, atol=1e-10)
    assert np.all(np.linalg.eigvalsh(S) > 0)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_fisher_low_rank_keeping_every_direction_is_the_dense_estimate(seed):
    """With no eigenvalue dropped (cutoff 1) and no regularisation to speak of, the estimate
    on the span of more than dim + 1 draws is the dense one: the covariance of a Gaussian."""
    from rnshmc.adaptation import fisher_low_rank
    dim = 5
    A = np.random.default_rng(rng_seed(seed)).standard_normal((dim, dim))
    covariance = A @ A.T + 0.01 * np.eye(dim)
    draws, gradients = gaussian_draws_and_gradients(seed, dim, dim + 20, covariance)
    metric = fisher_low_rank(draws, gradients, gamma=1e-12, cutoff=1.0)
    assert metric.rank == dim
    np.testing.assert_allclose(metric.dense(), covariance, rtol=1e-6,
                               atol=1e-8 * np.abs(covariance).max())


@pytest.mark.parametrize("seed", [0, 1])
def test_fisher_low_rank_of_a_diagonal_gaussian_is_its_diagonal(seed):
    """The diagonal scaling is exact there, so no direction stands out: rank 0."""
    from rnshmc.adaptation import fisher_low_rank
    variances = np.logspace(-4, 4, 8)
    draws, gradients = gaussian_draws_and_gradients(seed, 8, 30, np.diag(variances))
    metric = fisher_low_rank(draws, gradients)
    assert metric.rank == 0
    np.testing.assert_allclose(metric.dense(), np.diag(variances), rtol=1e-8)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_fisher_low_rank_finds_the_stretched_directions_from_fewer_draws_than_dimensions(seed):
    """A 50-d Gaussian with varied scales and two directions stretched 1000-fold in and out:
    from 20 draws (too few for a dense estimate) the low-rank metric finds both, and the
    preconditioned posterior's condition number falls from ~1e5 (the diagonal's) to ~1e2."""
    from rnshmc.adaptation import fisher_diagonal, fisher_low_rank
    dim = 50
    rng = np.random.default_rng(rng_seed(seed))
    scale = np.exp(rng.standard_normal(dim))
    U = np.linalg.qr(rng.standard_normal((dim, 2)))[0]
    covariance = scale[:, None] * (np.eye(dim) + U @ np.diag([999.0, -0.999]) @ U.T) * scale

    def condition(inverse_mass):  # of the posterior seen through the metric
        root = np.linalg.cholesky(covariance)
        values = np.linalg.eigvalsh(np.linalg.solve(root, np.linalg.solve(root, inverse_mass).T))
        return values.max() / values.min()

    draws, gradients = gaussian_draws_and_gradients(seed, dim, 20, covariance)
    metric = fisher_low_rank(draws, gradients, cutoff=100.0)  # (nutpie's: the two alone)
    assert metric.rank == 2 and metric.vectors.shape == (dim, 2)
    np.testing.assert_allclose(metric.vectors.T @ metric.vectors, np.eye(2), atol=1e-10)
    assert condition(metric.dense()) < 500
    diagonal = condition(np.diag(fisher_diagonal(draws, gradients)))
    assert diagonal > 1e5
    # (the default cutoff, 2, keeps some of the noise too: still a hundredth of it)
    assert condition(fisher_low_rank(draws, gradients).dense()) < diagonal / 100
    assert np.all(np.linalg.eigvalsh(metric.dense()) > 0)


def test_the_estimators_refuse_what_they_cannot_use():
    from rnshmc.adaptation import fisher_dense, fisher_diagonal
    draws = np.random.default_rng(0).standard_normal((3, 4))
    with pytest.raises(ValueError, match="singular"):
        fisher_dense(draws, -draws)            # 3 draws in 4 dimensions
    assert np.all(np.isfinite(fisher_dense(draws, -draws, regularization=1e-3)))
    with pytest.raises(ValueError, match="one shape"):
        fisher_diagonal(draws, draws[:, :2])
    with pytest.raises(ValueError, match="finite"):
        fisher_diagonal(np.full((3, 2), np.nan), np.ones((3, 2)))
    with pytest.raises(ValueError, match="at least 2"):
        fisher_diagonal(draws[:1], draws[:1])
    from rnshmc.adaptation import fisher_low_rank
    with pytest.raises(ValueError, match="gamma"):
        fisher_low_rank(draws, -draws, gamma=0.0)
    with pytest.raises(ValueError, match="cutoff"):
        fisher_low_rank(draws, -draws, cutoff=0.5)
    assert np.all(np.isfinite(fisher_low_rank(draws, -draws).dense()))  # 3 draws, 4 dims
    # a coordinate that never moved: clipped, not NaN or 0
    still = draws.copy()
    still[:, 0] = 1.0
    assert np.all(np.isfinite(fisher_diagonal(still, -draws))) and np.all(
        fisher_diagonal(still, -draws) > 0)
