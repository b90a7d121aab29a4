"""
An audit catches a broken mechanism
===================================

A privacy claim is a theorem about a mechanism, and code can break it silently: a sensitivity
computed for the wrong neighbouring relation, a noise scale divided twice. An audit cannot prove
that a mechanism is private, but it can prove that it is *not*: a statistical lower bound on epsilon
above the claim.

Here a counting query (how many records have the attribute?) is released with the analytic Gaussian
mechanism at epsilon = 1. The correct release adds noise for sensitivity 1; the broken one divides
the noise by 10 ("the count is over 10,000 records, so one record is tiny", a classic mistake). Each is
run 4,000 times on a data set D and on its neighbour D' (one more record, with the attribute), and
:func:`skdp.audit.epsilon_lower_bound` bounds epsilon from the two samples.
"""
import matplotlib.pyplot as plt
import numpy as np

from skdp.audit import epsilon_lower_bound
from skdp.mechanisms import analytic_gaussian_sigma

epsilon, delta = 1.0, 1e-5
count_d, count_d_prime = 120.0, 121.0          # D' = D plus one record with the attribute
sigma = analytic_gaussian_sigma(epsilon, delta, sensitivity=1.0)
# The audit's own draws: an experiment, not a release, so a seeded generator is fine here.
rng = np.random.default_rng(0)


def release(count, noise_scale, n_runs=4000):
    return count + rng.normal(0.0, noise_scale, n_runs)


# %%
# Run both mechanisms on D and D'. The score is the release itself: larger means "D'".
results = {}
for name, scale in [("correct (sigma for sensitivity 1)", sigma), ("broken (sigma / 10)", sigma / 10)]:
    s_d, s_d_prime = release(count_d, scale), release(count_d_prime, scale)
    bound = epsilon_lower_bound(s_d, s_d_prime, delta=delta)
    results[name] = (s_d, s_d_prime, bound)
    verdict = "claim refuted" if bound > epsilon else "no violation found"
    print(f"{name:<36} sigma {scale:6.3f}   95% lower bound on epsilon {bound:5.2f}   ({verdict})")

# %%
# The correct mechanism's two output distributions overlap as much as epsilon = 1 demands; the
# broken one's barely overlap, and the audit proves an epsilon far above the claim.
fig, axes = plt.subplots(1, 2, figsize=(9, 3.5))
for ax, (name, (s_d, s_d_prime, bound)) in zip(axes, results.items()):
    bins = np.linspace(min(s_d.min(), s_d_prime.min()), max(s_d.max(), s_d_prime.max()), 60)
    ax.hist(s_d, bins, alpha=0.6, label="release on D")
    ax.hist(s_d_prime, bins, alpha=0.6, label="release on D'")
    ax.set_title(f"{name}\nlower bound {bound:.2f} vs claim {epsilon:g}", fontsize=10)
    ax.set_xlabel("released count")
axes[0].legend(fontsize=8)
fig.tight_layout()
plt.show()
