"""Timing helpers shared by the benchmark scripts: interleaved rounds and ratio lines.

Each figure is the median over rounds; within a round the competitors run one after the other
(interleaved), each as a block of consecutive calls whose median is taken, so ratios of
medians compare like with like on a noisy machine.
"""
import time

import numpy as np


def timed(function, inner):
    """Median seconds per call over ``inner`` consecutive calls, after one untimed call (so
    thread pools that another competitor left spinning or asleep are back in steady state)."""
    function()
    times = []
    for _ in range(inner):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def rounds(functions, repeats, inner):
    """{name: array of per-round seconds per call}, competitors interleaved within each round."""
    times = {name: [] for name in functions}
    for _ in range(repeats):
        for name, f in functions.items():
            times[name].append(timed(f, inner))
    return {name: np.array(t) for name, t in times.items()}


def verdict(value, target, better):
    if target is None:
        return ""
    ok = value <= target if better == "lower" else value >= target
    return f"  target {'<=' if better == 'lower' else '>='} {target}: {'met' if ok else 'MISSED'}"


def ratio_line(label, num, den, target=None, better="lower"):
    """Print median(num)/median(den) with the spread of the per-round ratios and the verdict."""
    per_round = num / den
    median = np.median(num) / np.median(den)
    print(f"  {label:<58s} {median:6.2f}x  (per-round {per_round.min():.2f}..{per_round.max():.2f})"
          f"{verdict(median, target, better)}")
