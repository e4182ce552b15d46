"""Elliptic PDE benchmark: prints ratios measured side by side in one run.

  1. Forward solve on the 30x30 Q1 mesh (assemble + factor + solve for one kappa per element):
     rnshmc (C assembly into band storage, LAPACK dpbtrf/dpbtrs) vs the best plain SciPy
     version (vectorised COO assembly with precomputed index arrays, then scipy.sparse.linalg
     .splu, once with its defaults and once set up for a symmetric positive definite matrix:
     minimum-degree ordering of A^T + A, symmetric mode, no pivoting; the faster one is the
     reference)                                                                target >= 5x
  2. Potential+gradient (forward + one adjoint solve) over potential alone, C path  target <= 1.5
  3. Potential and potential+gradient in microseconds: Q1 30x30, P1 30x30, and the authors'
     mesh (ePDE.mat) when the papers' data are present ($RNSHMC_SHARED_DATA, default the
     repository's ../shared/data).
  4. On the authors' problem with the papers' settings (eps = 0.16, L = 10 jittered, s = 1000,
     ridge 1e-7; 5000 warm-up + 5000 draws), RNS-HMC against the efficient HMC baseline (same
     kernels, gradient cached): min(ESS)/s over HMC's (target >= 4x) and min-ESS per 1000
     exact PDE solves, an adjoint solve counting as one (target >= 500, about 5x HMC's);
     one run per seed, medians over seeds.

Each figure is the median over ``--repeats`` rounds; within a round the competitors run one
after the other (interleaved), each as a block of consecutive calls whose median is taken.
The spread (min..max of the per-round ratio) is printed beside each ratio.

    python benchmarks/bench_pde.py [--repeats 15] [--seeds 0 1 2] [--skip-samplers]
"""
import argparse

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spl

import rnshmc
from _timing import ratio_line, rounds, verdict  # benchmarks/ is on sys.path
from rnshmc import papers
from rnshmc.experiments import compare, format_table
from rnshmc.fem import EllipticSolver
from rnshmc.models import EllipticPDE


