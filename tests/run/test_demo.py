"""The command-line demonstrations: ``rnshmc demo pde --quick`` (the README's main job, in its
smoke-run form) and ``rnshmc demo logistic --quick``."""
import numpy as np
import pytest

import rnshmc
from rnshmc.__main__ import main


def test_demo_pde_quick(tmp_path, capsys):
    """The main job: rnshmc.sample against HMC at its best, solves from the first
    iteration."""
    assert main(["demo", "pde", "--quick", "--out", str(tmp_path), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "rnshmc.sample" in out and "HMC at its best" in out and "PDE solves" in out
    assert "fewer PDE solves than HMC" in out and "--papers" in out
    for name in ("pde_front_door.npz", "pde_hmc.npz"):
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


def test_the_main_job_refuses_the_papers_lengths(tmp_path, capsys):
    err = one_line_error(capsys, ["demo", "pde", "--draws", "50", "--out", str(tmp_path)])
    assert "--papers" in err


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
    from rnshmc.__main__ import build_parser

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
