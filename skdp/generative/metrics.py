"""How good is synthetic data: downstream accuracy and label diversity."""
import numpy as np
from sklearn.base import clone
from sklearn.linear_model import LogisticRegression


def downstream_accuracy(X_synthetic, y_synthetic, X_test, y_test, classifier=None):
    """Accuracy on real held-out data of a classifier trained only on synthetic data."""
    clf = LogisticRegression(max_iter=1000) if classifier is None else clone(classifier)
    return float(clf.fit(X_synthetic, y_synthetic).score(X_test, y_test))


def label_entropy(reference_classifier, X_synthetic, n_classes=None):
    """The supplement's diversity metric: entropy (bits) of a reference classifier's labels on samples.

    A generator that covers every class evenly reaches log2(n_classes)
    (3.32 bits for 10 classes); one that collapses to a class scores 0.
    """
    predicted = reference_classifier.predict(X_synthetic)
    classes = getattr(reference_classifier, "classes_", np.unique(predicted))
    counts = np.array([(predicted == c).sum() for c in classes], dtype=float)
    p = counts[counts > 0] / counts.sum()
    return float(-(p * np.log2(p)).sum())
