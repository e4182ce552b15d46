"""The command-line demonstrations: ``rnshmc demo pde --quick`` (the README's main job, in its
smoke-run form) and ``rnshmc demo logistic --quick``."""
import numpy as np
import pytest

import rnshmc
from rnshmc.__main__ import main


def test_demo_pde_quick(tmp_path, capsys):
    assert main(["demo", "pde", "--quick", "--out", str(tmp_path), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "HMC" in out and "RNS-HMC" in out and "PDE solves / min ESS" in out
    for name in ("pde_hmc.npz", "pde_rns_hmc.npz"):
        res = rnshmc.load(tmp_path / name)
        assert res.samples.shape == (1, 400, 20)
        assert np.all(np.isfinite(res.samples))
    table = (tmp_path / "pde_table.txt").read_text()
    assert "RNS-HMC" in table and "speed-up" in table
    pytest.importorskip("matplotlib")
    assert (tmp_path / "pde_marginals.png").stat().st_size > 0
    assert (tmp_path / "pde_log_kappa.png").stat().st_size > 0


def test_demo_pde_reads_the_authors_file(shared_data, tmp_path, capsys):
    path = shared_data / "rnshmc-original" / "ePDE.mat"
    main(["demo", "pde", "--quick", "--data", str(path), "--out", str(tmp_path),
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
