"""Algorithm 2 of the PGE supplement: Hamiltonian dynamics driven by a learned score.

Round m = 1..M uses step ``lambda = lambda0 * (M / m)^2`` and noise level
sigma_m, fresh Gaussian momentum, N leapfrog steps and one accept/reject.
Two corrections to the algorithm as printed:

- the momentum moves *along* the score (the gradient of log-density):
  ``p <- p + (lambda / 2) s(x)``; the printed minus sign would push samples
  away from the data;
- the acceptance test needs ``log q(x_new) - log q(x_old)``, which a score
  network does not give. We integrate the score along the leapfrog path
  (trapezoid rule on the points the leapfrog visits anyway: no extra network
  calls). ``acceptance="hmc"`` adds the kinetic-energy change (a proper
  Metropolis-Hastings test for HMC); ``acceptance="density"`` is the printed
  rule ``min(1, q(x_new) / q(x_old))``.

Sampling reads only the trained network: it is post-processing and spends no
privacy. Chains start from noise, never from data.
"""
import torch


def hmc_sample(score, x0, sigmas, *, step_size, n_leapfrog, n_repeats=1, acceptance="hmc",
               generator=None, denoise=True, callback=None):
    """Run the sampler on a batch of chains ``x0`` (n, d); returns (samples, acceptance rate per round).

    ``score(x, sigma)`` returns the learned score at noise level sigma.
    """
    x = x0
    M = len(sigmas)
    rates = []
    for m, sigma in enumerate(sigmas, start=1):
        lam = step_size * (M / m) ** 2
        for _ in range(n_repeats):
            p0 = torch.randn(x.shape, generator=generator, device=x.device)
            x_new, p, s = x, p0, score(x, sigma)
            log_q_change = torch.zeros(x.shape[0], device=x.device)
            for _ in range(n_leapfrog):
                p_half = p + 0.5 * lam * s
                x_next = x_new + lam * p_half
                s_next = score(x_next, sigma)
                log_q_change += 0.5 * ((s + s_next) * (x_next - x_new)).sum(dim=1)
                p = p_half + 0.5 * lam * s_next
                x_new, s = x_next, s_next
            log_accept = log_q_change
            if acceptance == "hmc":
                log_accept = log_accept - 0.5 * ((p ** 2).sum(dim=1) - (p0 ** 2).sum(dim=1))
            u = torch.rand(x.shape[0], generator=generator, device=x.device)
            accept = (torch.log(u) < log_accept) & torch.isfinite(log_accept)
            x = torch.where(accept[:, None], x_new, x)
            rates.append(float(accept.float().mean()))
        if callback is not None:
            callback(m, M, sigma, rates[-1])
    if denoise:  # Tweedie's formula at the last level: the posterior mean of the clean point
        x = x + sigmas[-1] ** 2 * score(x, sigmas[-1])
    return x, rates

