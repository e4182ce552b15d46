"""The command-line demonstrations: ``rnshmc demo pde --quick`` (the README's main job, in its
smoke-run form) and ``rnshmc demo logistic --quick``; what --quick changes, and the command
line's checks of its flags."""
import math

import numpy as np
import pytest

import rnshmc
from rnshmc import demos
from rnshmc.__main__ import build_parser, main


def test_demo_pde_quick(tmp_path, capsys):
    """The main job: rnshmc.sample against HMC at its best and NUTS, solves from the first
    iteration, the ratio against the cheaper of the two."""
    assert main(["demo", "pde", "--quick", "--out", str(tmp_path), "--no-progress"]) == 0
    out = capsys.readouterr().out
    n = demos.QUICK["pde"]["n"]
    assert f"synthetic data on the {n}x{n} Q1 mesh" in out
    assert "rnshmc.sample" in out and "HMC at its best" in out and "PDE solves" in out
    assert "--papers" in out
    assert ("fewer PDE solves than HMC at its best" in out
            or "fewer PDE solves than NUTS" in out)
    for name in ("pde_front_door.npz", "pde_hmc.npz", "pde_nuts.npz"):
        res = rnshmc.load(tmp_path / name)
        assert res.samples.shape[0] == 4 and res.samples.shape[2] == 20
        assert res.stopping["reason"] == "converged" and res.stopping["ess"] >= 400
        assert res.cost["model_evals"] > 0
    assert rnshmc.load(tmp_path / "pde_front_door.npz").choice["sampler"] == "ARNS-HMC"
    table = (tmp_path / "pde_table.txt").read_text()
    assert "rnshmc.sample" in table and "solves/ESS" in table
    pytest.importorskip("matplotlib")
    assert (tmp_path / "pde_marginals.png").stat().st_size > 0
    assert (tmp_path / "pde_log_kappa.png").stat().st_size > 0


