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
    """What a membership-inference attack achieved: ROC AUC and the true positive rate at a low FPR.

    Returned by :func:`loss_threshold_attack` and :func:`lira_offline_attack`.
    Scores are higher for records the attack believes were members.
    ``tpr_at_low_fpr`` is the fraction of members found while at most a
    fraction ``fpr`` of non-members is wrongly accused, the figure Carlini et
    al. (2022) argue matters: it shows confident leaks of a few records that
    an AUC near 0.5 hides. With fewer than ``1 / fpr`` non-members it can
    only be 0 or come from the few highest scores, so use enough of them.

    Parameters
    ----------
    auc : float
        Area under the ROC curve of members against non-members; 0.5 is
        chance.
    tpr_at_low_fpr : float
        The largest true positive rate on the ROC curve at false positive
        rate at most ``fpr``.
    fpr : float
        The false positive rate ``tpr_at_low_fpr`` is read at.
    scores_in : ndarray of shape (n_members,)
        The attack's score of each member.
    scores_out : ndarray of shape (n_non_members,)
        The attack's score of each non-member.

    See Also
    --------
    loss_threshold_attack : A membership attack that returns this result.
    lira_offline_attack : A stronger attack that returns this result.

    Examples
    --------
    >>> from skdp.attacks import MembershipResult
    >>> result = MembershipResult.from_scores([0.9, 0.8, 0.4], [0.5, 0.1, 0.2], fpr=0.1)
    >>> round(result.auc, 3), round(result.tpr_at_low_fpr, 3)
    (0.889, 0.667)
    """

    auc: float
    tpr_at_low_fpr: float
    fpr: float
    scores_in: np.ndarray = field(repr=False)
    scores_out: np.ndarray = field(repr=False)

    @classmethod
    def from_scores(cls, scores_in, scores_out, fpr=1e-3):
        """Summarise the scores of members and non-members.

        Parameters
        ----------
        scores_in : array-like of shape (n_members,)
            Scores of the members; higher means "member".
        scores_out : array-like of shape (n_non_members,)
            Scores of the non-members.
        fpr : float, default=1e-3
            The false positive rate to read the true positive rate at.

        Returns
        -------
        result : MembershipResult
            The AUC, the TPR at ``fpr`` and the scores.
        """
        labels = np.r_[np.ones(len(scores_in)), np.zeros(len(scores_out))]
        scores = np.r_[scores_in, scores_out]
        fprs, tprs, _ = roc_curve(labels, scores)
        tpr = float(np.max(tprs[fprs <= fpr], initial=0.0))
        return cls(float(roc_auc_score(labels, scores)), tpr, fpr, np.asarray(scores_in),
                   np.asarray(scores_out))


def loss_threshold_attack(fitted, X_in, y_in, X_out, y_out, fpr=1e-3):
    """Attack membership by thresholding the model's log-likelihood of each record's label.

    The loss-threshold attack of Yeom et al. (2018): a record on which the
    fitted model has a lower loss (a higher log-probability of its own label)
    is guessed to be a member. It needs only ``predict_proba`` and serves as
    the baseline of membership inference; a DP model bounds its advantage:
    at any threshold, ``TPR <= exp(epsilon) FPR + delta``.

    Parameters
    ----------
    fitted : fitted classifier
        The attacked model, with ``predict_proba`` and ``classes_``.
    X_in : array-like of shape (n_members, n_features)
        Records that were in its training set.
    y_in : array-like of shape (n_members,)
        Their labels.
    X_out : array-like of shape (n_non_members, n_features)
        Records from the same population that were not.
    y_out : array-like of shape (n_non_members,)
        Their labels.
    fpr : float, default=1e-3
        The false positive rate to report the true positive rate at.

    Returns
    -------
    result : MembershipResult
        The AUC, the TPR at ``fpr`` and each record's score.

    See Also
    --------
    lira_offline_attack : A stronger attack calibrated per record on reference models.
    skdp.audit.one_run_audit : Turns such scores into a lower bound on epsilon.

    Examples
    --------
    A decision tree memorises random labels, so its members are easy to tell:

    >>> import numpy as np
    >>> from sklearn.tree import DecisionTreeClassifier
    >>> from skdp.attacks import loss_threshold_attack
    >>> rng = np.random.default_rng(0)
    >>> X, y = rng.random((100, 5)), rng.integers(0, 2, 100)
    >>> tree = DecisionTreeClassifier(random_state=0).fit(X[:50], y[:50])
    >>> round(loss_threshold_attack(tree, X[:50], y[:50], X[50:], y[50:]).auc, 2)
    0.75
    """
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

    The attack is "offline" (Carlini et al., S&P 2022): no reference model is
    trained on the targets, so it costs ``n_reference`` fits whatever the
    number of targets.

    Parameters
    ----------
    fitted : fitted classifier
        The attacked model, with ``predict_proba`` and ``classes_``.
    estimator : classifier
        An unfitted estimator like the attacked one; cloned for each reference
        model (its ``random_state``, if any, is set anew for each).
    X_ref : ndarray of shape (n_reference_records, n_features)
        The attacker's population data, holding none of the targets.
    y_ref : ndarray of shape (n_reference_records,)
        Its labels.
    X_in : array-like of shape (n_members, n_features)
        Targets that were in the attacked training set.
    y_in : array-like of shape (n_members,)
        Their labels.
    X_out : array-like of shape (n_non_members, n_features)
        Targets that were not.
    y_out : array-like of shape (n_non_members,)
        Their labels.
    n_reference : int, default=8
        Reference models trained.
    reference_size : int or None, default=None
        Records in each reference training set; None takes ``len(X_in)``.
    fpr : float, default=1e-3
        The false positive rate to report the true positive rate at.
    random_state : int, Generator or None, default=None
        Seeds the reference subsets and the reference models' ``random_state``.

    Returns
    -------
    result : MembershipResult
        The AUC, the TPR at ``fpr`` and each target's score.

    Raises
    ------
    ValueError
        If ``reference_size`` is larger than the reference population.

    See Also
    --------
    loss_threshold_attack : The uncalibrated baseline.
    skdp.audit.one_run_audit : A lower bound on epsilon from one training run.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn.tree import DecisionTreeClassifier
    >>> from skdp.attacks import lira_offline_attack
    >>> rng = np.random.default_rng(0)
    >>> X, y = rng.random((100, 5)), rng.integers(0, 2, 100)
    >>> X_ref, y_ref = rng.random((200, 5)), rng.integers(0, 2, 200)
    >>> tree = DecisionTreeClassifier(random_state=0).fit(X[:50], y[:50])
    >>> result = lira_offline_attack(tree, DecisionTreeClassifier(), X_ref, y_ref, X[:50], y[:50], X[50:], y[50:],
    ...                              n_reference=4, random_state=0)
    >>> result.scores_in.shape, result.scores_out.shape
    ((50,), (50,))
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
