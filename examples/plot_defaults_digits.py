"""
Defaults only: a private digits classifier with nothing tuned
=============================================================

Every tuning run on private data costs privacy budget, so skdp's defaults are meant to be used as they
are. Here the user gives only epsilon, delta, the public label set and the public pixel range; the
classifier chooses its lot size, number of epochs and learning rate from public quantities (shown), and
a fixed wavelet scattering transform in front of it (no privacy cost) adds a little more.

Runs in about a minute on 2 cores.
"""
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
for epsilon in (0.5, 1.0, 2.0, 10.0):
    clf = DPMomentumClassifier(epsilon=epsilon, delta=1e-5, classes=range(10)).fit(Xtr, ytr)
    scat = make_pipeline(ScatteringTransform(J=1, L=8, n_groups=9, image_shape=(8, 8)),
                         DPMomentumClassifier(epsilon=epsilon, delta=1e-5, classes=range(10))).fit(Xtr, ytr)
    print(f"{epsilon:>8g}  {clf.score(Xte, yte):>7.3f}  {scat.score(Xte, yte):>10.3f}  "
          f"{clf.batch_size_} / {clf.max_epochs_} / {clf.lr_:.3g}   (certified epsilon {clf.epsilon_:.3f})")
