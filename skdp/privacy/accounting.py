"""Accounting for the Poisson-subsampled Gaussian mechanism.

The formulas are Opacus's (``opacus.accountants``): RDP (Mironov et al.) by
default, PRV (Gopi et al.) on request. We never re-derive them here; this
module only keeps the history of a fit and answers "how much so far?".
See ``doc/accounting.md`` for why Opacus's accountants were chosen.
"""
import math
import warnings

ACCOUNTINGS = ("rdp", "prv")

# Opacus's default RDP orders stop at 63, which cannot certify epsilon below ~0.2 at
# delta=1e-5. Adding larger orders can only lower the bound (it is a minimum over orders).
RDP_ORDERS = ([1 + x / 10.0 for x in range(1, 100)] + list(range(11, 64))
              + [64, 80, 96, 128, 160, 192, 256, 320, 384, 512, 768, 1024, 2048, 4096])


def _opacus_accountant(accounting):
    # Imported lazily: opacus pulls in a lot and most of skdp never needs it.
    from opacus.accountants import PRVAccountant, RDPAccountant

    if accounting == "rdp":
        return RDPAccountant()
    if accounting == "prv":
        return PRVAccountant()
    raise ValueError(f"accounting must be one of {ACCOUNTINGS}, got {accounting!r}.")


class PrivacyAccountant:
    """History of (noise multiplier, sample rate, steps) events of one training run.

    Parameters
    ----------
    accounting : {"rdp", "prv"}, default="rdp"
        RDP gives a certified upper bound at a small cost; PRV is tighter
        (about 8-15% smaller epsilon) and slower.

    Examples
    --------
    >>> acc = PrivacyAccountant("rdp")
    >>> acc.step(noise_multiplier=1.5, sample_rate=0.04, n_steps=2250)
    >>> round(acc.get_epsilon(delta=1e-5), 4)
    7.3291
    """

    def __init__(self, accounting="rdp"):
        if accounting not in ACCOUNTINGS:
            raise ValueError(f"accounting must be one of {ACCOUNTINGS}, got {accounting!r}.")
        self.accounting = accounting
        self.history = []

    def step(self, noise_multiplier, sample_rate, n_steps=1):
        """Record ``n_steps`` releases of the subsampled Gaussian mechanism."""
        if n_steps <= 0:
            return
        last = self.history[-1] if self.history else None
        if last is not None and last[0] == noise_multiplier and last[1] == sample_rate:
            self.history[-1] = (noise_multiplier, sample_rate, last[2] + n_steps)
        else:
            self.history.append((float(noise_multiplier), float(sample_rate), int(n_steps)))

    @property
    def n_steps(self):
        return sum(h[2] for h in self.history)

    def get_epsilon(self, delta):
        """Epsilon spent so far at ``delta`` (0 before any step, inf without noise)."""
        if not self.history:
            return 0.0
        if any(sigma == 0 for sigma, _, _ in self.history):
            return math.inf
        acc = _opacus_accountant(self.accounting)
        acc.history = list(self.history)
        with warnings.catch_warnings():
            # "Optimal order is the largest alpha": the bound is valid, only less tight.
            warnings.filterwarnings("ignore", message="Optimal order is the largest alpha")
            if self.accounting == "rdp":
                return float(acc.get_epsilon(delta=delta, alphas=RDP_ORDERS))
            return float(acc.get_epsilon(delta=delta))


def compute_epsilon(noise_multiplier, sample_rate, n_steps, delta, accounting="rdp"):
    """Epsilon of ``n_steps`` Poisson-subsampled Gaussian steps at ``delta``."""
    acc = PrivacyAccountant(accounting)
    acc.step(noise_multiplier, sample_rate, n_steps)
    return acc.get_epsilon(delta)
