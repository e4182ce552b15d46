"""The examples that have a quick mode run end to end."""
import importlib.util
from pathlib import Path

import numpy as np
import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def load_example(name):
    if not (EXAMPLES / f"{name}.py").exists():  # (tests run from an installed wheel)
        pytest.skip(f"examples/{name}.py is not beside the tests (a source checkout has it)")
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_l2hmc_toys_quick(tmp_path, capsys):
    toys = load_example("l2hmc_toys")
    panels, traces = toys.main(["--quick", "--energies", "correlated", "rough-authors",
                                "--out", str(tmp_path)])
    assert [title for title, _ in panels][0] == "strongly correlated 2-d Gaussian"
    for _, panel in panels:
        assert set(panel) == {"L2HMC", "HMC eps 0.1", "HMC eps 0.15", "HMC eps 0.2"}
        for rho, per_gradient, accept in panel.values():
            assert rho[0] == 1.0 and np.all(np.abs(rho) <= 1.0 + 1e-12)
            assert per_gradient > 0 and 0.0 <= accept <= 1.0
    assert set(traces) == {"L2HMC", "HMC eps 0.15"}
    printed = capsys.readouterr().out
    assert "mode switches per transition" in printed
    if "wrote" in printed:  # (matplotlib installed)
        assert (tmp_path / "l2hmc_toys.png").stat().st_size > 0


def test_figures_quick(tmp_path, capsys):
    figures = load_example("figures")
    numbers = figures.main(["--quick", "--out", str(tmp_path)])
    assert sorted(numbers) == [1, 2, 3, 4, 5, 6]

    fig1 = numbers[1]
    for name in ("additive RN", "RBF RN", "full GP", "FITC"):
        assert len(fig1["rmse"][name]) == 3
        assert np.all(np.isfinite(fig1["rmse"][name]))
    # the full GP interpolates its points; FITC's five inducing points cannot
    assert all(gp < fitc for gp, fitc in zip(fig1["residual"]["full GP"],
                                             fig1["residual"]["FITC"]))

    fig2 = numbers[2]
    hmc, rns = fig2["hmc_acceptance"], fig2["rns_acceptance"]
    assert 0.0 <= rns <= 1.0 and 0.8 < hmc <= 1.0
    assert hmc >= rns or min(hmc, rns) > 0.8
    assert np.isfinite(fig2["force_error"]) and fig2["n_train"] > 0

    fig3 = numbers[3]
    assert 0.4 < fig3["hmc_acceptance"] < 0.95 and fig3["step_size"] > 0
    for result in fig3["methods"].values():
        runs = result["runs"]  # (runs, N, [fit seconds, acceptance, ESS per second])
        assert runs.shape == (2, 2, 3) and np.all(np.isfinite(runs))
        assert np.all(runs[..., 0] > 0)
    # (with or without the papers' Sigma.mat: some surrogate is of use at the larger N)
    assert max(r["acceptance"][0, -1] for r in fig3["methods"].values()) > 0.1

    for k in (4, 5):
        runs = numbers[k]["runs"]
        assert runs.shape == (2, 2, 2)
        assert np.allclose(numbers[k]["acceptance"], runs.mean(axis=0))
        assert all(0.4 < a < 0.95 for a in numbers[k]["hmc_acceptance"].values())
        assert runs.mean() > 0.2  # the surrogate flow is accepted often enough to be useful

    fig6 = numbers[6]
    assert fig6["indices"] == [0, 10, 20]
    for stats in fig6["stats"].values():
        assert np.all(np.isfinite(stats["mean"])) and np.all(stats["sd"] > 0)
        assert np.all(stats["mcse"] > 0)
    # both samplers target the same posterior: means within Monte Carlo error, alike sds
    assert np.all(np.abs(fig6["z"]) < 5)
    ratio = fig6["stats"]["RNS-HMC"]["sd"] / fig6["stats"]["HMC"]["sd"]
    assert np.all((ratio > 0.5) & (ratio < 2))

    printed = capsys.readouterr().out
    for k in range(1, 7):
        assert f"Fig. {k}:" in printed
    if "wrote" in printed:  # (matplotlib installed)
        for k in range(1, 7):
            assert numbers[k]["png"] == tmp_path / f"figure{k}.png"
            assert (tmp_path / f"figure{k}.png").stat().st_size > 0
