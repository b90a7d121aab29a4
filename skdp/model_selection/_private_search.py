"""``PrivateSearchCV``: a hyperparameter search whose choice is itself differentially private.

What is released -- the winning model, its parameters and its noisy score --
is (epsilon, delta)-DP *as a whole, selection included*, by random-stopping
tuning (Papernot & Steinke, ICLR 2022, "Hyperparameter tuning with Renyi
differential privacy"; the theorems and formulas are in
:mod:`skdp.model_selection._tuning`):

1. Every record goes to a validation split by an independent coin of public
   probability ``validation_fraction``, drawn once from fresh OS entropy. It
   never looks at the data, and it is not derived from ``random_state``: coins
   tied to row positions by a public seed would move other records between the
   splits when a record is inserted in the middle, and the analysis below
   needs every other record's coin to be the same on both neighbours (in law).
2. ``K`` is drawn from a truncated negative binomial (Theorem 2) or a Poisson
   law (Theorem 6) with mean ``n_trials_mean``, from fresh OS entropy, and
   kept secret.
3. Each of the ``K`` trials (the base algorithm ``Q``) picks a candidate
   uniformly at random (fresh entropy too), trains it with DP-SGD on the
   training split at noise ``sigma_c`` (set by the search), and scores it on
   the validation split: the number of correct predictions plus
   ``N(0, score_noise^2)`` (sensitivity 1 under add/remove).
4. Only the best (model, parameters, noisy score) is kept.

**The base algorithm's RDP.** Fix the coins of every record but one, ``x``.
If ``x``'s coin sends it to training, the validation split is the same on
both neighbours and the score is post-processing of the model: ``Q`` is as
private as the training, ``eps_c(lambda) = T_c * rdp_sgm(sigma_c, q_c, lambda)``
(Opacus's subsampled Gaussian, ``T_c`` steps at sample rate ``q_c``). If it
goes to validation, the training split, hence the model's law, is the same,
and the score is a Gaussian count: ``lambda / (2 score_noise^2)``. Candidates
are a data-independent uniform mixture, and a Renyi divergence of mixtures with
the same weights is at most the largest one (joint quasi-convexity, van Erven
& Harremoes 2014, Thm 13); the coin of ``x`` is a mixture the same way. Hence
``Q`` is RDP with ``eps_Q(lambda) = max(max_c eps_c(lambda), lambda / (2 score_noise^2))``.
``score_noise="auto"`` is the smallest noise whose curve stays under
``max_c eps_c`` at every order: the score then costs nothing.

**Calibration.** Every candidate's noise is calibrated so that one trial alone
is ``(trial_epsilon, delta)``-DP; ``trial_epsilon`` is bisected until the
tuned algorithm's epsilon (Theorem 2/6 at every order, then Opacus's RDP ->
(epsilon, delta) conversion) is at most ``epsilon``. The bisection runs on a
subset of ``RDP_ORDERS`` (mostly integers up to 256; a minimum over fewer
orders is never smaller); the reported ``epsilon_`` is recomputed on all of
them, so it is at most the bisection's bound, hence at most ``epsilon``.

**Assumptions**, as everywhere in skdp: the number of records is public (it
sets DP-SGD's sample rate; here the split sizes too) and timing is not a
release (a fit's duration grows with the secret ``K``).
"""
import math
import numbers
import warnings
import zlib

import numpy as np
from joblib import Parallel, delayed
from sklearn.base import BaseEstimator, MetaEstimatorMixin, _fit_context, clone, is_classifier
from sklearn.metrics import accuracy_score
from sklearn.model_selection import ParameterGrid, ParameterSampler
from sklearn.pipeline import Pipeline
from sklearn.utils import indexable
from sklearn.utils._param_validation import HasMethods, Interval, StrOptions
from sklearn.utils.metaestimators import available_if
from sklearn.utils.validation import _num_samples, check_consistent_length, check_is_fitted

from ..exceptions import warn_privacy
from ..privacy.accounting import RDP_ORDERS
from ..privacy.ledger import charge
from ..privacy.report import dp_steps, set_privacy_attributes
from ..utils import taps
from ..utils.random import make_rng, mechanism_rng
from ..utils.steps import nested_estimators
from ..utils.validation import encode_labels, warn_if_delta_too_large
from . import _tuning

# Parameters the search sets on every trial: a grid may not contain them.
SET_BY_SEARCH = ("epsilon", "noise_multiplier", "delta")
# Parameters that change a trial's privacy plan (steps, sample rate): finite lists only.
PLAN_PARAMETERS = ("batch_size", "max_epochs")
# Orders of the calibration's bisection: a subset of RDP_ORDERS (the integers up to 256 and a few
# fractional ones; Opacus's fractional orders cost ~6x more), so its bound is never below the full one.
_FAST_ORDERS = tuple(o for o in RDP_ORDERS if o <= 256 and (float(o).is_integer() or o in (1.3, 1.5, 1.7, 2.5, 3.5)))
# Trials whose noise would have to exceed this do not learn: the budget is refused instead.
MAX_NOISE_MULTIPLIER = 100.0
# Candidates inspected before the charge, at most (the grid of a space's lists).
MAX_INSPECTED = 2000


def _sgm_rdp(sigma, q, n_steps, orders):
    """RDP of ``n_steps`` Poisson-subsampled Gaussian steps at ``orders`` (Opacus's ``compute_rdp``)."""
    from opacus.accountants.analysis.rdp import compute_rdp

    return np.asarray(compute_rdp(q=q, noise_multiplier=sigma, steps=n_steps, orders=list(orders)))


def _estimator_has(attr):
    def check(self):
        if hasattr(self, "best_estimator_"):
            return hasattr(self.best_estimator_, attr)
        return hasattr(self.estimator, attr)
    return check


