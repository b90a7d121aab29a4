"""
Quick start: one private fit, then a search whose every fit is recorded
=======================================================================

The README's Quick start, line for line (``tests/test_tabular_usability.py`` keeps the two the same).
One ``DPMomentumClassifier`` fit with its defaults, then a ``GridSearchCV`` over epsilon (a
privacy-utility curve) whose every fit is charged to one ``BudgetLedger``. The ledger's total is what
the whole search spent (composed by RDP); the search's *choice* of the best candidate is not covered
(see :class:`skdp.PrivateSearchCV` for a certified choice).

Shown, not run, when this site is built (about a minute on 2 CPU cores):
``python examples/quickstart.py``.
"""
from sklearn.datasets import load_digits
from sklearn.model_selection import GridSearchCV, train_test_split
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import FunctionTransformer
from skdp import DPMomentumClassifier, BudgetLedger


def scale(X):
    return X / 8 - 1  # the pixel range [0, 16] is public: scale without looking at the data


X, y = load_digits(return_X_y=True)
Xtr, Xte, ytr, yte = train_test_split(X, y, stratify=y, random_state=0)

clf = DPMomentumClassifier(epsilon=1.0, delta=1e-5, classes=range(10), random_state=0, verbose=1)
clf.fit(scale(Xtr), ytr)
print(clf.score(scale(Xte), yte), clf.epsilon_)   # ~0.90, epsilon_ <= 1.0 (certified)
print(clf.batch_size_, clf.max_epochs_, clf.lr_)  # the auto schedule, from public quantities only

# Every fit of a search spends budget on the same data: record them all in one ledger
# (in memory: this process only; with n_jobs=2 use BudgetLedger(path="budget.db")).
ledger = BudgetLedger(epsilon=20, delta=1e-3)
pipe = Pipeline([("scale", FunctionTransformer(scale)),
                 ("clf", DPMomentumClassifier(classes=range(10), ledger=ledger))])
GridSearchCV(pipe, {"clf__epsilon": [0.5, 1, 2]}, cv=3).fit(Xtr, ytr)
print(len(ledger.entries), ledger.total())  # 10 fits (3 candidates x 3 folds + refit): ~(3.7, 1e-3) by RDP
