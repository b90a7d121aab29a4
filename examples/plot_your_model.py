"""
Bring your own model: which layers take the fast path
=====================================================

DP-SGD needs each example's gradient norm. skdp gets it layer by layer, by an exact rule where it has
one (``Linear``, convolutions, ``Embedding``, ``LayerNorm``, ...), by Opacus's grad sampler where Opacus
has one, and otherwise by ``torch.func.vmap``, exact but slower. :func:`skdp.nn.check_module` says which
path each layer takes and refuses what DP-SGD cannot train privately; :func:`skdp.nn.fix_module`
swaps in DP-compatible layers.

Here a user's model reads each 8x8 digit as 8 steps of 8 pixels through torch's ``nn.LSTM`` and has a
``BatchNorm1d`` before its head: one layer is refused and one takes the slow path.
"""
import time
import warnings

import matplotlib.pyplot as plt
import numpy as np
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch import nn

from skdp import DPMomentumClassifier
from skdp.exceptions import UnsupportedModuleError
from skdp.nn import check_module, fix_module


class RowReader(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.LSTM(8, 32, batch_first=True)
        self.norm = nn.BatchNorm1d(32)
        self.head = nn.Linear(32, 10)

    def forward(self, x):
        out, _ = self.rnn(x.reshape(len(x), 8, 8))
        return self.head(self.norm(out[:, -1]))


# torch's own note that nn.LSTM has no vmap batching rule (the slow path below shows what it costs)
warnings.filterwarnings("ignore", message="There is a performance drop")

print(check_module(RowReader()))

# %%
# The fit refuses the model before any privacy budget is spent, with the checker's message.
X, y = load_digits(return_X_y=True)
X = (X / 16).astype(np.float32)  # public pixel range
Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.2, stratify=y, random_state=0)
try:
    DPMomentumClassifier(RowReader(), epsilon=1.0, classes=range(10)).fit(Xtr, ytr)
except UnsupportedModuleError as exc:
    print("refused:", str(exc)[:160], "...")

# %%
# ``fix_module`` returns a copy with ``GroupNorm`` for ``BatchNorm1d`` and ``DPLSTM`` (an LSTM built
# from ``Linear`` cells) for ``nn.LSTM``, weights copied. Every layer now takes an exact rule. Below,
# the same DP fit (1 epoch, epsilon 1) with the LSTM on the vmap path and on the rules.
fixed = fix_module(RowReader())
print(check_module(fixed))

slow = RowReader()
slow.norm = nn.Identity()  # only the refused layer taken out: the LSTM stays on vmap
seconds = {}
for name, module in [("nn.LSTM (vmap)", slow), ("fix_module: DPLSTM (rules)", fixed)]:
    t = time.perf_counter()
    clf = DPMomentumClassifier(module, epsilon=1.0, max_epochs=1, classes=range(10)).fit(Xtr, ytr)
    seconds[name] = time.perf_counter() - t
    print(f"{name:28s} {seconds[name]:5.1f} s   certified epsilon {clf.epsilon_:.3f}")

fig, ax = plt.subplots(figsize=(6, 2.8))
ax.barh(list(seconds), list(seconds.values()), color=["tab:grey", "tab:blue"])
ax.set_xlabel("fit time, 1 epoch at epsilon 1 (s)")
ax.set_title("The same LSTM, two per-example gradient paths")
fig.tight_layout()
plt.show()
