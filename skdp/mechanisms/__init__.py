"""Privacy mechanisms outside DP-SGD: Gaussian (analytic calibration, Gaussian DP), private top-k, quantiles."""
from .gaussian import analytic_gaussian_sigma, gaussian_dp_delta, gaussian_dp_epsilon, gaussian_dp_mu
from .quantiles import dp_quantiles, histogram_edges
from .topk import gumbel_top_k, top_k_round_epsilon

__all__ = [
    "analytic_gaussian_sigma",
    "dp_quantiles",
    "gaussian_dp_delta",
    "gaussian_dp_epsilon",
    "gaussian_dp_mu",
    "gumbel_top_k",
    "histogram_edges",
    "top_k_round_epsilon",
]
