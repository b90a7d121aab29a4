"""Train on synthetic data: fit a private generator, fit any classifier on its samples."""
import numbers

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin, clone, _fit_context
from sklearn.linear_model import LogisticRegression
from sklearn.utils._param_validation import HasMethods, Interval
from sklearn.utils.validation import (_check_feature_names, _check_n_features, check_consistent_length,
                                      check_is_fitted, validate_data)

from ..exceptions import warn_privacy
from ..utils import taps
from ..utils.random import make_rng
from ..utils.validation import set_init_params


class TrainOnSynthetic(ClassifierMixin, BaseEstimator):
    """Fit ``generator`` on the private data, sample a labelled synthetic set, fit ``classifier`` on it.

    The classifier sees only synthetic records, so its training is
    post-processing of the generator: the whole estimator spends what the
    generator spends (``epsilon_``). ``GridSearchCV`` over ``generator__epsilon``
    and ``Pipeline`` work as usual (and every fit of a search spends budget).

    A DataFrame is passed to the generator as it is (its column names, and
    categorical columns for a generator that models them, such as
    ``PGEGenerator(categories=...)``); the classifier is fitted on the
    samples as the generator returns them (a DataFrame of the same columns,
    for a table) and always predicts on rows of that same form, so that
    names seen in fit are seen in predict.

    Like every scikit-learn meta-estimator it fits a *clone* of ``generator``:
    passing an already fitted generator spends its epsilon a second time (it
    warns). To train on a generator fitted before, without spending again,
    wrap it: ``TrainOnSynthetic(sklearn.frozen.FrozenEstimator(gen))``.

    Parameters
    ----------
    generator : estimator with ``fit(X, y)`` and ``sample(n, random_state=...)``
        For example ``PGEGenerator(classes=..., bounds=...)``.
    classifier : classifier or None, default=None
        None: ``LogisticRegression(max_iter=1000)``.
    synthetic_ratio : float, default=10
        Synthetic records per private training record.
    random_state : int, Generator or None, default=None
        Seeds the sampling.

    Attributes
    ----------
    generator_, classifier_ : fitted estimators
        The fitted clone of ``generator`` and the classifier fitted on its
        samples.
    classes_ : ndarray
        The generator's label set.
    epsilon_, delta_ : float
        The generator's spend (with a FrozenEstimator: spent when it was fitted).
    privacy_certified_ : bool
        The generator's.
    privacy_notes_ : tuple of str
        The generator's.
    n_features_in_ : int
        Features per record.

    See Also
    --------
    PGEGenerator : A private generator to train on.
    downstream_accuracy : The same measure for a synthetic set already drawn.

    Examples
    --------
    >>> import numpy as np
    >>> from skdp.generative import PGEGenerator, TrainOnSynthetic
    >>> rng = np.random.default_rng(0)
    >>> X = np.r_[rng.normal(-1, 0.2, (100, 2)), rng.normal(1, 0.2, (100, 2))]
    >>> y = np.repeat([0, 1], 100)
    >>> gen = PGEGenerator(noise_multiplier=1.0, bounds=(-2, 2), classes=[0, 1], max_epochs=1, n_repeats=1)
    >>> clf = TrainOnSynthetic(gen, synthetic_ratio=1, random_state=0).fit(X, y)
    >>> round(clf.epsilon_, 2), clf.predict_proba(X[:3]).shape
    (5.33, (3, 2))
    """

    _spends_privacy = True  # declared DP: fit spends through a mechanism and reports it (public_steps.declares_dp)
    _parameter_constraints = {
        "generator": [HasMethods(["fit", "sample"])],
        "classifier": [None, HasMethods(["fit", "predict"])],
        "synthetic_ratio": [Interval(numbers.Real, 0, None, closed="neither")],
        "random_state": ["random_state", np.random.Generator],
    }

    def __init__(self, generator, classifier=None, *, synthetic_ratio=10, random_state=None):
        set_init_params(self, locals())

    @_fit_context(prefer_skip_nested_validation=False)
    def fit(self, X, y):
        """Fit the generator on private ``(X, y)``, then the classifier on its samples.

        Spends what the generator's fit spends; the sampling and the
        classifier's fit are post-processing. Warns if ``generator`` is
        already fitted (it is cloned and refitted, spending again).

        Parameters
        ----------
        X : array-like or DataFrame of shape (n_samples, n_features)
            Private records; a DataFrame goes to the generator as it is.
        y : array-like of shape (n_samples,)
            Private labels.

        Returns
        -------
        self : object
            Fitted estimator.
        """
        if _is_frame(X):  # the generator validates its table (mixed columns included)
            _check_feature_names(self, X, reset=True)
            _check_n_features(self, X, reset=True)
            check_consistent_length(X, y)
            if len(X) < 2:
                raise ValueError(f"TrainOnSynthetic needs at least 2 records, got {len(X)}.")
        else:
            X, y = validate_data(self, X, y, ensure_min_samples=2)
        if hasattr(self.generator, "epsilon_") and type(self.generator).__name__ != "FrozenEstimator":
            warn_privacy(f"TrainOnSynthetic refits a clone of the fitted {type(self.generator).__name__}: that spends "
                f"epsilon={self.generator.epsilon_:.4g} again. Wrap the fitted generator in "
                "sklearn.frozen.FrozenEstimator to sample from it without refitting.")
        self.generator_ = clone(self.generator).fit(X, y)
        rng = make_rng(self.random_state)
        classes, prior = self.generator_.classes_, self.generator_.class_prior_
        # The number of records is public (skdp's assumption): the audit tap may pin it to its neighbour's.
        n = max(len(classes), int(round(self.synthetic_ratio * taps.public_count("n_samples", len(X)))))
        # Labels from the generator's (noisy) proportions, with every class at least once so the
        # classifier knows all of them.
        labels = np.r_[classes, rng.choice(classes, size=n - len(classes), p=prior)]
        X_syn, y_syn = self.generator_.sample(n, y=labels, random_state=rng)
        # Predictions give the classifier rows of the form it was fitted on (a DataFrame of these columns).
        self._synthetic_columns = list(X_syn.columns) if _is_frame(X_syn) else None
        base = LogisticRegression(max_iter=1000) if self.classifier is None else self.classifier
        with taps.post_processing():  # no private record in this fit: an audit's canaries stay out of it
            self.classifier_ = clone(base).fit(X_syn, y_syn)
        self.classes_ = self.generator_.classes_
        self.epsilon_ = self.generator_.epsilon_
        self.delta_ = self.generator_.delta_
        self.privacy_certified_ = getattr(self.generator_, "privacy_certified_", False)
        self.privacy_notes_ = getattr(self.generator_, "privacy_notes_", ())
        # When the generator's release was made and its training began: privacy_spent orders a Pipeline's releases
        # by them (review_s37 k19).
        for stamp in ("_released_at_", "_trained_since_"):
            if hasattr(self.generator_, stamp):
                setattr(self, stamp, getattr(self.generator_, stamp))
        return self

    def predict(self, X):
        """Predict labels with the classifier trained on synthetic data.

        Parameters
        ----------
        X : array-like or DataFrame of shape (n_samples, n_features)
            Records to classify.

        Returns
        -------
        y_pred : ndarray of shape (n_samples,)
            Predicted labels.
        """
        X = self._rows(X)  # checks fitted first
        return self.classifier_.predict(X)

    def predict_proba(self, X):
        """Predict class probabilities, with a column for every class of ``classes_``.

        Parameters
        ----------
        X : array-like or DataFrame of shape (n_samples, n_features)
            Records to classify.

        Returns
        -------
        proba : ndarray of shape (n_samples, n_classes)
            Probabilities in the order of ``classes_``; a class absent from
            the synthetic set gets probability 0.
        """
        X = self._rows(X)  # checks fitted first
        proba = self.classifier_.predict_proba(X)
        # Classes absent from the synthetic set get probability 0.
        out = np.zeros((len(proba), len(self.classes_)))
        out[:, np.searchsorted(self.classes_, self.classifier_.classes_)] = proba
        return out

    def _rows(self, X):
        """``X`` in the form the classifier was fitted on: a DataFrame of the synthetic columns, or an array."""
        check_is_fitted(self)
        if self._synthetic_columns is None:
            return validate_data(self, X, reset=False)
        import pandas as pd

        _check_feature_names(self, X, reset=False)  # scikit-learn's warning when names are dropped or changed
        _check_n_features(self, X, reset=False)
        if _is_frame(X):
            return X[self._synthetic_columns]
        return pd.DataFrame(np.asarray(X), columns=self._synthetic_columns)


def _is_frame(X):
    return hasattr(X, "columns") and hasattr(X, "dtypes") and hasattr(X, "iloc")
