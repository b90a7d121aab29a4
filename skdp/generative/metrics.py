"""How good is synthetic data: downstream accuracy and label diversity."""
import numpy as np
from sklearn.base import clone
from sklearn.linear_model import LogisticRegression


def downstream_accuracy(X_synthetic, y_synthetic, X_test, y_test, classifier=None):
    """Compute the accuracy on real held-out data of a classifier trained only on synthetic data.

    The "train on synthetic, test on real" measure of synthetic data: a
    generator that kept the relation between features and labels gives a
    classifier close to one trained on the real data. The synthetic data are
    a DP release, so this costs no privacy; the real test set must not be
    the generator's training data.

    Parameters
    ----------
    X_synthetic : array-like of shape (n_synthetic, n_features)
        Generated records.
    y_synthetic : array-like of shape (n_synthetic,)
        Their labels.
    X_test : array-like of shape (n_test, n_features)
        Real held-out records.
    y_test : array-like of shape (n_test,)
        Their labels.
    classifier : classifier or None, default=None
        Cloned and fitted on the synthetic data; None takes
        ``LogisticRegression(max_iter=1000)``.

    Returns
    -------
    accuracy : float
        Accuracy on ``(X_test, y_test)``.

    See Also
    --------
    label_entropy : Diversity of the generated labels.
    TrainOnSynthetic : The same as an estimator that fits the generator too.

    Examples
    --------
    >>> import numpy as np
    >>> from skdp.generative import downstream_accuracy
    >>> rng = np.random.default_rng(0)
    >>> X = np.r_[rng.normal(-1, 0.2, (50, 2)), rng.normal(1, 0.2, (50, 2))]
    >>> y = np.repeat([0, 1], 50)
    >>> downstream_accuracy(X[::2], y[::2], X[1::2], y[1::2])
    1.0
    """
    clf = LogisticRegression(max_iter=1000) if classifier is None else clone(classifier)
    return float(clf.fit(X_synthetic, y_synthetic).score(X_test, y_test))


def label_entropy(reference_classifier, X_synthetic, n_classes=None):
    """Compute the supplement's diversity metric: entropy (bits) of a reference classifier's labels on samples.

    A generator that covers every class evenly reaches log2(n_classes)
    (3.32 bits for 10 classes); one that collapses to a class scores 0.

    Parameters
    ----------
    reference_classifier : fitted classifier
        A classifier trained on real data, used to label the samples.
    X_synthetic : array-like of shape (n_synthetic, n_features)
        Generated records.
    n_classes : int or None, default=None
        Ignored: the classes are ``reference_classifier.classes_``.

    Returns
    -------
    entropy : float
        Entropy of the predicted labels' distribution, in bits.

    See Also
    --------
    downstream_accuracy : Whether the samples keep the features' relation to the labels.
    PGEGenerator : A private generator whose samples this measures.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn.linear_model import LogisticRegression
    >>> from skdp.generative import label_entropy
    >>> X, y = np.array([[-1.0], [-0.5], [0.5], [1.0]]), np.array([0, 0, 1, 1])
    >>> reference = LogisticRegression().fit(X, y)
    >>> label_entropy(reference, X)
    1.0
    >>> label_entropy(reference, X[:2]) == 0  # one class only
    True
    """
    predicted = reference_classifier.predict(X_synthetic)
    classes = getattr(reference_classifier, "classes_", np.unique(predicted))
    counts = np.array([(predicted == c).sum() for c in classes], dtype=float)
    p = counts[counts > 0] / counts.sum()
    return float(-(p * np.log2(p)).sum())
