"""
Accuracy against epsilon on digits
==================================

How much accuracy does privacy cost? ``DPMomentumClassifier`` is fitted on scikit-learn's digits at
several privacy budgets, with its defaults: only ``epsilon``, ``delta``, the public label set and the
public pixel range are given. Each fit draws fresh noise, so each budget is fitted twice and the plot
shows the mean and the spread, beside a non-private logistic regression.
"""
import matplotlib.pyplot as plt
import numpy as np
from sklearn.datasets import load_digits
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import train_test_split

from skdp import DPMomentumClassifier

X, y = load_digits(return_X_y=True)
X = X / 8.0 - 1.0  # the pixel range [0, 16] is public: scaled without looking at the data
Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.2, stratify=y, random_state=0)

# %%
# Fit at each budget. ``epsilon_`` is the certified epsilon the accountant reports: never above the
# target. The noise is fresh in every fit (``random_state`` seeds only the initialisation).
epsilons = [0.25, 0.5, 1.0, 4.0]
scores = {eps: [] for eps in epsilons}
for eps in epsilons:
    for seed in range(2):
        clf = DPMomentumClassifier(epsilon=eps, delta=1e-5, classes=np.arange(10), random_state=seed)
        scores[eps].append(clf.fit(Xtr, ytr).score(Xte, yte))
    print(f"epsilon {eps:>4}: accuracy {np.mean(scores[eps]):.3f} ± {np.std(scores[eps]):.3f} "
          f"(certified epsilon {clf.epsilon_:.3f})")
baseline = LogisticRegression(max_iter=2000).fit(Xtr, ytr).score(Xte, yte)

# %%
# The privacy-utility curve.
mean = np.array([np.mean(scores[e]) for e in epsilons])
std = np.array([np.std(scores[e]) for e in epsilons])
fig, ax = plt.subplots(figsize=(6, 4))
ax.errorbar(epsilons, mean, yerr=std, marker="o", capsize=3, label="DPMomentumClassifier (defaults)")
ax.axhline(baseline, color="grey", linestyle="--", label="non-private LogisticRegression")
ax.set_xscale("log")
ax.set_xlabel("epsilon (delta = 1e-5)")
ax.set_ylabel("test accuracy")
ax.set_title("load_digits: accuracy against epsilon")
ax.legend(loc="lower right")
fig.tight_layout()
plt.show()
