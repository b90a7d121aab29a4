"""PGENet: the DPNet that trains a score network by sliced score matching."""
import numpy as np
import torch
from torch.func import jvp

from ..nn import DPNet
from ..utils.random import torch_generator
from .projections import randomized_response_projections


# Divides the separable loss's weights: 4 chosen on development splits (the benchmark's training parts split
# again) of ISLR Default and modeldata credit_data at epsilon 1 (1, 2, 4, 8 tried, 3 seeds each: Default
# TSTR AUC 0.934 / 0.942 / 0.940 / 0.942, 1-way TV 0.105 / 0.062 / 0.047 / 0.048; credit 0.684 / 0.679 /
# 0.688 / 0.688, 1-way TV 0.293 / 0.292 / 0.275 / 0.281); breast cancer's did not tell them apart.
SEPARABLE_SHRINK = 4.0


class PGENet(DPNet):
    """DPNet whose per-example loss is noise-conditional sliced score matching (SSM-VR).

    For record (x, y): a noise level sigma from ``sigmas``, x~ = x + sigma z, and
    ``n_projections`` Gaussian vectors v. The loss is
    ``w(sigma) * [mean_v v^T (d s / d x~) v + |s|^2 / 2]`` (Song et al. 2019;
    w = sigma^2 as in NCSN unless the module says otherwise). All random draws are made in ``get_train_inputs`` and
    passed in, so the vmap clipper sees a deterministic function per example.
    ``rr_k`` / ``rr_epsilon`` switch on the paper's randomized response on v. A module that declares
    ``separable = True`` (``GaussianScore``) is trained on its exact divergence instead of v, with each
    coordinate's term weighted (``_separable_loss``).

    The draws (levels, perturbations, projections) come from the fit's fresh mechanism entropy and are
    dropped when the fit ends. DP-SGD's guarantee holds for loss randomness the adversary cannot see:
    each record then gets an independent draw, whatever its position in the lot. Drawn from a generator
    kept on the net (``random_state``), they were readable from the pickled model and tied to row
    positions: removing one record shifted the draws of every later record of the lot, so that, given
    the draws, one record moved the clipped sum by far more than C.
    """

    def __init__(self, *args, sigmas=(1.0,), n_projections=1, n_classes=0, rr_k=None, rr_epsilon=None,
                 **kwargs):
        kwargs.setdefault("clipping", "vmap")  # the loss differentiates the network: torch.func only
        super().__init__(*args, **kwargs)
        self.sigmas = sigmas
        self.n_projections = n_projections
        self.n_classes = n_classes
        self.rr_k = rr_k
        self.rr_epsilon = rr_epsilon

    def initialize_engines(self, sigma, expected_batch_size):
        names = super().initialize_engines(sigma, expected_batch_size)
        # The paper's randomized response is a mechanism, and the loss's draws are secret: fresh entropy
        # from the fit's mechanism generator, dropped after the fit.
        self._rr_generator = torch_generator(self._lot_rng, device=self.device)
        self._loss_rng = self._lot_rng.spawn(1)[0]
        return names

    def fit_loop(self, X, y=None, epochs=None, **fit_params):
        try:
            return super().fit_loop(X, y, epochs=epochs, **fit_params)
        finally:
            self.__dict__.pop("_rr_generator", None)
            self.__dict__.pop("_loss_rng", None)

    def _draws(self, B, d):
        """Levels (indices), perturbations and projections of a lot of B rows, from the fit's secret stream.

        One child stream per lot and per quantity (numpy, sequential), so the draws of the first B rows
        of a lot are the same whatever follows them: neighbouring data sets share their draws under
        ``insecure_noise_seed`` (tests/test_sensitivity_harness.py).
        """
        cs, cz, cv = self._loss_rng.spawn(1)[0].spawn(3)
        levels = cs.integers(len(self.sigmas), size=B)
        Z = cz.standard_normal((B, d), dtype=np.float32)
        V = cv.standard_normal((B, self.n_projections, d), dtype=np.float32)
        return (torch.as_tensor(levels, device=self.device), torch.from_numpy(Z).to(self.device),
                torch.from_numpy(V).to(self.device))

    def get_train_inputs(self, Xi, yi):
        X = torch.as_tensor(Xi, dtype=torch.float32, device=self.device)
        B, d = X.shape
        Y = self._one_hot(yi, B)
        levels = torch.as_tensor(self.sigmas, dtype=torch.float32, device=self.device)
        index, Z, V = self._draws(B, d)
        S = levels[index]
        if self.rr_k is not None:
            V = randomized_response_projections(V, self.rr_k, self.rr_epsilon, self._rr_generator)
        return X, Y, S, Z, V

    def _one_hot(self, yi, B):
        if self.n_classes == 0:
            return torch.zeros(B, 0, device=self.device)
        y = torch.as_tensor(yi, device=self.device).long()
        return torch.nn.functional.one_hot(y, self.n_classes).float()

    def per_example_loss(self, forward, X, Y, S, Z, V):
        noisy = X + S[:, None] * Z
        if self.rr_k is None and getattr(self.module_, "separable", False):  # the paper's mechanism needs V
            return self._separable_loss(forward(noisy, Y, S, terms=True))

        def score(x):
            return forward(x, Y, S)

        value = score(noisy)
        trace = 0.0
        for p in range(V.shape[1]):
            _, jv = jvp(score, (noisy,), (V[:, p],))
            trace = trace + (V[:, p] * jv).sum(dim=1)
        # sigma^2 balances the levels for networks whose output scales like 1/sigma (NCSN);
        # a module may declare another power (clipping needs comparable gradient norms per level).
        weight = S ** getattr(self.module_, "sigma_weight_power", 2)
        return weight * (trace / V.shape[1] + 0.5 * (value ** 2).sum(dim=1))

    @staticmethod
    def _separable_loss(terms):
        """Score matching for a module whose loss separates by coordinate (``GaussianScore``).

        ``terms = (s, d, a)``: the score, its exact divergence per coordinate ``d_j = ds_j/dx_j`` (the
        expectation of the projections' estimate ``v^T (ds/dx) v``, without its variance) and a positive
        scale ``a_j``. The loss is ``sum_j w_j (s_j^2 / 2 + d_j)`` with ``w_j = a_j^2`` held constant
        (no gradient flows through it). Coordinate j's parameters enter only its own term, so a positive
        constant weight leaves each one's stationary point where it was; it only rescales the gradient.
        For the Gaussian (``s_j = -(x_j - mu_j) / a_j``, ``a_j = var_j + sigma^2``) the weighted
        gradients are ``-(x_j - mu_j)`` in mu_j and ``var_j (1 - (x_j - mu_j)^2 / a_j)`` in log var_j, both
        bounded by ``(x_j - mu_j)^2 + 1``, where the unweighted ones grow like ``1 / a_j^2``: clipped to
        ``max_grad_norm``, those muted the records far from the mean (a minority category) and the
        variance collapsed onto the majority. The weights are divided by ``SEPARABLE_SHRINK`` so that
        fewer records are clipped at ``max_grad_norm=1`` (the same as clipping at 4 with Adam).
        """
        value, divergence, scale = terms
        weight = scale.detach() ** 2 / SEPARABLE_SHRINK
        return (weight * (0.5 * value ** 2 + divergence)).sum(dim=1)



def harmonic_square_levels(sigma_min, n_levels):
    """sigma_m = sigma_min * (M / m)^2, m = 1..M: with the supplement's step lambda0 * (M / m)^2 the
    leapfrog step stays proportional to the noise level, which is what keeps the dynamics stable."""
    return tuple(sigma_min * (n_levels / m) ** 2 for m in range(1, n_levels + 1))


__all__ = ["PGENet", "harmonic_square_levels"]
