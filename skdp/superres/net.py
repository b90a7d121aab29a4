"""SRGANNet: the DPNet that trains SRGAN's generator and discriminator on the shared DP-SGD loop.

``X`` are low-resolution images, ``y`` their high-resolution originals, both
``(n, C, H, W)``. The first ``pretrain_epochs`` epochs train the generator on
the content loss alone (SRResNet); the rest alternate, on each lot, one
discriminator step and one generator step (content + ``adversarial_weight`` x
the non-saturating adversarial loss).

Privacy: each lot is one Poisson-subsampled Gaussian mechanism of multiplier
``sigma``. In the GAN phase two clipped gradients (discriminator, generator) are
released from the same lot, each with noise ``sigma * sqrt(2)``: the adaptive
composition of two Gaussian mechanisms of sensitivity C is exactly one
Gaussian of sensitivity ``sqrt(2) C``, so the accountant records one step of
``sigma`` per lot, whatever the phase.
"""
import copy
import math

import torch
import torch.nn.functional as F

from ..nn import DPNet


def pixel_mse(sr, hr):
    """Per-example mean squared error over pixels."""
    return (sr - hr).pow(2).flatten(1).mean(1)


class FrozenFeatures:
    """A frozen copy of a feature extractor for the perceptual loss.

    Not an ``nn.Module`` itself, so that skorch does not take it for a trainable component; the
    caller's module is left as given.
    """

    def __init__(self, module, device="cpu"):
        self.module = copy.deepcopy(module).to(device).eval().requires_grad_(False)

    def __call__(self, x):
        return self.module(x)


class SRGANNet(DPNet):
    """DPNet over an ``SRGAN`` module (``.generator``, ``.discriminator``).

    ``feature_extractor``: None (pixel MSE) or a callable such as ``FrozenFeatures``.
    """

    def __init__(self, *args, pretrain_epochs=10, adversarial_weight=1e-3, feature_extractor=None, gan_lr=None,
                 **kwargs):
        kwargs.setdefault("criterion", torch.nn.MSELoss)
        kwargs.setdefault("optimizer", torch.optim.Adam)
        super().__init__(*args, **kwargs)
        self.pretrain_epochs = pretrain_epochs
        self.adversarial_weight = adversarial_weight
        self.feature_extractor = feature_extractor
        self.gan_lr = gan_lr

    def initialize_engines(self, sigma, expected_batch_size):
        gan = self.module_
        private = not (sigma == 0 and math.isinf(self.max_grad_norm))
        self.engine_ = self.make_engine(gan.generator, sigma, expected_batch_size)
        # The discriminator sees a real and a fake image per example (two calls): torch.func only.
        self.discriminator_engine_ = self.make_engine(
            gan.discriminator, sigma * math.sqrt(2), expected_batch_size, clipping="vmap" if private else None)
        self.gan_noise_multiplier_ = sigma * math.sqrt(2)
        return ["engine_", "discriminator_engine_"]

    def get_train_inputs(self, Xi, yi):
        lr = torch.as_tensor(Xi, dtype=torch.float32, device=self.device)
        hr = torch.as_tensor(yi, dtype=torch.float32, device=self.device)
        return lr, hr

    # ---- losses (one value per example) -------------------------------------------------
    def content_loss(self, sr, hr):
        if self.feature_extractor is None:
            return pixel_mse(sr, hr)
        return pixel_mse(self.feature_extractor(sr), self.feature_extractor(hr))

    def generator_loss(self, forward, lr, hr, adversarial=True):
        sr = forward(lr)
        loss = self.content_loss(sr, hr)
        if adversarial:
            # Non-saturating form of Ledig et al.: -log D(G(lr)).
            loss = loss + self.adversarial_weight * F.softplus(-self.module_.discriminator(sr))
        return loss

    @staticmethod
    def discriminator_loss(forward, hr, fake):
        # -log D(hr) - log(1 - D(fake)) in logits.
        return F.softplus(-forward(hr)) + F.softplus(forward(fake))

    def per_example_loss(self, forward, lr, hr):
        return self.generator_loss(forward, lr, hr, adversarial=False)

    def get_loss(self, y_pred, y_true, X=None, training=False):
        return pixel_mse(y_pred, torch.as_tensor(y_true, device=self.device)).mean()

    # ---- one lot ------------------------------------------------------------------------
    def in_gan_phase(self):
        return len(self.history) > self.pretrain_epochs  # history has a row per started epoch

    def update_on_lot(self, lot):
        """GAN phase: a discriminator step then a generator step, each released with ``sigma * sqrt(2)``."""
        lr, hr = lot
        gan = self.in_gan_phase()
        for group in self.optimizer_.param_groups:  # Ledig et al. lower the rate for the GAN phase
            group["lr"] = self.gan_lr if gan and self.gan_lr is not None else self.lr
        if not gan:
            self.engine_.noise_multiplier = self.noise_multiplier_
            return self.private_step(self.engine_, self.per_example_loss, lot)
        with torch.no_grad():
            fake = self.module_.generator(lr)
        d_losses = self.private_step(self.discriminator_engine_, self.discriminator_loss, (hr, fake))
        if len(d_losses):
            self.log_private("discriminator_loss", d_losses.mean().item(), len(d_losses))
        self.engine_.noise_multiplier = self.gan_noise_multiplier_
        return self.private_step(self.engine_, self.generator_loss, lot)
