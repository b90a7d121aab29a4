"""
A private hyperparameter search
===============================

``GridSearchCV`` on private data releases its choice of candidate, and no per-fit epsilon covers that
choice. :class:`skdp.PrivateSearchCV` is random-stopping search (Papernot & Steinke, ICLR 2022): a
secret random number of trials, each a candidate drawn at random, trained with DP-SGD and scored with
noise on a private validation part; only the best is released. Its ``epsilon_`` covers everything it
releases: the model, ``best_params_`` and the noisy ``best_score_``.

The price is that each trial gets a fraction of the budget. Here the search at a total epsilon of 4
is compared with the defaults at the same epsilon.
"""
import matplotlib.pyplot as plt
import numpy as np
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

from skdp import BudgetLedger, DPMomentumClassifier, PrivateSearchCV

X, y = load_digits(return_X_y=True)
X = X / 8.0 - 1.0  # public pixel range
Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.2, stratify=y, random_state=0)

# %%
# One ledger for everything that touches the private training data: the search charges it once,
# with its certified total, before any training.
ledger = BudgetLedger(epsilon=10, delta=1e-4)
search = PrivateSearchCV(DPMomentumClassifier(classes=np.arange(10)),
                         {"module": ["linear", "mlp"], "momentum": [0.5, 0.9]},
                         epsilon=4.0, delta=1e-5, n_trials_mean=3, ledger=ledger)
search.fit(Xtr, ytr)
print(f"released: {search.best_params_}, noisy validation score {search.best_score_:.3f}")
print(f"certified epsilon of the whole search {search.epsilon_:.3f}; one trial alone "
      f"{search.trial_epsilon_:.3f}")

defaults = DPMomentumClassifier(epsilon=4.0, delta=1e-5, classes=np.arange(10), ledger=ledger).fit(Xtr, ytr)
print("ledger:", [f"{eps:.2f}" for eps, _, _ in ledger.entries], "total", ledger.total())

# %%
# Test accuracy of the two at the same certified epsilon. With good defaults, private tuning pays
# only when the grid holds much better candidates than the defaults.
acc = [search.score(Xte, yte), defaults.score(Xte, yte)]
fig, ax = plt.subplots(figsize=(5, 3.5))
ax.bar(["PrivateSearchCV\n(4 candidates, ~3 trials)", "defaults"], acc, color=["tab:blue", "tab:grey"])
for i, a in enumerate(acc):
    ax.text(i, a + 0.005, f"{a:.3f}", ha="center")
ax.set_ylim(0.5, 1.0)
ax.set_ylabel("test accuracy")
ax.set_title("load_digits at a total epsilon of 4")
fig.tight_layout()
plt.show()
