import math

import numpy as np
import pytest
from scipy.stats import norm

from skdp.mechanisms import (analytic_gaussian_sigma, gaussian_dp_delta, gaussian_dp_mu, gumbel_top_k,
                             top_k_round_epsilon)
from skdp.mechanisms.topk import top_k_epsilon


@pytest.mark.parametrize("eps,sens,expected", [(1.0, 5.0, 18.65), (6.0, 5.0, 3.82), (1.0, 10.0, 37.31)])
def test_analytic_gaussian_matches_independent_values(eps, sens, expected):
    # Reference values from the Balle & Wang formula, computed independently in shared/notes/dfs.md §8.
    assert analytic_gaussian_sigma(eps, 1e-5, sens) == pytest.approx(expected, abs=0.01)


def test_analytic_gaussian_is_tight_and_beats_the_classical_bound():
    sigma = analytic_gaussian_sigma(0.5, 1e-5, 1.0)
    mu = 1 / sigma
    # Balle & Wang's condition, written out independently of gaussian_dp_delta.
    delta_at = norm.cdf(mu / 2 - 0.5 / mu) - math.exp(0.5) * norm.cdf(-mu / 2 - 0.5 / mu)
    assert delta_at <= 1e-5 and delta_at > 0.99e-5
    assert sigma < math.sqrt(2 * math.log(1.25 / 1e-5)) / 0.5


def test_gaussian_dp_composes_by_adding_mu_squared():
    mu = gaussian_dp_mu(2.0, 1e-6)
    assert gaussian_dp_delta(mu, 2.0) == pytest.approx(1e-6, rel=1e-6)
    halves = math.sqrt(mu ** 2 / 2)  # two mechanisms at mu/sqrt(2) each
    assert gaussian_dp_delta(math.hypot(halves, halves), 2.0) == pytest.approx(1e-6, rel=1e-6)
    assert gaussian_dp_delta(mu * 1.1, 2.0) > 1e-6


def test_top_k_round_epsilon_composes_to_the_target():
    for eps, k in [(0.5, 1), (1.0, 10), (9.0, 50)]:
        eps0 = top_k_round_epsilon(eps, 1e-6, k)
        assert top_k_epsilon(eps0, k, 1e-6) <= eps
        assert top_k_epsilon(eps0 * 1.01, k, 1e-6) > eps


def test_gumbel_top_one_is_the_exponential_mechanism():
    rng = np.random.default_rng(1)
    scores, eps0, sens = np.array([0.0, 1.0, 2.0, 2.5]), 2.0, 1.0
    picks = np.array([gumbel_top_k(scores, 1, eps0, sens, rng)[0] for _ in range(40_000)])
    expected = np.exp(eps0 * scores / (2 * sens))
    expected /= expected.sum()
    assert np.allclose(np.bincount(picks, minlength=4) / len(picks), expected, atol=0.01)
    assert list(gumbel_top_k(scores, 2, math.inf, sens, rng)) == [3, 2]
