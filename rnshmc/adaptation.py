"""Warm-up adaptation: dual-averaging step size and windowed mass-matrix estimation.

Both follow Stan's warm-up (Hoffman and Gelman 2014; Stan reference manual, "HMC algorithm
parameters"): an initial fast interval adapting only the step size, slow windows doubling in
length in which the (diagonal) posterior variance is estimated and installed as the inverse
mass matrix, and a final fast interval.
"""
import math

import numpy as np

__all__ = ["DualAveraging", "WarmupSchedule", "RunningVariance"]


class DualAveraging:
    """Nesterov dual averaging of log(step size) towards a target acceptance probability.

    Parameters
    ----------
    step_size : float
        Initial step size; the iterates are shrunk towards ``mu = log(10 * step_size)``.
    target_accept : float
        Desired mean Metropolis acceptance probability, in (0, 1).
    gamma, t0, kappa : float
        Stan's defaults 0.05, 10, 0.75.
    """

    def __init__(self, step_size, target_accept=0.8, gamma=0.05, t0=10.0, kappa=0.75):
        if not 0.0 < target_accept < 1.0:
            raise ValueError(f"target_accept must be in (0, 1), got {target_accept}")
        self.target_accept = target_accept
        self.gamma, self.t0, self.kappa = gamma, t0, kappa
        self.restart(step_size)

    def restart(self, step_size):
        """Start again from ``step_size`` (after a mass-matrix update)."""
        self.mu = math.log(10.0 * step_size)
        self.log_step = math.log(step_size)
        self.log_step_bar = 0.0
        self.error_sum = 0.0
        self.count = 0

    def update(self, accept_prob):
        """Feed one transition's acceptance probability; returns the next step size."""
        self.count += 1
        t = self.count
        self.error_sum += self.target_accept - accept_prob
        self.log_step = self.mu - math.sqrt(t) / self.gamma * self.error_sum / (t + self.t0)
        weight = t ** (-self.kappa)
        self.log_step_bar = weight * self.log_step + (1.0 - weight) * self.log_step_bar
        return math.exp(self.log_step)

    @property
    def final_step_size(self):
        """The averaged step size to sample with once warm-up ends."""
        return math.exp(self.log_step_bar) if self.count else math.exp(self.log_step)


class WarmupSchedule:
    """Stan's windowed warm-up schedule for ``n_tune`` iterations.

    Iterations are split into an initial buffer (75), slow windows starting at 25 iterations and
    doubling, and a terminal buffer (50); a window that would leave less than twice its doubled
    size before the terminal buffer is stretched to it. With fewer than 150 iterations the split
    is 15%, 75%, 10%; with fewer than 20 there are no windows (only the step size adapts).
    ``window_end(i)`` is True at the last iteration of a slow window, when the variance estimate
    is installed. This is a port of Stan's ``windowed_adaptation``.
    """

    def __init__(self, n_tune, init_buffer=75, term_buffer=50, base_window=25):
        self.n_tune = n_tune
        self.ends = []
        if n_tune < 20:
            self.slow_start = self.slow_end = n_tune
            self._ends = set()
            return
        if n_tune < init_buffer + term_buffer + base_window:
            init_buffer = int(0.15 * n_tune)
            term_buffer = int(0.1 * n_tune)
            base_window = n_tune - init_buffer - term_buffer
        self.slow_start = init_buffer
        self.slow_end = n_tune - term_buffer
        last = self.slow_end - 1
        size = base_window
        end = init_buffer + size - 1
        self.ends.append(end)
        while end != last:
            size *= 2
            end += size
            if end != last and end + 2 * size >= self.slow_end:
                end = last
            self.ends.append(end)
        self._ends = set(self.ends)

    def in_slow_window(self, i):
        return self.slow_start <= i < self.slow_end

    def window_end(self, i):
        return i in self._ends


class RunningVariance:
    """Welford's running mean and variance of positions, per coordinate."""

    def __init__(self, dim):
        self.dim = dim
        self.reset()

    def reset(self):
        self.count = 0
        self.mean = np.zeros(self.dim)
        self.m2 = np.zeros(self.dim)

    def add(self, x):
        self.count += 1
        delta = x - self.mean
        self.mean += delta / self.count
        self.m2 += delta * (x - self.mean)

    def regularized_variance(self):
        """Stan's shrunk estimate: (n / (n + 5)) var + 1e-3 (5 / (n + 5))."""
        n = self.count
        variance = self.m2 / max(n - 1, 1)
        return (n / (n + 5.0)) * variance + 1e-3 * (5.0 / (n + 5.0))


def initial_step_size(kernel, generator, step_size=1.0, target_accept=0.8, max_doublings=100):
    """Stan's heuristic: double or halve ``step_size`` until one leapfrog step's acceptance
    probability crosses ``target_accept``'s neighbourhood (0.8 by default, as in Stan).
    """
    log_target = math.log(target_accept)

    def log_accept(eps):
        return -kernel.energy_error_of_one_step(generator, eps)

    direction = 1 if log_accept(step_size) > log_target else -1
    for _ in range(max_doublings):
        candidate = step_size * (2.0 ** direction)
        above = log_accept(candidate) > log_target
        if (direction == 1 and not above) or (direction == -1 and above):
            return candidate
        step_size = candidate
    raise RuntimeError("could not find a reasonable initial step size: the posterior may be "
                       "improper or its gradient wrong")
