"""
Synthetic digits from PGEGenerator
==================================

PGE learns the data's score (the gradient of its log-density) privately by sliced score matching,
then samples new records by Hamiltonian Monte Carlo. Here it is fitted on scikit-learn's digits at
epsilon = 1 (certified: DP-SGD with the Gaussian score module, the default under DP noise), a grid
of synthetic digits is drawn, and a classifier trained only on synthetic data is tested on real
digits.

**Shown, not run** when this site is built: the fit takes about 5 to 8 minutes on 2 CPU cores. Run it
with ``python examples/pge_synthetic_digits.py``. A grid from the benchmark run
(``benchmarks/bench_pge.py``, 2026-11-22) looks like this:

.. image:: ../../benchmarks/results/pge_samples_digits_dpsgd_eps1.png
   :alt: synthetic digits at epsilon 1
   :width: 480px
"""
import matplotlib.pyplot as plt
import numpy as np
from sklearn.datasets import load_digits
from sklearn.frozen import FrozenEstimator
from sklearn.model_selection import train_test_split

from skdp import PGEGenerator, TrainOnSynthetic

X, y = load_digits(return_X_y=True)
Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.2, stratify=y, random_state=0)

# The pixel range [0, 16] and the ten labels are public: given, not read off the data.
gen = PGEGenerator(epsilon=1.0, delta=1e-5, bounds=(0, 16), classes=range(10), random_state=0, verbose=1)
gen.fit(Xtr, ytr)
print(f"certified: {gen.privacy_certified_}, epsilon {gen.epsilon_:.3f}")

X_syn, y_syn = gen.sample(100, random_state=0)
fig, axes = plt.subplots(10, 10, figsize=(6, 6))
order = np.argsort(y_syn, kind="stable")
for ax, i in zip(axes.ravel(), order):
    ax.imshow(X_syn[i].reshape(8, 8), cmap="gray_r", vmin=0, vmax=16)
    ax.axis("off")
fig.suptitle("PGEGenerator on load_digits, epsilon = 1")
plt.show()

# Train on synthetic, test on real. FrozenEstimator: sample from the generator fitted above;
# refitting a clone would spend epsilon again.
tos = TrainOnSynthetic(FrozenEstimator(gen), random_state=0).fit(Xtr, ytr)
print(f"accuracy on real test digits of a classifier trained on synthetic ones: {tos.score(Xte, yte):.3f}")
