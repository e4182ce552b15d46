"""rnshmc.papers: every problem's settings build its model and Table 1's samplers, the demo
runs with the table's settings, the RMHMC row's start, the L2HMC toy energies, Fig. 7's
training points (that no module below it imports it: tests/run/test_layers.py). Tests that need the papers' data
(../shared/data beside the checkout, or $RNSHMC_SHARED_DATA) skip without it."""
import numpy as np
import pytest

import rnshmc
from rnshmc import demos, papers
from rnshmc.__main__ import build_parser, main
from rnshmc.experiments import find_mode
from testkit import correlated_gaussian, rng_seed

ROWS = ["HMC", "RMHMC", "RNS-HMC (papers)", "RNS-HMC (rnshmc)", "RNS-HMC (rnshmc, DA)",
        "RNS-RMHMC (papers)", "RNS-RMHMC (rnshmc)"]


@pytest.fixture(scope="module")
def bank():
    return papers.load_logistic("bank")


def test_every_problem_has_every_setting():
    keys = set(papers.SETTINGS["pde"])
    assert set(papers.SETTINGS) == set(papers.PROBLEMS) == set(papers.TABLE1)
    for problem, settings in papers.SETTINGS.items():
        assert set(settings) == keys, problem
        assert settings["rmhmc_start"] in ("mode", "zero")
        assert set(papers.TABLE1[problem]) == {"HMC", "RMHMC", "RNS-HMC", "RNS-RMHMC"}
    assert papers.PROTOCOL["n_train"] == 0.8 * papers.PROTOCOL["tune"]


@pytest.mark.parametrize("problem", papers.PROBLEMS)
def test_every_problem_builds_its_model_and_table_rows(problem):
    model = papers.load_model(problem)
    s = papers.SETTINGS[problem]
    samplers = papers.table1_samplers(model, problem, methods=papers.TABLE1_METHODS[::-1],
                                      delayed=True, fixed_length=True)
    fixed = f"RNS-HMC (rnshmc, L={s['n_steps']})"
    assert list(samplers) == ROWS[:5] + [fixed] + ROWS[5:]  # the table's order
    hmc, rmhmc = samplers["HMC"].leapfrog, samplers["RMHMC"].leapfrog
    assert (hmc.step_size, hmc.n_steps, hmc.jitter) == (s["step_size"], s["n_steps"], True)
    assert (rmhmc.step_size, rmhmc.n_steps, rmhmc.jitter) == (s["rm_step_size"],
                                                              s["rm_n_steps"], False)
    for name in ROWS[2:5] + [fixed]:
        rns = samplers[name]  # explores and samples at the step size; explores at the L
        assert (rns.leapfrog.step_size, rns.sampling_step_size, rns.leapfrog.n_steps,
                rns.hidden_units(model.dim), rns.surrogate_settings.options["ridge"]) == (
            s["step_size"], s["step_size"], s["n_steps"], s["n_hidden"], s["ridge"]), name
    papers_row = samplers["RNS-HMC (papers)"]
    assert not papers_row.surrogate_settings.options["whiten"]
    assert papers_row.surrogate_settings.gradient_weight == 0.0
    assert papers_row.exploration.training_data == "states" and papers_row.trust is None
    assert papers_row.kernel.n_steps == s["n_steps"] == samplers[fixed].kernel.n_steps
    assert samplers["RNS-HMC (rnshmc)"].kernel.n_steps == "auto"
    assert samplers["RNS-HMC (rnshmc, DA)"].delayed_acceptance
    for name in ROWS[5:]:
        rns_rm = samplers[name]  # explores with the HMC settings
        explore, sampling = rns_rm.leapfrog, rns_rm.sampling_leapfrog
        assert (explore.step_size, explore.n_steps, explore.jitter, sampling.step_size,
                sampling.n_steps, sampling.jitter, rns_rm.fit.settings.hidden_units(model.dim),
                rns_rm.fit.settings.options["ridge"], rns_rm.metric) == (
            s["step_size"], s["n_steps"], True, s["rm_step_size"], s["rm_n_steps"], False,
            s["n_hidden"], s["ridge"], s["surrogate_metric"]), name
    assert not samplers["RNS-RMHMC (papers)"].fit.settings.options["whiten"]
    # the default rows are HMC and RNS-HMC
    assert list(papers.table1_samplers(model, problem)) == ROWS[:1] + ROWS[2:4]


def test_unknown_names_are_refused(bank):
    with pytest.raises(ValueError, match="problem must be one of"):
        papers.table1_samplers(bank, "adult")
    with pytest.raises(ValueError, match="problem must be one of"):
        papers.load_logistic("pde")
    with pytest.raises(ValueError, match="variant"):
        papers.rns_hmc(bank, "bank", variant="authors")
    with pytest.raises(ValueError, match="start"):
        papers.rmhmc_row_settings(bank, "bank", {"RMHMC": None}, start="origin")


def test_settings_summary():
    assert papers.settings_summary("bank") == (
        "HMC/RNS-HMC eps=0.012, L=45 jittered; RMHMC/RNS-RMHMC eps=0.4, L=6 fixed; "
        "s=1000, ridge=1e-07")


