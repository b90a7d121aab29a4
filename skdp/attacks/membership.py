"""Membership inference: loss threshold (Yeom et al. 2018) and offline LiRA (Carlini et al. 2022).

Both return scores where higher means "member", with ROC AUC and the true
positive rate at a low false positive rate, the figure Carlini et al. argue
is the one that matters (an attack that confidently finds a few members is
a real leak even at AUC near 0.5).
"""
from dataclasses import dataclass, field

import numpy as np
from sklearn.base import clone
from sklearn.metrics import roc_auc_score, roc_curve

from ..audit.one_run import log_likelihood_score
from ..utils.random import make_rng


@dataclass
class MembershipResult:
    auc: float
    tpr_at_low_fpr: float
    fpr: float
    scores_in: np.ndarray = field(repr=False)
    scores_out: np.ndarray = field(repr=False)

    @classmethod
    def from_scores(cls, scores_in, scores_out, fpr=1e-3):
        labels = np.r_[np.ones(len(scores_in)), np.zeros(len(scores_out))]
        scores = np.r_[scores_in, scores_out]
        fprs, tprs, _ = roc_curve(labels, scores)
        tpr = float(np.max(tprs[fprs <= fpr], initial=0.0))
        return cls(float(roc_auc_score(labels, scores)), tpr, fpr, np.asarray(scores_in),
                   np.asarray(scores_out))


def loss_threshold_attack(fitted, X_in, y_in, X_out, y_out, fpr=1e-3):
    """Score members by the model's log-likelihood of their label (a lower loss means "in")."""
    return MembershipResult.from_scores(log_likelihood_score(fitted, X_in, y_in),
                                        log_likelihood_score(fitted, X_out, y_out), fpr)


def _logit_confidence(fitted, X, y):
    log_p = log_likelihood_score(fitted, X, y)
    p = np.clip(np.exp(log_p), 1e-12, 1 - 1e-12)
    return np.log(p) - np.log1p(-p)


def lira_offline_attack(fitted, estimator, X_ref, y_ref, X_in, y_in, X_out, y_out, n_reference=8,
                        reference_size=None, fpr=1e-3, random_state=None):
    """Offline LiRA: compare each target's confidence with its confidence under reference models.

    Reference models are ``estimator`` clones trained on random subsets of
    ``(X_ref, y_ref)``, a population that holds none of the targets, of
    ``reference_size`` records (default: as many as the members, the size of
    the attacked training set the attacker is assumed to know). For each
    target the logit-scaled confidence under the references gives a Gaussian
    "out" distribution; the score is how far above it the attacked model's
    confidence lies, in standard deviations.
    """
    rng = make_rng(random_state)
    X_t, y_t = np.concatenate([X_in, X_out]), np.concatenate([y_in, y_out])
    size = len(X_in) if reference_size is None else int(reference_size)
    if size > len(X_ref):
        raise ValueError(f"reference_size={size} is larger than the reference population ({len(X_ref)}).")
    ref = []
    for _ in range(n_reference):
        subset = rng.choice(len(X_ref), size=size, replace=False)
        model = clone(estimator)
        if "random_state" in model.get_params():
            model.set_params(random_state=int(rng.integers(2**31 - 1)))
        ref.append(_logit_confidence(model.fit(X_ref[subset], y_ref[subset]), X_t, y_t))
    ref = np.array(ref)
    mean, std = ref.mean(axis=0), ref.std(axis=0) + 1e-6
    scores = (_logit_confidence(fitted, X_t, y_t) - mean) / std
    return MembershipResult.from_scores(scores[: len(X_in)], scores[len(X_in):], fpr)
