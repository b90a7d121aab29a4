"""PGENet: the DPNet that trains a score network by sliced score matching."""
import torch
from torch.func import jvp

from ..nn import DPNet
from ..utils.random import torch_generator
from .projections import randomized_response_projections


class PGENet(DPNet):
    """DPNet whose per-example loss is noise-conditional sliced score matching (SSM-VR).

    For record (x, y): a noise level sigma from ``sigmas``, x~ = x + sigma z, and
    ``n_projections`` Gaussian vectors v. The loss is
    ``w(sigma) * [mean_v v^T (d s / d x~) v + |s|^2 / 2]`` (Song et al. 2019;
    w = sigma^2 as in NCSN unless the module says otherwise). All random draws are made in ``get_train_inputs`` and
    passed in, so the vmap clipper sees a deterministic function per example.
    ``rr_k`` / ``rr_epsilon`` switch on the paper's randomized response on v.
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

    def initialize(self):
        super().initialize()
        # Noise levels, perturbations and projections of the loss: not a mechanism (DP-SGD's
        # guarantee holds for any data-independent randomness of the loss), so random_state seeds them.
        self.draws_ = torch_generator(self.rng_, device=self.device)
        return self

    def initialize_engines(self, sigma, expected_batch_size):
        names = super().initialize_engines(sigma, expected_batch_size)
        # The paper's randomized response is a mechanism: fresh entropy, dropped after the fit.
        self._rr_generator = torch_generator(self._lot_rng, device=self.device)
        return names

    def fit_loop(self, X, y=None, epochs=None, **fit_params):
        try:
            return super().fit_loop(X, y, epochs=epochs, **fit_params)
        finally:
            self.__dict__.pop("_rr_generator", None)

    def get_train_inputs(self, Xi, yi):
        X = torch.as_tensor(Xi, dtype=torch.float32, device=self.device)
        B, d = X.shape
        g = self.draws_
        Y = self._one_hot(yi, B)
        levels = torch.as_tensor(self.sigmas, dtype=torch.float32, device=self.device)
        S = levels[torch.randint(len(levels), (B,), generator=g, device=self.device)]
        Z = torch.randn(B, d, generator=g, device=self.device)
        V = torch.randn(B, self.n_projections, d, generator=g, device=self.device)
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



def harmonic_square_levels(sigma_min, n_levels):
    """sigma_m = sigma_min * (M / m)^2, m = 1..M: with the supplement's step lambda0 * (M / m)^2 the
    leapfrog step stays proportional to the noise level, which is what keeps the dynamics stable."""
    return tuple(sigma_min * (n_levels / m) ** 2 for m in range(1, n_levels + 1))


__all__ = ["PGENet", "harmonic_square_levels"]