def test_rmhmc_row_settings_start_at_the_mode(bank):
    lines = []
    samplers = papers.table1_samplers(bank, "bank", methods=("hmc", "rmhmc"))
    settings = papers.rmhmc_row_settings(bank, "bank", samplers, draws=10, tune=5,
                                         out=lines.append)
    assert set(settings) == {"RMHMC"} and set(settings["RMHMC"]) == {"draws", "tune", "init"}
    assert (settings["RMHMC"]["draws"], settings["RMHMC"]["tune"]) == (10, 5)
    # Newton's method with the Fisher metric, RMHMC's metric on a logistic regression
    np.testing.assert_array_equal(settings["RMHMC"]["init"],
                                  find_mode(bank, bank.fisher_metric)[0])
    assert len(lines) == 1 and "Newton with the Fisher metric" in lines[0]
    assert papers.rmhmc_row_settings(bank, "bank", samplers, start="zero") == {"RMHMC": {}}
    assert papers.rmhmc_row_settings(bank, "bank", {"HMC": samplers["HMC"]}) == {}


def test_load_pde_without_the_papers_data_is_the_synthetic_problem(tmp_path, monkeypatch):
    monkeypatch.setenv("RNSHMC_SHARED_DATA", str(tmp_path))
    assert papers.authors_pde_path() is None
    model, description = papers.load_pde()
    assert description == "synthetic Q1 30x30" and model.dim == 20
    # the data were simulated from true_theta: the posterior favours it over a point far out
    truth = np.asarray(model.true_theta)
    assert truth.shape == (20,) and np.all(np.isfinite(truth))
    assert model.log_density(truth) > model.log_density(truth + 3.0)


def test_load_pde_finds_the_authors_problem(shared_data, monkeypatch):
    monkeypatch.setenv("RNSHMC_SHARED_DATA", str(shared_data))
    path = papers.authors_pde_path()
    assert path == shared_data / "rnshmc-original" / "ePDE.mat"
    model, description = papers.load_pde()
    assert description == f"the authors' problem ({path})" and model.dim == 20


def test_the_pde_demo_runs_the_tables_settings():
    model = rnshmc.models.EllipticPDE(n=12, rng=rng_seed(0))
    table = papers.table1_samplers(model, "pde")
    for quick, n_hidden in ((False, papers.SETTINGS["pde"]["n_hidden"]), (True, 200)):
        demo = demos.pde_samplers(model, quick)
        assert list(demo) == ["HMC", "RNS-HMC"]
        for mine, theirs in ((demo["HMC"], table["HMC"]),
                             (demo["RNS-HMC"], table["RNS-HMC (rnshmc)"])):
            assert type(mine) is type(theirs)
            settings = [{k: v for k, v in sampler.checkpoint_arguments().items()
                         if k != "n_hidden"} for sampler in (mine, theirs)]
            assert settings[0] == settings[1]
        assert demo["RNS-HMC"].hidden_units(model.dim) == n_hidden


@pytest.mark.filterwarnings("ignore::rnshmc.diagnostics.SamplingWarning")  # 10 draws
def test_the_logistic_demo_runs_the_tables_settings(tmp_path, capsys):
    args = build_parser().parse_args(["demo", "logistic"])
    s = papers.SETTINGS["simulated"]
    assert (args.dim, args.n_steps) == (papers.SIMULATED_DATA["dim"], s["n_steps"])
    # without --quick the step size is the papers' (a small N only to keep the test short)
    assert main(["demo", "logistic", "--n", "400", "--dim", "5", "--draws", "10", "--tune", "0",
                 "--out", str(tmp_path), "--no-progress"]) == 0
    assert f"HMC (eps={s['step_size']}, L={s['n_steps']} jittered)" in capsys.readouterr().out


@pytest.mark.filterwarnings("ignore::rnshmc.diagnostics.SamplingWarning")  # 20 draws
@pytest.mark.parametrize("key", list(papers.L2HMC_TARGETS) + ["mixture"])
def test_l2hmc_toy_energies_build(key):
    make = (papers.L2HMC_MIXTURE["model"] if key == "mixture"
            else papers.L2HMC_TARGETS[key][1])
    model = make()
    sampler = papers.l2hmc(model).initialize(rng_seed(0))
    assert sampler.n_steps == papers.L2HMC_SETTINGS["n_steps"]
    result = sampler.sample(20, tune=0, rng=rng_seed(0), progress=False)
    assert result.samples.shape == (4, 20, model.dim) and np.all(np.isfinite(result.samples))


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.filterwarnings("ignore::UserWarning")
def test_training_points_count_the_fit_in_use():
    model, _, _ = correlated_gaussian()
    options = papers.merged(papers.PAPERS_ALGORITHM, explore=dict(n_steps=8),
                            surrogate=dict(n_train=60))
    res = rnshmc.ARNSHMC(model, n_hidden=15, step_size=0.3, **options).sample(
        300, tune=100, chains=2, rng=rng_seed(0), progress=False)
    points = papers.training_points(res)
    assert points.shape == res.online_added.shape == (2, 300)
    first_fit = res.n_train - res.n_online_points
    np.testing.assert_array_equal(points[:, 0], first_fit)
    assert np.all(np.diff(points, axis=1) >= 0) and np.all(points[:, -1] <= res.n_train)
    assert np.all(points[:, -1] > first_fit)  # the online points were installed