def test_demo_pde_papers_quick(tmp_path, capsys):
    assert main(["demo", "pde", "--papers", "--quick", "--out", str(tmp_path),
                 "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "HMC" in out and "RNS-HMC" in out and "PDE solves / min ESS" in out
    for name in ("pde_hmc.npz", "pde_rns_hmc.npz"):
        res = rnshmc.load(tmp_path / name)
        assert res.samples.shape == (1, 400, 20)
        assert np.all(np.isfinite(res.samples))
    table = (tmp_path / "pde_table.txt").read_text()
    assert "RNS-HMC" in table and "speed-up" in table




def test_demo_pde_reads_the_authors_file(shared_data, tmp_path, capsys):
    path = shared_data / "rnshmc-original" / "ePDE.mat"
    main(["demo", "pde", "--papers", "--quick", "--data", str(path), "--out", str(tmp_path),
          "--no-progress"])
    assert "the authors' problem" in capsys.readouterr().out
    assert rnshmc.load(tmp_path / "pde_rns_hmc.npz").samples.shape[-1] == 20


def test_demo_logistic_quick(tmp_path, capsys):
    assert main(["demo", "logistic", "--quick", "--out", str(tmp_path), "--no-progress"]) == 0
    assert "acceptance" in capsys.readouterr().out
    assert rnshmc.load(tmp_path / "logistic_hmc.npz").samples.shape[1] == 300


def test_demo_needs_a_known_command():
    with pytest.raises(SystemExit):
        main(["demo", "nothing"])


def test_version(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.strip() == f"rnshmc {rnshmc.__version__}"


def test_every_option_has_help():
    import argparse

    def parsers(parser):
        yield parser
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for sub in action.choices.values():
                    yield from parsers(sub)

    checked = 0
    for parser in parsers(build_parser()):
        for action in parser._actions:
            if action.option_strings:
                assert action.help and len(action.help) > 10, (parser.prog, action.option_strings)
                checked += 1
    assert checked > 20


def one_line_error(capsys, argv):
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("rnshmc: error: ") and err.count("\n") == 1
    return err


def test_bad_inputs_are_reported_in_one_line_before_sampling(tmp_path, capsys):
    missing = tmp_path / "missing.mat"
    err = one_line_error(capsys, ["demo", "pde", "--quick", "--data", str(missing),
                                  "--out", str(tmp_path / "out")])
    assert "--data" in err and "missing.mat" in err
    garbage = tmp_path / "garbage.mat"
    garbage.write_bytes(b"not a MATLAB file")
    assert "--data" in one_line_error(capsys, ["demo", "pde", "--quick", "--data", str(garbage),
                                               "--out", str(tmp_path / "out")])
    assert not (tmp_path / "out").exists()  # (the file is read before --out is made)
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    for command in ("pde", "logistic"):
        err = one_line_error(capsys, ["demo", command, "--quick", "--out", str(blocker / "sub")])
        assert "--out" in err and "not a writable folder" in err


def test_reruns_do_not_overwrite_unless_asked(tmp_path, capsys):
    args = ["demo", "logistic", "--quick", "--out", str(tmp_path), "--no-progress"]
    assert main(args) == 0
    capsys.readouterr()  # the first run's output
    before = (tmp_path / "logistic_hmc.npz").read_bytes()
    err = one_line_error(capsys, args)
    assert "logistic_hmc.npz" in err and "--overwrite" in err
    assert (tmp_path / "logistic_hmc.npz").read_bytes() == before
    assert main(args + ["--overwrite", "--draws", "20", "--tune", "20"]) == 0
    assert rnshmc.load(tmp_path / "logistic_hmc.npz").samples.shape[1] == 20


def test_quick_does_not_override_given_lengths(tmp_path):
    assert main(["demo", "pde", "--papers", "--quick", "--draws", "50", "--tune", "60",
                 "--out", str(tmp_path), "--no-progress"]) == 0
    assert rnshmc.load(tmp_path / "pde_hmc.npz").samples.shape == (1, 50, 20)


# --------------------------------------------------------------------------------------------
# what --quick runs (demos.settings: the runs' settings, without running them)


def settings(*argv):
    return demos.settings(build_parser().parse_args(["demo", *argv]))


@pytest.mark.parametrize("argv, shorter", [
    (["pde"], ["n", "ess"]),
    (["pde", "--papers"], ["n", "draws", "tune", "n_hidden"]),
    (["logistic"], ["n", "draws", "tune"]),
])
def test_quick_shortens_every_demo(argv, shorter):
    full, quick = settings(*argv), settings(*argv, "--quick")
    for key in shorter:
        assert quick[key] < full[key], key
    assert {k: v for k, v in quick.items() if k not in shorter + ["step_size"]} == \
        {k: v for k, v in full.items() if k not in shorter + ["step_size"]}
    # the values given on the command line win over --quick's (n_hidden has no flag)
    given = [arg for key in shorter if key != "n_hidden" for arg in (f"--{key}", str(full[key]))]
    expected = {**full, **{key: quick[key] for key in ("n_hidden", "step_size") if key in quick}}
    assert settings(*argv, "--quick", *given) == expected


def test_quick_logistic_adapts_the_step_size():
    """The papers' step size is tuned for their 100000 rows: --quick's fewer adapt it."""
    assert settings("logistic")["step_size"] == rnshmc.papers.SETTINGS["simulated"]["step_size"]
    assert settings("logistic", "--quick")["step_size"] is None
    assert settings("logistic", "--quick", "--step-size", "0.03")["step_size"] == 0.03


def test_the_quick_main_job_still_compares_a_surrogate_with_hmc():
    """The quick mesh is one on which rnshmc.sample picks surrogate dynamics (priced from
    operation counts: the same on every machine), and the next smaller one is not: the
    smallest such mesh."""
    from rnshmc.auto import choose_sampler
    run = settings("pde", "--quick")
    assert run["element"] == "Q1"
    for n, picked in ((run["n"], "ARNS-HMC"), (run["n"] - 1, "NUTS")):
        model = rnshmc.models.EllipticPDE(n=n, element=run["element"], rng=0)
        assert choose_sampler(model)[0].name == picked, n


def test_the_help_says_what_quick_runs(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")  # (argparse wraps the help to the terminal)
    main_job, papers_, logistic_ = (demos.QUICK[run] for run in ("pde", "pde --papers", "logistic"))
    for command, phrases in (
            ("pde", [f"{main_job['n']}x{main_job['n']} mesh", f"min ESS {main_job['ess']}",
                     f"{papers_['n']}x{papers_['n']} mesh", f"{papers_['draws']} draws",
                     f"{papers_['tune']} warm-up", f"{papers_['n_hidden']} hidden units"]),
            ("logistic", [f"{logistic_['n']} rows", f"{logistic_['draws']} draws",
                          f"{logistic_['tune']} warm-up", "step size adapted"])):
        with pytest.raises(SystemExit):
            main(["demo", command, "--help"])
        text = " ".join(capsys.readouterr().out.split())
        quick = text.split("--quick ", 1)[1].split("--no-progress")[0]  # (its help)
        for phrase in phrases:
            assert phrase in quick, (command, phrase)


# --------------------------------------------------------------------------------------------
# the flags' checks: argparse's one-line error with the subcommand's usage, before --out


def rejected(capsys, argv, flag):
    """``argv`` exits with code 2 and one error line naming ``flag`` (after the usage of the
    subcommand argv names)."""
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if "error:" in line]
    assert len(errors) == 1 and err.endswith(errors[0] + "\n"), err
    command = "serve" if argv[0] == "serve" else " ".join(argv[:2])
    assert errors[0].startswith(f"rnshmc {command}: error: argument {flag}"), errors[0]
    assert err.startswith(f"usage: rnshmc {command} ")
    return errors[0]


BAD_FLAGS = [
    # (the command line, the flag it names)
    (["pde", "--chains", "0"], "--chains"),
    (["pde", "--chains", "-1"], "--chains"),
    (["pde", "--papers", "--chains", "0"], "--chains"),
    (["pde", "--ess", "0"], "--ess"),
    (["pde", "--ess", "-5"], "--ess"),
    (["pde", "--ess", "1.5"], "--ess"),
    (["pde", "--seed", "-1"], "--seed"),
    (["pde", "--seed", "one"], "--seed"),
    (["pde", "--n", "1"], "--n"),
    (["pde", "--n", "-3"], "--n"),
    (["pde", "--n", str(demos.SMALLEST_MESH["Q1"] - 1)], "--n"),
    (["pde", "--n", str(demos.SMALLEST_MESH["P1"] - 1), "--element", "P1"], "--n"),
    (["pde", "--papers", "--n", "1"], "--n"),
    (["pde", "--papers", "--draws", "3"], "--draws"),
    (["pde", "--papers", "--draws", "0"], "--draws"),
    (["pde", "--papers", "--tune", "1"], "--tune"),
    (["pde", "--papers", "--tune", "-1"], "--tune"),
    # flags the run would not read
    (["pde", "--draws", "50"], "--draws"),
    (["pde", "--tune", "50"], "--tune"),
    (["pde", "--papers", "--ess", "100"], "--ess"),
    (["pde", "--data", "ePDE.mat", "--n", "30"], "--n"),
    (["pde", "--data", "ePDE.mat", "--element", "P1"], "--element"),
    (["logistic", "--n", "0"], "--n"),
    (["logistic", "--dim", "0"], "--dim"),
    (["logistic", "--step-size", "0"], "--step-size"),
    (["logistic", "--step-size", "-0.1"], "--step-size"),
    (["logistic", "--step-size", "nan"], "--step-size"),
    (["logistic", "--step-size", "inf"], "--step-size"),
    (["logistic", "--n-steps", "0"], "--n-steps"),
    (["logistic", "--draws", "3"], "--draws"),
    (["logistic", "--tune", "-1"], "--tune"),
    (["logistic", "--chains", "0"], "--chains"),
    (["logistic", "--seed", "-1"], "--seed"),
]


@pytest.mark.parametrize("argv, flag", BAD_FLAGS, ids=[" ".join(a) for a, _ in BAD_FLAGS])
@pytest.mark.parametrize("quick", [False, True])
def test_every_bad_flag_is_refused_before_out_is_made(tmp_path, capsys, argv, flag, quick):
    out = tmp_path / "out"
    rejected(capsys, ["demo", *argv, *(["--quick"] if quick else []), "--out", str(out)], flag)
    assert not out.exists()


def test_serve_refuses_a_negative_chain(tmp_path, capsys):
    rejected(capsys, ["serve", str(tmp_path / "s.npz"), "--chain", "-1"], "--chain")


def test_the_smallest_values_are_accepted():
    """The ranges' ends are what the code needs, and are accepted: every element's smallest
    mesh builds its model and one less does not; ESS and R-hat need 4 draws per chain;
    RNS-HMC's exploration 2 iterations."""
    from rnshmc.models import Gaussian
    for element, n in demos.SMALLEST_MESH.items():
        assert settings("pde", "--n", str(n), "--element", element)["n"] == n
        assert demos.argument_error(build_parser().parse_args(
            ["demo", "pde", "--n", str(n), "--element", element])) is None
        model = rnshmc.models.EllipticPDE(n=n, element=element, rng=0)
        assert model.dim == demos.KL_MODES
        with pytest.raises(ValueError):
            rnshmc.models.EllipticPDE(n=n - 1, element=element, rng=0)
    draws = np.random.default_rng(0).standard_normal((1, 4, 2))  # (what the tables print)
    for diagnostic in (rnshmc.diagnostics.ess, rnshmc.diagnostics.rhat):
        assert np.all(np.isfinite(diagnostic(draws)))
        with pytest.raises(ValueError, match="4 draws"):
            diagnostic(draws[:, :3])
    target = Gaussian(np.zeros(2), np.eye(2))
    with pytest.raises(ValueError, match="tune"):
        rnshmc.RNSHMC(target, n_hidden=10).init_states(draws=4, tune=1)
    rnshmc.RNSHMC(target, n_hidden=10).init_states(draws=4, tune=2)
    run = settings("pde", "--papers", "--draws", "4", "--tune", "2", "--chains", "1",
                   "--seed", "0")
    assert (run["draws"], run["tune"], run["chains"], run["seed"]) == (4, 2, 1, 0)
    assert settings("pde", "--ess", "1", "--chains", "1")["ess"] == 1
    assert settings("logistic", "--tune", "0", "--n", "1", "--dim", "1")["tune"] == 0
    assert math.isclose(settings("logistic", "--step-size", "1e-3")["step_size"], 1e-3)


@pytest.mark.parametrize("command", ["pde", "logistic"])
def test_an_unknown_flag_shows_the_subcommands_usage(tmp_path, capsys, command):
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as exit_:
        main(["demo", command, "--fast", "--out", str(out)])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"usage: rnshmc demo {command} [-h]") and "--quick" in err
    assert err.splitlines()[-1] == f"rnshmc demo {command}: error: unrecognized arguments: --fast"
    assert not out.exists()
