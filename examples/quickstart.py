"""
Quick start: one private fit, then a search whose every fit is recorded
=======================================================================

One ``DPMomentumClassifier`` fit with its defaults, then a ``GridSearchCV`` over epsilon (a
privacy-utility curve) whose every fit is charged to one ``BudgetLedger``. The ledger's total is what
the whole search spent by basic composition; the search's *choice* of the best candidate is not
covered (see :class:`skdp.PrivateSearchCV` for a certified choice).

Shown, not run, when this site is built (about a minute on 2 CPU cores):
``python examples/quickstart.py``.
"""
import numpy as np
from sklearn.datasets import load_digits
from sklearn.model_selection import GridSearchCV, train_test_split
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import FunctionTransformer

from skdp import BudgetLedger, DPMomentumClassifier


def scale_public_range(X):
    return X / 8.0 - 1.0  # digits' pixel range [0, 16] is public: no data is looked at


X, y = load_digits(return_X_y=True)
Xtr, Xte, ytr, yte = train_test_split(X, y, stratify=y, random_state=0)

clf = DPMomentumClassifier(epsilon=1.0, delta=1e-5, classes=np.arange(10), random_state=0, verbose=1)
clf.fit(scale_public_range(Xtr), ytr)
print(f"test accuracy {clf.score(scale_public_range(Xte), yte):.3f} at certified epsilon {clf.epsilon_:.3f}")
print(f"auto schedule from public quantities: lots of {clf.batch_size_}, {clf.max_epochs_} epochs, lr {clf.lr_:.3g}")

ledger = BudgetLedger(epsilon=20)
pipe = Pipeline([("scale", FunctionTransformer(scale_public_range)),
                 ("clf", DPMomentumClassifier(classes=np.arange(10), ledger=ledger, random_state=0))])
search = GridSearchCV(pipe, {"clf__epsilon": [0.5, 1, 2]}, cv=3).fit(Xtr, ytr)
print("best", search.best_params_, "fits recorded:", len(ledger.entries),
      "total (epsilon, delta) spent by basic composition:", ledger.total())