def _fit_trial(estimator, X_train, y_train, X_val, y_val):
    """One trial: fit (DP-SGD inside), count correct validation predictions (noised by the caller).

    The count is the score's mechanism input, of sensitivity 1 under add/remove: that holds only if each
    validation record's prediction depends on that record alone. A batched ``predict`` would trust the
    model to be row-wise (a module or transformer that centres its batch moved the count by 32-48 for
    one record), so each row is predicted alone, and the fitted model must not change while it predicts
    (a prediction that stores something would carry one row into the next).
    """
    from joblib import hash as fingerprint

    # The trial's warnings are recorded, not shown: the search shows each distinct one once, since K trials
    # warning K times would tell the secret number of trials.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        estimator.fit(X_train, y_train)
        _eval_mode(estimator)  # predict switches torch modules to eval mode: not a change of what was learnt
        before = fingerprint(estimator)
        y_val = np.asarray(y_val)
        correct = sum(int(np.asarray(estimator.predict(_index(X_val, [i])))[0] == y_val[i])
                      for i in range(len(y_val)))
    if fingerprint(estimator) != before:
        raise RuntimeError(f"{type(estimator).__name__} changed its fitted state while predicting the validation "
                           "records: a prediction would depend on the records predicted before it, so the "
                           "noisy score would not be private. Nothing is released.")
    return estimator, correct, [(w.category, str(w.message)) for w in caught]


def _eval_mode(obj, seen=None, depth=0):
    """Put every torch module reachable from ``obj``'s attributes in eval mode (as prediction does)."""
    import torch

    seen = set() if seen is None else seen
    if id(obj) in seen or depth > 6:
        return
    seen.add(id(obj))
    if isinstance(obj, torch.nn.Module):
        obj.eval()
        return
    values = (obj.values() if isinstance(obj, dict) else obj if isinstance(obj, (list, tuple))
              else vars(obj).values() if hasattr(obj, "__dict__") and not isinstance(obj, type) else ())
    for value in values:
        if not isinstance(value, (str, bytes, int, float, np.ndarray)):
            _eval_mode(value, seen, depth + 1)


