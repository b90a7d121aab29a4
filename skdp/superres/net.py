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

from skorch.callbacks import PassthroughScoring

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

    def get_default_callbacks(self):
        callbacks = list(super().get_default_callbacks())
        # Epoch means of the discriminator's batch losses, shown in the log beside train_loss.
        callbacks.insert(len(callbacks) - 1, ("discriminator_loss",
                                              PassthroughScoring("discriminator_loss", on_train=True)))
        return callbacks

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

    def train_step(self, batch, **fit_params):
        self._set_training(True)
        lr, hr = self.get_train_inputs(*batch)
        d_loss = None
        gan = self.in_gan_phase()
        for group in self.optimizer_.param_groups:  # Ledig et al. lower the rate for the GAN phase
            group["lr"] = self.gan_lr if gan and self.gan_lr is not None else self.lr
        if gan:
            with torch.no_grad():
                fake = self.module_.generator(lr)
            self._zero_grad_optimizer(set_to_none=True)
            d_losses, _ = self.discriminator_engine_.private_gradients(self.discriminator_loss, (hr, fake))
            self.optimizer_.step()
            d_loss = d_losses.mean() if len(d_losses) else torch.zeros(())
            self.engine_.noise_multiplier = self.gan_noise_multiplier_
            loss_fn = self.generator_loss
        else:
            self.engine_.noise_multiplier = self.noise_multiplier_
            loss_fn = self.per_example_loss
        self._zero_grad_optimizer(set_to_none=True)
        losses, _ = self.engine_.private_gradients(loss_fn, (lr, hr))
        self.optimizer_.step()
        self.accountant_.step(self.noise_multiplier_, self.sample_rate_)
        # NaN while pre-training keeps the column (and its header) in the log from the first epoch.
        self.history.record_batch("discriminator_loss", math.nan if d_loss is None else float(d_loss))
        return {"loss": losses.mean() if len(losses) else torch.zeros(()), "y_pred": None}
