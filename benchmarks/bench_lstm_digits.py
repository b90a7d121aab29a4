"""User story (issue 16): an LSTM on load_digits (8 steps of 8 pixels, hidden 64), DPMomentumClassifier, 2 epochs.

Run: python benchmarks/bench_lstm_digits.py before   # nn.LSTM, clipping="vmap"
     python benchmarks/bench_lstm_digits.py after    # fix_module -> DPLSTM on the hooks
"""
import sys, time, warnings
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1]))
warnings.simplefilter("ignore")
import torch
from torch import nn
from sklearn.datasets import load_digits
from skdp import DPMomentumClassifier
from skdp.nn import fix_module

class DigitsLSTM(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.LSTM(8, 64, batch_first=True)
        self.head = nn.Linear(64, 10)
    def forward(self, x):
        return self.head(self.rnn(x.reshape(len(x), 8, 8))[0][:, -1])

X, y = load_digits(return_X_y=True)
X = (X / 16).astype("float32")
for label, module, clipping in [(sys.argv[1], DigitsLSTM() if sys.argv[1] == "before" else fix_module(DigitsLSTM()),
                                 "vmap" if sys.argv[1] == "before" else "auto")]:
    t = time.perf_counter()
    clf = DPMomentumClassifier(module, max_epochs=2, epsilon=1.0, clipping=clipping, random_state=0).fit(X, y)
    print(label, type(clf.net_.module_.rnn).__name__, clipping, f"{time.perf_counter() - t:.1f} s",
          "accuracy", round(clf.score(X, y), 3), "batch", clf.batch_size_)
