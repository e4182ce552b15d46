"""A plain NumPy No-U-Turn Sampler, line by line after Stan's ``base_nuts`` (multinomial
sampling, the generalized criterion with the checks across merged subtrees), drawing its
random numbers in the same order as the C chain (``_transition.NUTSChain``) so that, fed the
same stream, the two make the same draws: the momentum, then per doubling the direction, the
choices inside the subtree and the choice between the old tree and the new subtree."""
import numpy as np


class ReferenceNUTS:
    """NUTS on ``potential_and_gradient(q) -> (U, grad U)`` with a diagonal inverse mass
    matrix ``inverse_mass`` (a vector)."""

    def __init__(self, potential_and_gradient, inverse_mass, step_size, max_tree_depth=10,
                 max_energy_error=1000.0):
        self.f = potential_and_gradient
        self.inverse_mass = np.asarray(inverse_mass, dtype=np.float64)
        self.step_size, self.max_tree_depth = step_size, max_tree_depth
        self.max_energy_error = max_energy_error

    def leapfrog(self, z, eps):
        q, p, grad, _ = z
        p = p - 0.5 * eps * grad
        q = q + eps * self.inverse_mass * p
        U, grad = self.f(q)
        p = p - 0.5 * eps * grad
        return (q, p, grad, U)

    def log_weight(self, H0, h):
        """A point's log weight in the multinomial draw: H0 - H."""
        return H0 - h

    def hamiltonian(self, z):
        return z[3] + 0.5 * float(np.sum(self.inverse_mass * z[1] ** 2))

    @staticmethod
    def criterion(p_sharp_minus, p_sharp_plus, rho):
        return p_sharp_plus @ rho > 0 and p_sharp_minus @ rho > 0

    def transition(self, q, U, grad, generator):
        """One transition from q (potential U, gradient grad): (q, U, grad, record dict)."""
        p = generator.standard_normal(len(q)) / np.sqrt(self.inverse_mass)
        z = (q, p, grad, U)
        H0 = self.hamiltonian(z)
        self.n_leapfrog, self.sum_metro_prob, self.divergent = 0, 0.0, False
        z_fwd = z_bck = z_sample = z
        sharp = self.inverse_mass * p
        ps_fwd_bck = ps_fwd_fwd = ps_bck_fwd = ps_bck_bck = sharp
        p_fwd_bck = p_fwd_fwd = p_bck_fwd = p_bck_bck = p
        rho = p.copy()
        log_sum_weight = 0.0
        depth, moved = 0, False
        while depth < self.max_tree_depth:
            if generator.random() > 0.5:
                self.z = z_fwd
                rho_bck, p_bck_fwd, ps_bck_fwd = rho, p_fwd_bck, ps_fwd_bck
                valid, z_propose, ps_fwd_bck, ps_fwd_fwd, rho_fwd, p_fwd_bck, p_fwd_fwd, lsw = \
                    self.build_tree(depth, H0, 1.0, generator)
                z_fwd = self.z
            else:
                self.z = z_bck
                rho_fwd, p_fwd_bck, ps_fwd_bck = rho, p_bck_fwd, ps_bck_fwd
                valid, z_propose, ps_bck_fwd, ps_bck_bck, rho_bck, p_bck_fwd, p_bck_bck, lsw = \
                    self.build_tree(depth, H0, -1.0, generator)
                z_bck = self.z
            if not valid:
                break
            depth += 1
            if lsw > log_sum_weight:
                z_sample, moved = z_propose, True
            elif generator.random() < np.exp(lsw - log_sum_weight):
                z_sample, moved = z_propose, True
            log_sum_weight = np.logaddexp(log_sum_weight, lsw)
            rho = rho_bck + rho_fwd
            persist = self.criterion(ps_bck_bck, ps_fwd_fwd, rho)
            persist &= self.criterion(ps_bck_bck, ps_fwd_bck, rho_bck + p_fwd_bck)
            persist &= self.criterion(ps_bck_fwd, ps_fwd_fwd, rho_fwd + p_bck_fwd)
            if not persist:
                break
        record = dict(tree_depth=depth, n_steps=self.n_leapfrog, diverging=self.divergent,
                      accepted=moved, accept_prob=self.sum_metro_prob / self.n_leapfrog,
                      energy=self.hamiltonian(z_sample))
        return z_sample[0], z_sample[3], z_sample[2], record

    def build_tree(self, depth, H0, sign, generator):
        """(valid, proposal, p_sharp_beg, p_sharp_end, rho, p_beg, p_end, log_sum_weight) of
        a subtree of 2^depth steps from self.z, which it moves to the subtree's end."""
        if depth == 0:
            self.z = self.leapfrog(self.z, sign * self.step_size)
            self.n_leapfrog += 1
            h = self.hamiltonian(self.z)
            if np.isnan(h):
                h = np.inf
            if h - H0 > self.max_energy_error:
                self.divergent = True
            self.sum_metro_prob += 1.0 if H0 - h > 0 else np.exp(H0 - h)
            sharp = self.inverse_mass * self.z[1]
            return (not self.divergent, self.z, sharp, sharp, self.z[1].copy(), self.z[1],
                    self.z[1], self.log_weight(H0, h))
        valid, z_propose, ps_beg, ps_init_end, rho_init, p_beg, p_init_end, lsw_init = \
            self.build_tree(depth - 1, H0, sign, generator)
        if not valid:
            return (False,) + (None,) * 7
        valid, z_final, ps_final_beg, ps_end, rho_final, p_final_beg, p_end, lsw_final = \
            self.build_tree(depth - 1, H0, sign, generator)
        if not valid:
            return (False,) + (None,) * 7
        lsw_subtree = np.logaddexp(lsw_init, lsw_final)
        if lsw_final > lsw_subtree:
            z_propose = z_final
        elif generator.random() < np.exp(lsw_final - lsw_subtree):
            z_propose = z_final
        rho_subtree = rho_init + rho_final
        persist = self.criterion(ps_beg, ps_end, rho_subtree)
        persist &= self.criterion(ps_beg, ps_final_beg, rho_init + p_final_beg)
        persist &= self.criterion(ps_init_end, ps_end, rho_final + p_init_end)
        return (persist, z_propose, ps_beg, ps_end, rho_subtree, p_beg, p_end, lsw_subtree)