class PrivateSearchCV(MetaEstimatorMixin, BaseEstimator):
    """Hyperparameter search whose whole output, selection included, is (epsilon, delta)-DP.

    Random-stopping tuning (Papernot & Steinke, ICLR 2022): a secret random
    number ``K`` of trials, each training a candidate drawn uniformly from
    ``param_grid`` (or ``param_distributions``) with DP-SGD on a training split
    and scoring it by its noisy count of correct predictions on a validation
    split; only the best (model, parameters, noisy score) is released. The
    noise of every trial is calibrated so that the tuned algorithm is
    (``epsilon``, ``delta``)-DP under add/remove adjacency. The theorem, the
    accounting and the assumptions are in the docstring of
    :mod:`skdp.model_selection._private_search`; doc/privacy.md compares it with
    a ``GridSearchCV`` over epsilon.

    Parameters
    ----------
    estimator : classifier or Pipeline
        A DP-SGD classifier (``DPMomentumClassifier``) or a Pipeline with
        exactly one such step; give it ``classes`` (public labels). Its
        ``epsilon``, ``noise_multiplier`` and ``delta`` are set by the search,
        and its ``ledger`` by the search's ``ledger`` (trials charge nothing).
        Other Pipeline steps must not learn from the data (e.g.
        ``FunctionTransformer``): a step that does warns and is not covered.
    param_grid : dict or list of dicts or None, default=None
        Candidates, as for ``GridSearchCV`` (Pipeline names like ``clf__lr``).
        Must not contain ``epsilon``, ``noise_multiplier`` or ``delta``.
    param_distributions : dict or list of dicts or None, default=None
        Distributions or lists to sample each trial's candidate from, as for
        ``RandomizedSearchCV``; ``batch_size`` and ``max_epochs`` must be
        lists (they change the privacy plan). Give this or ``param_grid``;
        neither searches ``estimator`` as it is.
    epsilon : float
        Total privacy budget of the search, selection included; finite, > 0.
    delta : float, default=1e-5
        Delta of the guarantee, in (0, 1); keep it well below 1 / n_samples.
    n_trials_mean : float, default=10.0
        Expected number of trials ``E[K]`` (> 1). More trials explore more of
        the grid, but each costs more: the bound grows with ``log E[K]``.
    distribution : {"truncated_negative_binomial", "poisson"}, default="truncated_negative_binomial"
        Law of ``K``: Theorem 2 (``eta``; ``gamma`` is solved from
        ``n_trials_mean``) or Theorem 6 (mean ``n_trials_mean``; a draw of
        ``K = 0``, probability ``exp(-n_trials_mean)``, releases nothing and
        raises ``RuntimeError``).
    eta : float, default=0.0
        Shape of the truncated negative binomial, > -1 (0: logarithmic law,
        1: geometric). Smaller ``eta`` is cheaper in privacy, with a heavier tail of ``K``.
    validation_fraction : float, default=0.2
        Public probability that a record goes to the validation split (an
        independent coin per record, not a stratified split: a stratified
        split would look at the private labels).
    score_noise : "auto" or float, default="auto"
        Standard deviation of the Gaussian noise on each trial's count of
        correct validation predictions. "auto": the smallest noise that costs
        no privacy beyond the training (its RDP curve stays under the
        training's at every order).
    scoring : None or "accuracy", default=None
        Only the noisy accuracy is supported: any other scorer computed on
        private validation data is a release the analysis does not cover.
    refit : bool, default=True
        True keeps the winning trial's model as ``best_estimator_`` (trained on
        the training split; no extra fit, no extra privacy). False releases
        only ``best_params_`` and ``best_score_``.
    public_estimator : bool, default=False
        Declare that ``estimator`` is not DP (no ``epsilon`` parameter) and that
        this is acceptable, e.g. public data: the search then runs without
        noise and certifies nothing (``epsilon_=inf``).
    return_curator_results : bool, default=False
        True stores ``curator_results_``, every trial's parameters and exact
        validation accuracy and the secret number of trials, for the data
        curator only: NOT private, so the search then reports
        ``privacy_certified_=False`` (``best_estimator_`` alone stays covered).
    ledger : BudgetLedger or None, default=None
        Charged once, with (``epsilon_``, ``delta_``), before any training.
    n_jobs : int or None, default=None
        Trials trained in parallel (joblib).
    random_state : int, Generator or None, default=None
        Seeds non-mechanism randomness only: the initialisation of trials whose
        DP estimator has ``random_state=None`` (each trial its own seed). The
        mechanism's randomness (the split coins, ``K``, the candidates, all
        noise) is fresh OS entropy, never derived from it.
    verbose : int, default=0
        1 prints each trial's parameters on the curator's console (not stored).

    Attributes
    ----------
    best_estimator_ : estimator
        The winning trial's fitted model (``refit=True``). Its DP step reports
        the search's ``epsilon_``, ``delta_``, ``privacy_cost_`` and
        certification, not its trial's: it was chosen among the secret trials,
        so releasing it alone costs the whole search.
    best_params_ : dict
        Its candidate parameters.
    best_score_ : float
        Its noisy validation accuracy (the DP score, may fall outside [0, 1]).
    best_index_ : int or None
        Index of the winning candidate in the ``param_grid`` candidate list (None with distributions).
    classes_ : ndarray
        The label set of ``best_estimator_``.
    n_features_in_ : int
        Features seen by ``best_estimator_``.
    epsilon_ : float
        Epsilon of everything released, selection included (<= ``epsilon``).
    delta_ : float
        Its delta.
    privacy_certified_ : bool
        Whether (``epsilon_``, ``delta_``) is a proven guarantee of the released
        attributes (False with ``curator_results_``).
    privacy_notes_ : tuple of str
        Why not, when it is not.
    noise_seeded_ : bool
        True inside :func:`skdp.insecure_noise_seed` (not private).
    trial_epsilon_ : float
        Epsilon (at ``delta``) of one trial alone, the largest over the candidates.
    score_noise_ : float
        Standard deviation of the noise on the counts of correct predictions.
    budget_split_ : dict
        How the budget was spent: ``trial_epsilon``, ``noise_multipliers``
        (per ``(batch_size, max_epochs)`` plan), ``score_noise``,
        ``distribution``, ``eta``, ``gamma`` or ``mu``, ``n_trials_mean``,
        ``rdp_order`` (order of the final conversion), ``n_train``,
        ``n_validation``. The number of trials actually run is secret and not
        released (knowing ``K`` voids the theorem).
    curator_results_ : dict
        Only with ``return_curator_results=True``; NOT private.

    See Also
    --------
    sklearn.model_selection.GridSearchCV : Its fits can be charged to a ledger; its choice is not covered.
    skdp.privacy.search_privacy_cost : The cost of a ``GridSearchCV`` by composition.
    skdp.privacy.BudgetLedger : Charged once here, for the whole search.
    random_stopping_epsilon : The bound the calibration inverts.

    Examples
    --------
    A tiny search (one epoch, two learning rates); its fitted epsilon is
    certified, at most the budget, whatever the secret number of trials:

    >>> import numpy as np
    >>> from skdp import DPMomentumClassifier, PrivateSearchCV
    >>> rng = np.random.default_rng(0)
    >>> X = rng.random((400, 4)).astype("float32"); y = (X[:, 0] > 0.5).astype(int)
    >>> search = PrivateSearchCV(DPMomentumClassifier(classes=[0, 1], max_epochs=1, batch_size=32),
    ...                          {"lr": [0.05, 0.2]}, epsilon=1.0, n_trials_mean=2).fit(X, y)
    >>> search.epsilon_ <= 1.0, search.privacy_certified_, sorted(search.best_params_)
    (True, True, ['lr'])
    >>> search.predict(X[:3]).shape
    (3,)
    """

    _spends_privacy = True  # declared DP: fit spends through a mechanism and reports it (public_steps.declares_dp)
    _parameter_constraints = {
        "estimator": [HasMethods(["fit", "predict"])],
        "param_grid": [None, dict, list],
        "param_distributions": [None, dict, list],
        "epsilon": [Interval(numbers.Real, 0, None, closed="neither")],
        "delta": [Interval(numbers.Real, 0, 1, closed="neither")],
        "n_trials_mean": [Interval(numbers.Real, 0, None, closed="neither")],
        "distribution": [StrOptions(set(_tuning.DISTRIBUTIONS))],
        "eta": [Interval(numbers.Real, -1, None, closed="neither")],
        "validation_fraction": [Interval(numbers.Real, 0, 1, closed="neither")],
        "score_noise": [StrOptions({"auto"}), Interval(numbers.Real, 0, None, closed="neither")],
        "scoring": [None, str, callable, dict, list, tuple],
        "refit": ["boolean"],
        "public_estimator": ["boolean"],
        "return_curator_results": ["boolean"],
        "ledger": [None, HasMethods(["spend"])],
        "n_jobs": [None, numbers.Integral],
        "random_state": ["random_state"],
        "verbose": ["verbose"],
    }

    def __init__(self, estimator, param_grid=None, param_distributions=None, *, epsilon, delta=1e-5,
                 n_trials_mean=10.0, distribution="truncated_negative_binomial", eta=0.0,
                 validation_fraction=0.2, score_noise="auto", scoring=None, refit=True,
                 public_estimator=False, return_curator_results=False, ledger=None, n_jobs=None,
                 random_state=None, verbose=0):
        self.estimator = estimator
        self.param_grid = param_grid
        self.param_distributions = param_distributions
        self.epsilon = epsilon
        self.delta = delta
        self.n_trials_mean = n_trials_mean
        self.distribution = distribution
        self.eta = eta
        self.validation_fraction = validation_fraction
        self.score_noise = score_noise
        self.scoring = scoring
        self.refit = refit
        self.public_estimator = public_estimator
        self.return_curator_results = return_curator_results
        self.ledger = ledger
        self.n_jobs = n_jobs
        self.random_state = random_state
        self.verbose = verbose

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.non_deterministic = True  # fresh mechanism noise, a secret number of trials
        tags.estimator_type = "classifier"
        return tags

    # -- checks ------------------------------------------------------------------------------------
    def _check_search_space(self):
        """``(grid_candidates or None, list of dicts)``: the candidates, or the distributions."""
        if self.param_grid is not None and self.param_distributions is not None:
            raise ValueError("Give param_grid or param_distributions, not both.")
        space = self.param_grid if self.param_distributions is None else self.param_distributions
        space = [{}] if space is None else ([space] if isinstance(space, dict) else list(space))
        for part in space:
            if not isinstance(part, dict):
                raise ValueError(f"param_grid / param_distributions must be dicts or a list of dicts, got {part!r}.")
            for key, values in part.items():
                name = key.rsplit("__", 1)[-1]
                if name == "ledger":
                    raise ValueError(
                        f"The search space contains {key!r}: a ledger is charged once, with the search's total, "
                        "before any trial runs; it cannot be searched. Give it as PrivateSearchCV(ledger=...).")
                if name in SET_BY_SEARCH:
                    raise ValueError(
                        f"The search space contains {key!r}: {'/'.join(SET_BY_SEARCH)} are set by PrivateSearchCV "
                        "from its total budget, not searched. Remove it; for accuracy against epsilon (a "
                        "privacy-utility curve) use GridSearchCV over epsilon with a BudgetLedger (doc/privacy.md).")
                if name in PLAN_PARAMETERS and self.param_distributions is not None and hasattr(values, "rvs"):
                    raise ValueError(f"param_distributions[{key!r}] must be a list, not a distribution: {name} "
                                     "changes the privacy plan of a trial, which is calibrated for every value.")
                if not hasattr(values, "rvs") and (isinstance(values, (str, bytes))
                                                   or not hasattr(values, "__len__") or len(values) == 0):
                    raise ValueError(f"The search space's {key!r} must be a non-empty list, got {values!r}.")
        if self.param_distributions is None:
            return list(ParameterGrid(space)), space
        return None, space

    def _check_scoring(self):
        if self.scoring is not None and self.scoring != "accuracy":
            raise ValueError(
                f"scoring={self.scoring!r} is not supported: a score computed on private validation data is a "
                "release, and the analysis covers only the built-in DP score, the count of correct "
                "predictions plus Gaussian noise (sensitivity 1). Use scoring=None or 'accuracy'.")

    def _find_dp_step(self, template):
        """``(step, prefix)``: the one DP-SGD estimator in ``template`` and its parameter prefix."""
        steps = dp_steps(template)
        if not steps:
            if self.public_estimator:
                return None, None
            raise ValueError(
                f"{type(self.estimator).__name__} holds no DP estimator (a parameter named epsilon is not one): it is "
                "not differentially private, so the search could not be either. Use a DP estimator "
                "(DPMomentumClassifier), or pass "
                "public_estimator=True to declare the data public (the search then certifies nothing).")
        if len(steps) > 1:
            raise ValueError(f"PrivateSearchCV supports one DP step per candidate; {type(self.estimator).__name__} "
                             f"has {len(steps)} ({', '.join(type(s).__name__ for s in steps)}).")
        step = steps[0]
        if not (hasattr(step, "_plan") and "noise_multiplier" in step.get_params(deep=False)):
            raise ValueError(
                f"PrivateSearchCV needs each trial's RDP curve, which it knows for the DP-SGD estimators "
                f"(DPMomentumClassifier); {type(step).__name__} is not one.")
        if step is template:
            return step, ""
        for key, value in template.get_params(deep=True).items():
            if value is step:
                return step, key + "__"
        raise ValueError(f"Could not find {type(step).__name__} among the parameters of {type(template).__name__}.")

    def _candidate(self, template, params):
        """A fresh trial for ``params``: ``clone(template)`` with the values cloned too (never the user's objects)."""
        return clone(template).set_params(**clone(params, safe=False))

    def _inspected(self, candidates, space):
        """Every candidate the search can draw that can be known before it runs, as parameter dicts.

        A grid: all of them. Distributions: the grid of their lists (estimator objects and plan parameters
        are lists); values drawn from a distribution are inspected again when drawn.
        """
        if candidates is not None:
            return candidates
        lists = [{k: v for k, v in part.items() if not hasattr(v, "rvs")} for part in space]
        grid = ParameterGrid(lists)
        if len(grid) > MAX_INSPECTED:
            raise ValueError(f"param_distributions holds {len(grid)} combinations of list values; PrivateSearchCV "
                             f"inspects every one before the charge (at most {MAX_INSPECTED}). Use fewer list "
                             "values or a distribution for the numeric ones.")
        return list(grid)

    def _inspect(self, template, params, stand_in=None, n_samples=None):
        """``(trial, step, prefix, leaks, notes)`` of one candidate: validated, its DP step, what it leaks.

        Everything here reads parameters only, and runs for every candidate before the budget is charged:
        a candidate that cannot fit (``lr=-1``) is refused before it costs anything, and a candidate with a
        learning step (``{"pre": [StandardScaler()]}``) is found whether or not a trial would draw it.
        With ``stand_in`` (public zeros shaped like the rows) and ``n_samples``, the candidate's network is
        also built and run once on it (:meth:`_check_runs`).
        """
        from ..privacy.public_steps import non_private_steps

        trial = self._candidate(template, params)
        for est in nested_estimators(trial):
            if hasattr(est, "_validate_params"):
                est._validate_params()  # InvalidParameterError (a ValueError) names the parameter
        step, prefix = self._find_dp_step(trial)
        if step is not None and hasattr(step, "_check_net_kwargs"):
            step._check_net_kwargs()
        if stand_in is not None and step is not None and hasattr(step, "_check_buildable"):
            self._check_runs(trial, step, prefix, params, stand_in, n_samples)
        leaks = [message for path, message in non_private_steps(trial) if step is None or path + "__" != prefix]
        notes = []
        if step is not None and "classes" in step.get_params(deep=False) and step.get_params()["classes"] is None:
            notes.append("classes")
        return trial, step, prefix, leaks, notes

    @staticmethod
    def _check_runs(trial, step, prefix, params, stand_in, n_samples):
        """Build the candidate's network and run one forward on the public stand-in, before the charge.

        The stand-in goes through the Pipeline's steps before the DP step first (public zeros: nothing
        private is read). A candidate whose network cannot be built or run (``module="cnn"`` without
        ``image_shape``, ``module__hidden_sizes=(0,)``, ``module__typo``) would otherwise fail in its trial,
        after the search charged its budget, and release nothing.
        """
        rows = stand_in
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # about public zeros: nothing to say
            if step is not trial:
                path = prefix[:-2]
                if not (isinstance(trial, Pipeline) and path in trial.named_steps):
                    return  # deeper than a Pipeline's step: the trial's own fit checks it
                index = list(trial.named_steps).index(path)
                try:
                    rows = clone(trial[:index]).fit_transform(stand_in) if index else stand_in
                except Exception:  # noqa: BLE001 (the stand-in cannot pass those steps, e.g. they want strings)
                    return
            try:
                step._check_buildable(rows, n_samples)
            except Exception as exc:  # noqa: BLE001 (whatever building or running raises)
                raise ValueError(
                    f"PrivateSearchCV: the candidate {params!r} cannot be built or run on rows of shape "
                    f"{tuple(np.shape(rows)[1:])} ({type(exc).__name__}: {exc}). Nothing was charged; fix or "
                    "remove it from the search space.") from exc

    def _check_data(self, X, y):
        """Refuse, before the charge, data the trials could not train on."""
        import torch

        owner = type(self).__name__
        if isinstance(X, torch.utils.data.Dataset):
            raise ValueError(f"{owner} needs X and y as arrays: it sends each record to training or validation "
                             "by a coin, which a torch Dataset does not allow. Pass arrays (or a memmap) and y.")
        if y is None:
            raise ValueError(f"{owner} requires y to be passed, but the target y is None.")
        X, y = indexable(X, y)
        check_consistent_length(X, y)
        if not hasattr(X, "iloc"):
            values = np.asarray(X)
            if values.dtype.kind in "fiub" and not np.all(np.isfinite(values)):
                raise ValueError(f"Input X contains NaN or infinity; {owner} refuses it before charging the "
                                 "budget. Impute or drop those records first.")
        if np.asarray(y).ndim != 1:
            raise ValueError(f"y must be one label per record (1-D), got shape {np.asarray(y).shape}.")
        return X, y

    def _ledger(self, steps):
        """The one ledger the search charges: its own, or the one set on the DP step; never two."""
        found = {id(s.ledger): s.ledger for s in steps if getattr(s, "ledger", None) is not None}
        if self.ledger is not None:
            found.pop(id(self.ledger), None)
            if found:
                raise ValueError(
                    "The estimator has a ledger and PrivateSearchCV has another: the search charges one ledger, "
                    "once, with its total. Set the ledger on PrivateSearchCV(ledger=...) only.")
            return self.ledger
        if len(found) > 1:
            raise ValueError("The candidates hold different ledgers; the search charges one, once, with its total. "
                             "Set it on PrivateSearchCV(ledger=...) instead.")
        return next(iter(found.values()), None)

    @staticmethod
    def _trial_seed(base, params):
        """An initialisation seed for a trial, from ``random_state`` and the candidate alone.

        Never from the trial's position: the released winner's ``random_state`` would then tell how many
        trials ran before it, a lower bound on the secret number of trials ``K``.
        """
        key = repr(sorted((str(k), repr(v)) for k, v in params.items())).encode()
        return int(np.random.SeedSequence([base, zlib.crc32(key)]).generate_state(1)[0] % (2 ** 31 - 1))

    # -- the privacy plan ------------------------------------------------------------------------
    @staticmethod
    def _plan_key(step, n_train):
        """``((batch_size, max_epochs), (sample_rate, n_steps))`` of a DP step's trial on ``n_train`` records."""
        batch_size, epochs, _, extra = step._plan(n_train)
        if extra:
            raise ValueError(f"{type(step).__name__} spends privacy outside DP-SGD; PrivateSearchCV cannot "
                             "account for it.")
        batch_size = n_train if batch_size == -1 else int(batch_size)
        q = min(1.0, batch_size / n_train)
        n_steps = max(1, int(round(n_train / batch_size))) * int(epochs)
        return (batch_size, int(epochs)), (q, n_steps)

    def _plans(self, steps, n_train):
        """``{(batch_size, max_epochs): (sample_rate, n_steps)}`` of every inspected candidate's DP step."""
        return dict(self._plan_key(s, n_train) for s in steps)

    def _law(self):
        if self.distribution == "poisson":
            return {"mu": float(self.n_trials_mean)}
        return {"eta": float(self.eta), "gamma": _tuning.tnb_gamma_for_mean(float(self.eta),
                                                                          float(self.n_trials_mean))}

    def _calibrate(self, plans, law):
        """Noise per plan and score noise such that the tuned search is (epsilon, delta)-DP."""
        delta = float(self.delta)
        orders = np.asarray(_FAST_ORDERS, dtype=float)
        # Each plan's (epsilon at delta) on a grid of sigmas: trial_epsilon -> sigma by interpolation.
        # The interpolation only picks the sigmas; every bound below is computed exactly for them.
        grid = np.geomspace(0.2, MAX_NOISE_MULTIPLIER, 14)
        tables = {}
        for key, (q, n_steps) in plans.items():
            eps = [_tuning.rdp_to_epsilon(orders, _sgm_rdp(s, q, n_steps, orders), delta)[0] for s in grid]
            tables[key] = np.log(np.maximum(np.asarray(eps), 1e-300))

        def sigmas_for(trial_eps):
            # eps falls as sigma grows: interpolate log sigma against log eps (increasing order).
            return {key: float(np.exp(np.interp(math.log(trial_eps), t[::-1], np.log(grid)[::-1])))
                    for key, t in tables.items()}

        def tuned(sigmas, orders, score_noise=None, curves=None):
            """(epsilon, order, score_noise) of the tuned search with these per-plan sigmas."""
            if curves is None:
                curves = [_sgm_rdp(sigmas[key], q, n_steps, orders) for key, (q, n_steps) in plans.items()]
            base = np.max(curves, axis=0)
            if score_noise is None:
                score_noise = (math.sqrt(float(np.max(orders / (2 * base)))) if self.score_noise == "auto"
                               else float(self.score_noise))  # "auto": lambda / (2 s^2) <= base(lambda) everywhere
            # Q's curve: the larger of training and score at every order (see the module docstring).
            base = np.maximum(base, orders / (2 * score_noise ** 2))
            eps, order = _tuning.random_stopping_epsilon(orders, base, delta, self.distribution, **law)
            return eps, order, score_noise

        lo = min(float(np.exp(t.min())) for t in tables.values())  # every plan at the largest noise
        hi = max(float(np.exp(t.max())) for t in tables.values())  # every plan at the smallest noise
        if tuned(sigmas_for(lo), orders)[0] > self.epsilon:
            if self.score_noise != "auto":
                alone = _tuning.random_stopping_epsilon(orders, orders / (2 * float(self.score_noise) ** 2), delta,
                                                        self.distribution, **law)[0]
                if alone > self.epsilon:
                    raise ValueError(
                        f"epsilon={self.epsilon:g} is too small to pay for one trial: score_noise="
                        f"{self.score_noise:g} alone costs epsilon {alone:.3g} over the trials. Raise score_noise "
                        "(or use 'auto') or raise epsilon.")
            raise ValueError(
                f"epsilon={self.epsilon:g} is too small to pay for one trial: with n_trials_mean="
                f"{self.n_trials_mean:g}, the search would need a noise multiplier above "
                f"{MAX_NOISE_MULTIPLIER:g} (a model that learns nothing). Raise epsilon, lower n_trials_mean or "
                "use fewer epochs / smaller lots.")
        if tuned(sigmas_for(hi), orders)[0] <= self.epsilon:
            lo = hi
        for _ in range(60):  # bisection on log(trial_epsilon); lo always meets the target
            if hi / lo < 1.004:
                break
            mid = math.sqrt(lo * hi)
            lo, hi = (mid, hi) if tuned(sigmas_for(mid), orders)[0] <= self.epsilon else (lo, mid)
        sigmas = sigmas_for(lo)
        score_noise = tuned(sigmas, orders)[2]
        # The released figures, on every order: at the fast orders the curve is the one the bisection
        # priced, and more orders can only lower a minimum, so this is <= the bisection's bound <= epsilon.
        full = np.asarray(RDP_ORDERS, dtype=float)
        curves = [_sgm_rdp(sigmas[key], q, n_steps, full) for key, (q, n_steps) in plans.items()]
        epsilon, order, _ = tuned(sigmas, full, score_noise, curves)
        trial_eps = max(_tuning.rdp_to_epsilon(full, curve, delta)[0] for curve in curves)
        if not epsilon <= self.epsilon:  # cannot happen (see above); refuse rather than overspend
            raise RuntimeError(f"Calibration gave epsilon {epsilon!r} > the budget {self.epsilon!r}; "
                               "nothing is trained.")
        return sigmas, score_noise, epsilon, order, trial_eps

    # -- fit ------------------------------------------------------------------------------------
    @_fit_context(prefer_skip_nested_validation=False)
    def fit(self, X, y):
        """Run the private search on private ``(X, y)``; spends at most (``epsilon``, ``delta``).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features) or images
            Private features, scaled by a public range.
        y : array-like of shape (n_samples,)
            Private labels, in the estimator's public ``classes``.

        Returns
        -------
        self : object
            Fitted estimator.
        """
        self._check_scoring()
        if not is_classifier(self.estimator):
            raise ValueError(f"PrivateSearchCV scores trials by noisy accuracy and needs a classifier; got "
                             f"{type(self.estimator).__name__}.")
        candidates, space = self._check_search_space()
        template = clone(self.estimator)
        X, y = self._check_data(X, y)
        n = _num_samples(X)

        # 1. Every candidate that can be known in advance, inspected before any charge: its parameters
        #    validated, its DP step found, its learning steps and label set noted. The released model's
        #    certification is the conjunction over all of them (not only over the trials that ran: which
        #    ran depends on the secret K).
        stand_in = _stand_in(X)
        inspected = [self._inspect(template, params, stand_in, n) for params in self._inspected(candidates, space)]
        steps = [step for _, step, _, _, _ in inspected if step is not None]
        leaks = sorted({message for *_, found, _ in inspected for message in found})
        read_from_data = ["classes"] if any("classes" in notes for *_, notes in inspected) else []
        notes = []
        if leaks:
            warn_privacy("PrivateSearchCV: " + "; ".join(leaks) + ".")
            notes.append("a candidate's Pipeline learns from the data without DP: " + "; ".join(leaks))
        if read_from_data:
            warn_privacy("PrivateSearchCV: a candidate has classes=None: it reads the label set from the private y "
                         "and releases it in classes_; give classes=[...] from public knowledge.")
        for classes in {repr(s.classes): s.classes for s in steps if getattr(s, "classes", None) is not None}.values():
            encode_labels(classes, y, type(self).__name__)  # labels outside the public set: refused here
        ledger = self._ledger(steps)
        public = not steps
        if public and not self.public_estimator:
            self._find_dp_step(template)  # raises: no DP step and not declared public

        # 2. The split: an independent coin per record, of public probability, from fresh entropy (the
        #    mechanism's randomness from here on: coins, K, candidates and score noise; never stored). Each
        #    use draws from its own child stream, so that the coins of n records are the first n coins of
        #    n + 1 (neighbouring data sets share their draws: tests/test_sensitivity_harness.py).
        coin_rng, trial_rng, score_rng = mechanism_rng(self).spawn(3)
        in_val = coin_rng.random(n) < self.validation_fraction
        train_idx, val_idx = np.flatnonzero(~in_val), np.flatnonzero(in_val)
        if len(train_idx) < 2 or len(val_idx) < 1:
            raise ValueError(f"validation_fraction={self.validation_fraction:g} leaves {len(train_idx)} training "
                             f"and {len(val_idx)} validation records of {n}; use more data or another fraction.")
        # Split sizes are public by assumption (as the number of records): the audit tap may pin them.
        n_train, n_val = taps.public_count("n_train", len(train_idx)), taps.public_count("n_val", len(val_idx))
        warn_if_delta_too_large(self.delta, n, type(self).__name__)

        # 3. The privacy plan and the calibration (public quantities only).
        if self.distribution != "poisson" and not self.n_trials_mean > 1:
            raise ValueError(f"n_trials_mean={self.n_trials_mean!r}: the truncated negative binomial has E[K] > 1; "
                             "use a larger mean or distribution='poisson'.")
        law = self._law()
        if public:  # declared public: nothing to calibrate, nothing certified
            plans, sigmas, score_noise, epsilon, order, trial_eps = {}, None, 0.0, math.inf, None, math.inf
            notes.append("the estimator is not differentially private (public_estimator=True)")
        else:
            plans = self._plans(steps, n_train)
            sigmas, score_noise, epsilon, order, trial_eps = self._calibrate(plans, law)
        self.trial_epsilon_ = float(trial_eps)
        self.score_noise_ = float(score_noise)
        self.budget_split_ = {
            "trial_epsilon": float(trial_eps), "noise_multipliers": sigmas, "score_noise": float(score_noise),
            "distribution": self.distribution, "n_trials_mean": float(self.n_trials_mean), **law,
            "rdp_order": order, "n_train": n_train, "n_validation": n_val}

        # 4. Charge the ledger once, with the total, after every check and before any training.
        charge(ledger, epsilon, 0.0 if math.isinf(epsilon) else float(self.delta), type(self).__name__)

        # 5. The secret number of trials and their candidates: mechanism randomness.
        if self.distribution == "poisson":
            k = int(trial_rng.poisson(self.n_trials_mean))
            if k == 0:
                raise RuntimeError(
                    "The Poisson draw gave K = 0 trials: by Theorem 6 the search releases nothing this time "
                    f"(probability exp(-{self.n_trials_mean:g})); the budget is spent. Fit again (charged again) "
                    "or use the truncated negative binomial (K >= 1).")
        else:
            k = _tuning.sample_tnb(law["eta"], law["gamma"], trial_rng)
        chosen = []
        for _ in range(k):
            if candidates is not None:
                index = int(trial_rng.integers(len(candidates)))
                chosen.append((index, candidates[index]))
            else:
                seed = int(trial_rng.integers(2 ** 31 - 1))
                chosen.append((None, next(iter(ParameterSampler(space, 1, random_state=seed)))))

        X_train, y_train = _index(X, train_idx), _index(y, train_idx)
        X_val, y_val = _index(X, val_idx), _index(y, val_idx)
        trials, planned = [], []
        base_seed = int(make_rng(self.random_state).integers(2 ** 31 - 1))  # initialisation only
        for _, params in chosen:
            trial = self._candidate(template, params)
            if not public:
                trial, s, prefix, found, _ = self._inspect(template, params)
                key, plan = self._plan_key(s, n_train) if s is not None else (None, None)
                if s is None or key not in plans or set(found) - set(leaks):
                    raise RuntimeError(  # a value drawn from a distribution changed the plan or the steps
                        f"The drawn candidate {params!r} was not among those inspected and priced before the "
                        "charge (a distribution produced an estimator or a plan of its own); nothing is released. "
                        "Give such values as lists.")
                if "random_state" in s.get_params(deep=False) and s.random_state is None:
                    s.set_params(random_state=self._trial_seed(base_seed, params))
                planned.append((sigmas[key], *plan))
                forced = {"epsilon": self.trial_epsilon_, "noise_multiplier": sigmas[key], "delta": float(self.delta)}
                if "ledger" in s.get_params(deep=False):
                    forced["ledger"] = None  # the search charged the total; trials must not charge again
                s.set_params(**forced)
            trials.append(trial)
        if self.verbose:
            for _, params in chosen:  # the curator's console only
                print(f"[PrivateSearchCV] trial {params}")
        results = Parallel(n_jobs=self.n_jobs, return_as="generator")(
            delayed(_fit_trial)(trial, X_train, y_train, X_val, y_val) for trial in trials)

        # 6. Keep only the best (model, noisy score); everything else is discarded.
        best, curator, trial_warnings = None, [], {}
        for i, ((index, params), (fitted, correct, caught)) in enumerate(zip(chosen, results)):
            trial_warnings.update(dict.fromkeys(caught))
            if not public:
                self._check_trial_plan(fitted, self._find_dp_step(fitted)[1], planned[i])
            # The score's mechanism: the count (sensitivity 1 under add/remove) plus Gaussian noise.
            count = taps.release("gaussian:score", float(correct), 1.0, "l1")
            noisy = count + score_rng.normal(0.0, self.score_noise_ * taps.noise_factor()) if self.score_noise_ > 0 \
                else count
            if self.return_curator_results:
                curator.append({"params": params, "validation_accuracy": correct / n_val,
                                "noisy_score": noisy / n_val})
            if best is None or noisy > best[0]:
                best = (noisy, index, params, fitted)
        del results, trials
        for category, message in trial_warnings:  # each distinct warning once, whatever the number of trials
            warnings.warn(message, category, stacklevel=2)
        noisy, self.best_index_, self.best_params_, fitted = best
        self.best_score_ = float(noisy / n_val)
        if self.refit:
            self.best_estimator_ = fitted
        else:
            self._n_features_in = getattr(fitted, "n_features_in_", None)
            self._classes = getattr(fitted, "classes_", None)
        if self.return_curator_results:
            self.curator_results_ = {"trials": curator, "n_trials": k}
        # The winner's own report too (e.g. noise seeded): its notes become the search's.
        winner = self._find_dp_step(fitted)[0]
        own = ("classes read", "noise seeded", "noise removed")  # the search reports these itself
        notes += [note for note in getattr(winner, "privacy_notes_", ())
                  if note not in notes and not note.startswith(own)]
        set_privacy_attributes(self, epsilon, self.delta, certified="; ".join(notes) if notes else True,
                               read_from_data=read_from_data)
        if self.refit and winner is not None:
            # The winner was chosen among the secret K trials by its noisy score: releasing it alone costs the
            # whole search, not its trial's epsilon. Its report is the search's (it holds nothing more).
            for name in ("epsilon_", "delta_", "privacy_certified_", "privacy_notes_", "privacy_cost_"):
                setattr(winner, name, getattr(self, name))
            # Its network holds only its trial's accountant and no ledger: a continuation is refused (review_s37 k02;
            # ends in "_": a fresh fit of the winner drops it with the rest of the fitted state).
            winner._released_by_search_ = type(self).__name__
            if ledger is not None and "ledger" in winner.get_params(deep=False):
                # The trials ran with ledger=None (the search charged the total); the released estimator holds the
                # ledger the search charged, so a fresh fit of it or of its clone is charged there (review_s37 k11).
                winner.set_params(ledger=ledger)
        if self.return_curator_results:
            notes.append("curator_results_ holds the secret number of trials and every trial's exact validation "
                         "accuracy (return_curator_results=True): NOT private; best_estimator_ alone is covered")
            set_privacy_attributes(self, epsilon, self.delta, certified="; ".join(notes),
                                   read_from_data=read_from_data)
        return self

    @staticmethod
    def _check_trial_plan(fitted, prefix, planned):
        """The fitted trial used the noise, sample rate and steps the calibration priced (else: refuse)."""
        s = fitted if not prefix else fitted.get_params(deep=True)[prefix[:-2]]
        sigma, q, n_steps = planned
        if not (s.noise_multiplier_ == sigma and math.isclose(s.sample_rate_, q, rel_tol=1e-9)
                and s.n_steps_ == n_steps):
            raise RuntimeError(f"A trial trained with noise_multiplier={s.noise_multiplier_}, sample_rate="
                               f"{s.sample_rate_} and {s.n_steps_} steps, not the ({sigma}, {q}, {n_steps}) the "
                               "calibration priced; nothing is released.")

    # -- delegation -------------------------------------------------------------------------------
    def _check_refit(self, method):
        check_is_fitted(self)
        if not self.refit:
            raise AttributeError(f"{method} needs refit=True (the winning model is kept only then).")

    @property
    def classes_(self):
        """The label set of the winning model."""
        check_is_fitted(self)
        return self.best_estimator_.classes_ if self.refit else self._classes

    @property
    def n_features_in_(self):
        """Number of features the winning model was fitted on."""
        check_is_fitted(self)
        return self.best_estimator_.n_features_in_ if self.refit else self._n_features_in

    @available_if(_estimator_has("predict"))
    def predict(self, X):
        """Labels predicted by ``best_estimator_`` (post-processing of the private release).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features) or images
            Samples to predict, in the format the winning model was fitted on.

        Returns
        -------
        y : ndarray of shape (n_samples,)
            Predicted labels, from ``classes_``.
        """
        self._check_refit("predict")
        return self.best_estimator_.predict(X)

    @available_if(_estimator_has("predict_proba"))
    def predict_proba(self, X):
        """Class probabilities of ``best_estimator_`` (post-processing of the private release).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features) or images
            Samples to score, in the format the winning model was fitted on.

        Returns
        -------
        proba : ndarray of shape (n_samples, n_classes)
            Probability of each class in ``classes_``, per sample.
        """
        self._check_refit("predict_proba")
        return self.best_estimator_.predict_proba(X)

    @available_if(_estimator_has("decision_function"))
    def decision_function(self, X):
        """Decision function of ``best_estimator_`` (post-processing of the private release).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features) or images
            Samples to score, in the format the winning model was fitted on.

        Returns
        -------
        scores : ndarray
            The winning model's decision function on ``X``.
        """
        self._check_refit("decision_function")
        return self.best_estimator_.decision_function(X)

    def score(self, X, y):
        """Accuracy of ``best_estimator_`` on ``(X, y)`` (exact: on private data it is not a DP release).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features) or images
            Test samples. Use public or held-out data: the score is exact,
            and on private data it is a release that ``epsilon_`` does not cover.
        y : array-like of shape (n_samples,)
            True labels of ``X``.

        Returns
        -------
        score : float
            Fraction of ``X`` whose predicted label equals ``y``.
        """
        self._check_refit("score")
        return accuracy_score(y, self.best_estimator_.predict(X))


def _stand_in(X):
    """Two rows of zeros shaped and typed like ``X``'s (public: the shape and dtype only), or None.

    None for what zeros cannot stand in for: tables with named columns (strings), sparse matrices, Datasets.
    """
    import scipy.sparse as sp

    if hasattr(X, "iloc") or sp.issparse(X):
        return None
    values = X if hasattr(X, "shape") and hasattr(X, "dtype") else np.asarray(X)
    if values.dtype.kind not in "fiub" or values.ndim < 2:
        return None
    return np.zeros((2,) + tuple(values.shape[1:]), dtype=values.dtype)


def _index(data, indices):
    from sklearn.utils import _safe_indexing
    return _safe_indexing(data, indices)
