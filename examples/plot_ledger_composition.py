"""
One budget, composed tightly
============================

Every fit of a sweep over private data spends budget, and a :class:`skdp.BudgetLedger` records each
spend. Adding epsilons (basic composition) overcharges: thirty DP-SGD fits at epsilon 1 are charged
30. Each fit's noise is Gaussian, and Renyi DP composes Gaussian releases far more tightly: the
ledger records every fit's RDP curve and, by default (``composition="rdp"``), reports the tighter
total and lets its caps act as an RDP *privacy filter* (Feldman & Zrnic 2021), valid even when each
next fit is chosen after seeing the previous results.

Here the thirty fits are those of ``DPMomentumClassifier(epsilon=1)`` with its defaults on 80% of
digits (1,437 records): the same noise, lot size and number of steps each time, so one fit's
planned cost is computed once (from public quantities only; nothing is trained).
"""
import matplotlib.pyplot as plt
import numpy as np

from skdp import BudgetLedger, DPMomentumClassifier
from skdp.exceptions import BudgetExceededError
from skdp.privacy.search import planned_costs

(cost,) = planned_costs(DPMomentumClassifier(epsilon=1.0, delta=1e-5), n_samples=1437)

# %%
# A ledger with a delta cap of 1e-5 (and a generous epsilon cap) reports, after each fit, the tighter of
# the sum of epsilons and the RDP composition converted at that delta.
ledger = BudgetLedger(epsilon=100.0, delta=1e-5)
added, composed = [], []
for fit in range(30):
    ledger.spend(cost.epsilon, cost.delta, label=f"fit {fit}", cost=cost)
    added.append(sum(r["epsilon"] for r in ledger.records()))
    composed.append(ledger.total()[0])

# %%
# With caps, the ledger is a filter at one RDP order fixed from the caps: a cap of 3 admits this
# many fits (basic composition would admit 3).
capped = BudgetLedger(epsilon=3.0, delta=1e-5)
admitted = 0
try:
    while True:
        capped.spend(cost.epsilon, cost.delta, cost=cost)
        admitted += 1
except BudgetExceededError:
    pass
print(f"after 10 fits: added {added[9]:.1f}, composed {composed[9]:.2f}; "
      f"a cap of 3 admits {admitted} fits (filter order {capped.filter_order:g})")

fig, ax = plt.subplots(figsize=(6, 4))
n = np.arange(1, 31)
ax.plot(n, added, "o-", ms=3, label="added (basic composition)")
ax.plot(n, composed, "o-", ms=3, label="composed (RDP, delta 1e-5)")
ax.axhline(3.0, color="grey", ls="--", lw=1)
ax.annotate(f"a cap of 3: {admitted} fits", (admitted, 3.0), xytext=(admitted + 2, 6),
            arrowprops={"arrowstyle": "->"})
ax.set_xlabel("fits at epsilon 1 (digits, default schedule)")
ax.set_ylabel("cumulative epsilon")
ax.set_title("One ledger, thirty fits")
ax.legend()
fig.tight_layout()
plt.show()