class ScipyForward:
    """The same finite-element solve in plain SciPy, everything mesh-dependent precomputed:
    per call one vectorised COO -> CSC conversion of kappa-scaled element matrices over the
    free nodes, the lifting by a bincount, then splu and one solve."""

    def __init__(self, solver, spd=False):
        nodes, elements = solver.nodes, solver.elements
        K = solver._elem_stiffness                       # element matrices for kappa = 1
        n_free = solver.free_nodes.size
        index = np.full(solver.n_nodes, -1)
        index[solver.free_nodes] = np.arange(n_free)
        g = np.zeros(solver.n_nodes)
        g[solver.dirichlet_nodes] = solver.dirichlet_values
        m = elements.shape[1]
        rows = np.repeat(index[elements], m, axis=1).reshape(-1, m, m)
        cols = np.tile(index[elements], (1, m)).reshape(-1, m, m)
        keep = (rows >= 0) & (cols >= 0)
        self.element_of = np.nonzero(keep)[0]
        self.values = K[keep]
        self.rows, self.cols = rows[keep], cols[keep]
        lift = -np.einsum("eab,eb->ea", K, g[elements])   # per element and local row
        free_row = index[elements] >= 0
        self.lift_element = np.nonzero(free_row)[0]
        self.lift_values = lift[free_row]
        self.lift_rows = index[elements][free_row]
        self.n_free = n_free
        # SuperLU options for a symmetric positive definite matrix (faster than its defaults)
        self.options = dict(permc_spec="MMD_AT_PLUS_A", diag_pivot_thresh=0.0,
                            options=dict(SymmetricMode=True)) if spd else {}

    def solve(self, kappa):
        A = sp.csc_matrix((kappa[self.element_of] * self.values, (self.rows, self.cols)),
                          shape=(self.n_free, self.n_free))
        b = np.bincount(self.lift_rows, kappa[self.lift_element] * self.lift_values,
                        minlength=self.n_free)
        return spl.splu(A, **self.options).solve(b)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2],
                        help="seeds of the sampler comparison (section 4)")
    parser.add_argument("--draws", type=int, default=papers.PROTOCOL["draws"])
    parser.add_argument("--tune", type=int, default=papers.PROTOCOL["tune"])
    parser.add_argument("--skip-samplers", action="store_true", help="skip section 4")
    args = parser.parse_args()
    print(f"rnshmc {rnshmc.__version__}")
    try:  # optional: only to report the BLAS in use
        from threadpoolctl import threadpool_info
    except ImportError:
        threadpool_info = list
    for info in threadpool_info():
        print(f"  {info['user_api']:7s} {info['internal_api']:9s} threads={info['num_threads']} "
              f"{info.get('architecture', '')} {info['filepath'].split('/')[-1]}")

    # 1. forward solve, Q1 30x30
    model = EllipticPDE(n=30, element="Q1", rng=0)
    solver, ctarget = model.solver, model._ctarget
    q = model.true_theta
    kappa = np.exp(model.log_coefficient(q))
    references = {"default": ScipyForward(solver), "spd": ScipyForward(solver, spd=True)}
    u = solver.solve(kappa)
    for reference in references.values():
        assert np.allclose(reference.solve(kappa), u[solver.free_nodes], rtol=1e-10, atol=1e-12)
    print(f"\n1. forward solve, 30x30 Q1 ({solver.free_nodes.size} unknowns, half-bandwidth "
          f"{solver.bandwidth}), median of {args.repeats} interleaved rounds")
    t = rounds({
        "solve": lambda: solver.solve(kappa),
        "potential": lambda: ctarget.eval_potential(q),
        "default": lambda: references["default"].solve(kappa),
        "spd": lambda: references["spd"].solve(kappa),
    }, args.repeats, inner=40)
    for name, label in [("solve", "rnshmc EllipticSolver.solve(kappa)"),
                        ("potential", "rnshmc model potential (C: log kappa .. misfit)"),
                        ("default", "SciPy COO assembly + splu (defaults)"),
                        ("spd", "SciPy COO assembly + splu (set up for SPD)")]:
        print(f"  {label:<48s} {1e6 * np.median(t[name]):9.1f} us  (min {1e6 * t[name].min():.1f})")
    best = "default" if np.median(t["default"]) <= np.median(t["spd"]) else "spd"
    ratio_line(f"speed-up of EllipticSolver.solve over SciPy (splu {best})", t[best], t["solve"], 5.0, "higher")
    ratio_line("speed-up of the model's C potential over SciPy solve", t[best], t["potential"])

    # 2-3. potential and potential+gradient
    cases = [("Q1 30x30", model), ("P1 30x30", EllipticPDE(n=30, element="P1", rng=0))]
    authors = papers.authors_pde_path()
    if authors is not None:
        cases.append(("authors' mesh (ePDE.mat)", EllipticPDE.from_mat(authors)))
    else:
        print("\n(the papers' data are absent: the authors' mesh is skipped)")
    print(f"\n2-3. potential vs potential+gradient (C path), median of {args.repeats} interleaved rounds")
    functions = {}
    for label, case in cases:
        point = case.true_theta if case.true_theta is not None else np.zeros(case.dim)
        target = case._ctarget
        functions[(label, "p")] = (lambda t=target, x=point: t.eval_potential(x))
        functions[(label, "pg")] = (lambda t=target, x=point: t.eval_potential_and_gradient(x))
    t = rounds(functions, args.repeats, inner=40)
    for label, case in cases:
        p, pg = t[(label, "p")], t[(label, "pg")]
        print(f"  {label:<26s} dim={case.dim:<3d} elements={case.solver.n_elements:<5d} "
              f"potential {1e6 * np.median(p):7.1f} us   potential+gradient {1e6 * np.median(pg):7.1f} us")
    for label, _ in cases:
        ratio_line(f"potential+gradient / potential, {label}", t[(label, "pg")], t[(label, "p")],
                   1.5 if label == "Q1 30x30" else None)


    if not args.skip_samplers:
        samplers_section(authors, args)


def samplers_section(path, args):
    """4. RNS-HMC against the efficient HMC on the authors' problem, the papers' settings."""
    if path is None:
        print("\n4. skipped: the authors' problem (ePDE.mat) is absent")
        return
    model = EllipticPDE.from_mat(path)
    print(f"\n4. the authors' problem, papers' settings (eps=0.16, L=10 jittered, s=1000, "
          f"ridge=1e-7), {args.tune} warm-up + {args.draws} draws, seeds {args.seeds}")
    speedups, per_1000 = {}, {}
    for seed in args.seeds:
        rows, _ = compare(papers.table1_samplers(model, "pde"), args.draws, args.tune,
                          rng=seed, init=np.zeros(model.dim))
        print(format_table(rows, title=f"seed {seed}", evals_label="PDE solves / min ESS"))
        for row in rows:
            speedups.setdefault(row["method"], []).append(row["speedup"])
            per_1000.setdefault(row["method"], []).append(1000 / row["exact_evals_per_min_ess"])
    print(f"\n  medians over {len(args.seeds)} seeds (each a single run of {args.draws} draws):")
    hmc = np.median(per_1000["HMC"])
    for method in speedups:
        line = (f"  {method:<18s} min(ESS)/s over HMC {np.median(speedups[method]):5.2f}x "
                f"(runs {min(speedups[method]):.2f}..{max(speedups[method]):.2f})")
        if method != "HMC":
            line += verdict(np.median(speedups[method]), 4.0, "higher")
        solves = np.median(per_1000[method])
        line += f";  min ESS per 1000 PDE solves {solves:6.0f} ({solves / hmc:.1f}x HMC's)"
        if method != "HMC":
            line += verdict(solves, 500, "higher")
        print(line)


if __name__ == "__main__":
    main()
