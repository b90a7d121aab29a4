"""
Defaults only: a private digits classifier with nothing tuned
=============================================================

Every tuning run on private data costs privacy budget, so skdp's defaults are meant to be used as they
are. Here the user gives only epsilon, delta, the public label set and the public pixel range; the
classifier chooses its lot size, number of epochs and learning rate from public quantities (shown), and
a fixed wavelet scattering transform in front of it (no privacy cost) adds a little more.

The plot compares raw pixels and scattering features at each budget.
"""
import matplotlib.pyplot as plt
import numpy as np
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from sklearn.pipeline import make_pipeline

from skdp import DPMomentumClassifier
from skdp.preprocessing import ScatteringTransform

X, y = load_digits(return_X_y=True)
X = X / 8.0 - 1.0  # the pixel range [0, 16] is public: scaled without looking at the data
Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.2, stratify=y, random_state=0)

print(f"{'epsilon':>8}  {'pixels':>7}  {'scattering':>10}  auto schedule (lot / epochs / lr)")
pixels, scattering, epsilons = [], [], (0.5, 1.0, 4.0)
for epsilon in epsilons:
    clf = DPMomentumClassifier(epsilon=epsilon, delta=1e-5, classes=range(10)).fit(Xtr, ytr)
    scat = make_pipeline(ScatteringTransform(image_shape=(8, 8)),
                         DPMomentumClassifier(epsilon=epsilon, delta=1e-5, classes=range(10))).fit(Xtr, ytr)
    print(f"{epsilon:>8g}  {clf.score(Xte, yte):>7.3f}  {scat.score(Xte, yte):>10.3f}  "
          f"{clf.batch_size_} / {clf.max_epochs_} / {clf.lr_:.3g}   (certified epsilon {clf.epsilon_:.3f})")
    pixels.append(clf.score(Xte, yte))
    scattering.append(scat.score(Xte, yte))

# %%
# Scattering features are a fixed transform (no parameters learnt, no privacy spent): they make the
# private linear model's job easier at every budget.
fig, ax = plt.subplots(figsize=(6, 4))
ax.plot(epsilons, pixels, "o-", label="pixels")
ax.plot(epsilons, scattering, "s-", label="ScatteringTransform -> classifier")
ax.set_xscale("log")
ax.set_xlabel("epsilon (delta = 1e-5)")
ax.set_ylabel("test accuracy")
ax.set_title("Defaults only, one fit per budget (fresh noise)")
ax.legend(loc="lower right")
fig.tight_layout()
plt.show()
