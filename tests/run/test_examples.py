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
