"""What one release spends, and how spends compose: (epsilon, delta), RDP curves and adjacency.

A :class:`Spend` is the privacy cost of one release as its mechanism knows it:

- ``epsilon``, ``delta``: the (epsilon, delta)-DP guarantee it certifies;
- ``adjacency``: the neighbouring relation of that guarantee, ``"add/remove"``
  (one record added or removed: every skdp estimator but one) or
  ``"replace-one"`` (one record replaced by another: ``DFSRelease``, whose
  release of one noisy row per record cannot hide the number of records);
- ``rdp``: its Renyi-DP curve at :data:`LEDGER_ORDERS` under that adjacency
  when the mechanism has one (DP-SGD from its accountant, a Gaussian mechanism
  ``alpha * mu**2 / 2``, a pure epsilon-DP mechanism ``min(eps, alpha eps**2 / 2)``),
  else None (the spend is then known only as (epsilon, delta));
- ``replace_one``: the same release stated under replace-one adjacency (for an
  add/remove spend), so that spends of both kinds can be composed under one.

**One adjacency.** A replace-one guarantee says nothing under add/remove (a
release of one row per record tells the number of records), but an add/remove
guarantee implies a replace-one one, since a replacement is a removal then an
addition: by group privacy of size 2 an (eps, delta) add/remove spend is
``(2 eps, (1 + e^eps) delta)`` replace-one; a Gaussian mechanism's L2
sensitivity at most doubles (``mu -> 2 mu``, its RDP times 4); a pure
epsilon-DP mechanism is ``2 eps``-DP; an RDP curve obeys Mironov's group
bound ``rdp'(alpha) <= 3 rdp(2 alpha)`` (Mironov 2017, Prop. 2, ``c = 1``).
So :func:`compose` states the total under add/remove when every spend is
add/remove, and under replace-one, converting the add/remove spends, as soon
as one spend is replace-one.

**Composition.** Basic composition adds epsilons and deltas. RDP composition
adds the curves at each order and converts the sum to (epsilon, delta) at the
target delta (Balle et al. 2020, the conversion Opacus uses); spends without a
curve are added to that by basic composition. :func:`compose` reports the
tighter of the two at the same delta. Both hold for a sequence of releases
fixed in advance (a Pipeline, a GridSearchCV's fits); a sequence chosen
adaptively, fit after fit, is covered by the ledger's privacy filter
(:class:`~skdp.privacy.BudgetLedger`, ``doc/accounting.md``).
"""
import dataclasses
import math

import numpy as np

ADJACENCIES = ("add/remove", "replace-one")

# Fixed orders of the ledger's RDP curves: closed under doubling (each order's double is here, up to 1024),
# for Mironov's group bound rdp'(a) <= 3 rdp(2 a). Stored curves are at these orders; changing them
# would make old ledgers' curves unreadable (they are then read as curve-less spends).
# In a ledger's RDP filter, spends known only as (epsilon, delta) may use at most this share of the delta cap
# in total; the RDP part is always converted at the rest. Both are fixed by the caps before any spend (a
# conversion delta that shrank with adaptively chosen curve-less spends would void the filter).
CURVELESS_DELTA_SHARE = 0.5

LEDGER_ORDERS = (1.25, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0, 12.0, 16.0, 20.0, 24.0, 32.0, 40.0,
                 48.0, 64.0, 80.0, 96.0, 128.0, 160.0, 192.0, 256.0, 320.0, 384.0, 512.0, 640.0, 768.0,
                 1024.0, 2048.0)


def _no_nan(rdp):
    """The curve with NaN read as inf: no bound at that order (Opacus gives NaN at orders like 2048)."""
    rdp = np.asarray(rdp, dtype=float)
    return np.where(np.isnan(rdp), np.inf, rdp)


def rdp_to_epsilon(orders, rdp, delta):
    """``(epsilon, order)``: Opacus's conversion (``get_privacy_spent``) of an RDP curve at ``delta``.

    ``epsilon = min_a rdp(a) + log((a - 1)/a) - (log(delta) + log(a)) / (a - 1)`` (Balle et al. 2020).
    """
    orders, rdp = np.asarray(orders, dtype=float), _no_nan(rdp)
    with np.errstate(invalid="ignore"):
        eps = rdp + np.log1p(-1 / orders) - (math.log(delta) + np.log(orders)) / (orders - 1)
    eps = np.where(np.isnan(eps), np.inf, eps)  # inf - inf at an unbounded order
    i = int(np.argmin(eps))
    return max(0.0, float(eps[i])), float(orders[i])


def rdp_to_delta(orders, rdp, epsilon):
    """Smallest ``delta`` with ``rdp_to_epsilon(orders, rdp, delta) <= epsilon`` (the same conversion, inverted).

    ``log delta = (lambda - 1)(eps(lambda) - epsilon + log(1 - 1/lambda)) - log(lambda)``, minimised
    over the orders and capped at 1.
    """
    orders, rdp = np.asarray(orders, dtype=float), _no_nan(rdp)
    log_delta = (orders - 1) * (rdp - epsilon + np.log1p(-1 / orders)) - np.log(orders)
    return float(min(1.0, math.exp(min(0.0, float(np.min(log_delta))))))


def rdp_budget(order, epsilon, delta):
    """The RDP at ``order`` whose conversion at ``delta`` is exactly ``epsilon`` (the filter's budget)."""
    return epsilon - math.log1p(-1 / order) + (math.log(delta) + math.log(order)) / (order - 1)


def filter_order(epsilon, delta):
    """The one RDP order of a privacy filter with caps ``(epsilon, delta)``, from the caps alone.

    A filter at a fixed order is valid under adaptive choice (Feldman & Zrnic
    2021); the order is chosen before any spend, from public caps, as the one
    that admits the most Gaussian-like spends (RDP proportional to the order):
    the largest ``rdp_budget(a, epsilon, delta) / a``. None when a cap is
    infinite or delta is not in (0, 1) (no filter needed, or none possible).
    """
    if not (math.isfinite(epsilon) and 0 < delta < 1):
        return None
    return max(LEDGER_ORDERS, key=lambda a: rdp_budget(a, epsilon, delta) / a)


def _curve(values):
    if values is None:
        return None
    curve = tuple(float(v) for v in values)
    if len(curve) != len(LEDGER_ORDERS):
        raise ValueError(f"an RDP curve has one value per order of LEDGER_ORDERS ({len(LEDGER_ORDERS)}), "
                         f"got {len(curve)}.")
    if any(math.isnan(v) or v < 0 for v in curve):
        raise ValueError("an RDP curve's values must be >= 0 (inf for no bound at an order), got NaN or < 0.")
    return curve


def group_of_two(epsilon, delta):
    """``(2 eps, (1 + e^eps) delta)``: an add/remove (eps, delta) guarantee stated for replace-one."""
    if math.isinf(epsilon):
        return math.inf, 0.0
    return 2 * epsilon, min(1.0, (1 + math.exp(min(epsilon, 700.0))) * delta)


@dataclasses.dataclass(frozen=True)
class Spend:
    """The privacy cost of one release: (epsilon, delta), its adjacency and, when known, its RDP curve.

    Build one with the constructors (:meth:`approx`, :meth:`pure`,
    :meth:`gaussian`, :meth:`from_rdp`); they also state the release under
    replace-one adjacency (``replace_one``), so that spends of both adjacencies
    compose under one (:func:`compose`).

    Parameters
    ----------
    epsilon : float
        Epsilon of the release, >= 0 (inf: no noise).
    delta : float
        Delta of the release, in [0, 1].
    adjacency : {"add/remove", "replace-one"}, default="add/remove"
        The neighbouring relation of the guarantee.
    rdp : tuple of float or None, default=None
        Renyi-DP at :data:`LEDGER_ORDERS` under ``adjacency``; None if unknown.
    replace_one : Spend or None, default=None
        The same release under replace-one (for an add/remove spend); None:
        group privacy of two is used.

    See Also
    --------
    compose : The total of several spends.
    BudgetLedger : Records spends and caps their composition.

    Examples
    --------
    >>> from skdp.privacy import Spend, compose
    >>> spends = [Spend.gaussian(0.3, 1e-6) for _ in range(10)]
    >>> eps, delta, adjacency = compose(spends)
    >>> round(eps, 2), delta, adjacency
    (4.46, 1e-05, 'add/remove')
    """

    epsilon: float
    delta: float
    adjacency: str = "add/remove"
    rdp: tuple | None = None
    replace_one: "Spend | None" = None

    def __post_init__(self):
        if self.adjacency not in ADJACENCIES:
            raise ValueError(f"adjacency must be one of {ADJACENCIES}, got {self.adjacency!r}.")
        eps, delta = float(self.epsilon), float(self.delta)
        if not (eps >= 0 and 0 <= delta <= 1):
            raise ValueError(f"a spend needs epsilon >= 0 and delta in [0, 1], got ({self.epsilon!r}, {self.delta!r}).")
        object.__setattr__(self, "epsilon", eps)
        object.__setattr__(self, "delta", 0.0 if math.isinf(eps) else delta)
        object.__setattr__(self, "rdp", _curve(self.rdp))
        if self.replace_one is not None and self.replace_one.adjacency != "replace-one":
            raise ValueError("Spend.replace_one must be stated under replace-one adjacency.")

    # -- constructors ----------------------------------------------------------------------
    @classmethod
    def approx(cls, epsilon, delta, adjacency="add/remove"):
        """Build a spend known only as (epsilon, delta): no RDP curve (pure when delta is 0: it has one).

        Parameters
        ----------
        epsilon : float
            Epsilon, >= 0.
        delta : float
            Delta, in [0, 1].
        adjacency : {"add/remove", "replace-one"}, default="add/remove"
            The neighbouring relation of the guarantee.

        Returns
        -------
        spend : Spend
            The spend.
        """
        if float(delta) == 0:
            return cls.pure(epsilon, adjacency)
        return cls(epsilon, delta, adjacency)

    @classmethod
    def pure(cls, epsilon, adjacency="add/remove"):
        """Build a pure epsilon-DP spend: RDP ``min(eps, alpha eps**2 / 2)`` (Bun & Steinke 2016, Prop. 1.4).

        Parameters
        ----------
        epsilon : float
            Epsilon, >= 0.
        adjacency : {"add/remove", "replace-one"}, default="add/remove"
            The neighbouring relation of the guarantee; under replace-one an
            add/remove one becomes ``2 epsilon`` (exact group privacy).

        Returns
        -------
        spend : Spend
            The spend.
        """
        eps = float(epsilon)
        curve = tuple(min(eps, a * eps * eps / 2) for a in LEDGER_ORDERS) if math.isfinite(eps) else None
        other = None if adjacency == "replace-one" else cls.pure(2 * eps, "replace-one")  # group privacy, exact
        return cls(eps, 0.0, adjacency, curve, other)

    @classmethod
    def gaussian(cls, mu, delta, adjacency="add/remove", epsilon=None, replace_one_mu=None):
        """Build the spend of a ``mu``-Gaussian-DP release.

        ``mu = sensitivity / sigma`` for one Gaussian mechanism, ``sqrt(sum
        mu_i**2)`` for several. Its RDP is ``alpha mu**2 / 2``; its epsilon at
        ``delta`` the exact Gaussian profile. Under replace-one the sensitivity
        at most doubles: ``2 mu``.

        Parameters
        ----------
        mu : float
            The Gaussian-DP parameter, >= 0.
        delta : float
            Delta of the guarantee, in (0, 1).
        adjacency : {"add/remove", "replace-one"}, default="add/remove"
            The neighbouring relation of ``mu``.
        epsilon : float or None, default=None
            What the estimator certified; None: computed from ``mu`` and ``delta``.
        replace_one_mu : float or None, default=None
            A tighter replace-one figure than ``2 mu`` that the mechanism proves.

        Returns
        -------
        spend : Spend
            The spend.
        """
        from ..mechanisms.gaussian import gaussian_dp_epsilon

        mu = float(mu)
        eps = gaussian_dp_epsilon(mu, delta) if epsilon is None else float(epsilon)
        curve = tuple(a * mu * mu / 2 for a in LEDGER_ORDERS) if math.isfinite(mu) else None
        mu_r = 2 * mu if replace_one_mu is None else float(replace_one_mu)
        other = None if adjacency == "replace-one" else cls.gaussian(mu_r, delta, "replace-one")
        return cls(eps, delta, adjacency, curve, other)

    @classmethod
    def from_rdp(cls, rdp, epsilon, delta, adjacency="add/remove"):
        """Build the spend of a release with an RDP curve and its certified (epsilon, delta).

        Under replace-one: group privacy of two for (epsilon, delta), and
        Mironov's bound ``3 rdp(2 a)`` for the curve (inf where ``2 a`` is not
        an order).

        Parameters
        ----------
        rdp : sequence of float
            RDP at :data:`LEDGER_ORDERS` (DP-SGD's accountant), >= 0, inf for no bound.
        epsilon : float
            The certified epsilon.
        delta : float
            Its delta.
        adjacency : {"add/remove", "replace-one"}, default="add/remove"
            The neighbouring relation of the curve and the guarantee.

        Returns
        -------
        spend : Spend
            The spend.
        """
        curve = _curve(rdp)
        other = None
        if adjacency == "add/remove":
            e2, d2 = group_of_two(epsilon, delta)
            at = dict(zip(LEDGER_ORDERS, curve)) if curve is not None else None
            doubled = None if at is None else tuple(3 * at.get(2 * a, math.inf) for a in LEDGER_ORDERS)
            other = cls(e2, d2, "replace-one", doubled)
        return cls(epsilon, delta, adjacency, curve, other)

    @classmethod
    def envelope(cls, spends):
        """Build a spend at least as costly as each of ``spends``: the pointwise maxima.

        Parameters
        ----------
        spends : iterable of Spend
            Spends of one adjacency.

        Returns
        -------
        spend : Spend
            The spend.
        """
        spends = list(spends)
        if len({s.adjacency for s in spends}) != 1:
            raise ValueError("an envelope needs spends of one adjacency.")
        curves = [s.rdp for s in spends]
        curve = None if any(c is None for c in curves) else tuple(np.max(np.asarray(curves), axis=0))
        others = [s.replace_one for s in spends]
        other = None if any(o is None for o in others) else cls.envelope(others)
        return cls(max(s.epsilon for s in spends), max(s.delta for s in spends), spends[0].adjacency, curve, other)

    # -- views -------------------------------------------------------------------------------
    def under(self, adjacency):
        """State this spend under ``adjacency`` (replace-one from add/remove; never the other way).

        Parameters
        ----------
        adjacency : {"add/remove", "replace-one"}
            The adjacency wanted.

        Returns
        -------
        spend : Spend
            The same release under ``adjacency``.

        Raises
        ------
        ValueError
            For add/remove from a replace-one spend: such a guarantee does not exist.
        """
        if adjacency == self.adjacency:
            return self
        if adjacency == "replace-one":
            if self.replace_one is not None:
                return self.replace_one
            return Spend(*group_of_two(self.epsilon, self.delta), "replace-one")
        raise ValueError("a replace-one guarantee does not imply an add/remove one (a release of one row per "
                         "record tells the number of records): state the composition under replace-one.")

    def to_dict(self):
        """Return the spend as plain numbers and lists (for storage).

        Returns
        -------
        data : dict
            Keys ``epsilon``, ``delta``, ``adjacency``, ``rdp`` and ``replace_one``.
        """
        return {"epsilon": self.epsilon, "delta": self.delta, "adjacency": self.adjacency,
                "rdp": None if self.rdp is None else list(self.rdp),
                "replace_one": None if self.replace_one is None else self.replace_one.to_dict()}

    @classmethod
    def from_dict(cls, data):
        """Build a spend from :meth:`to_dict`'s output.

        Parameters
        ----------
        data : dict
            A spend as plain numbers and lists.

        Returns
        -------
        spend : Spend
            The spend.
        """
        other = data.get("replace_one")
        return cls(data["epsilon"], data["delta"], data.get("adjacency", "add/remove"), data.get("rdp"),
                   None if other is None else cls.from_dict(other))


def common_adjacency(spends):
    """``"replace-one"`` if any spend is replace-one, else ``"add/remove"``."""
    return "replace-one" if any(s.adjacency == "replace-one" for s in spends) else "add/remove"


def basic(spends):
    """``(sum of epsilons, sum of deltas)`` (deltas capped at 1)."""
    eps = sum((s.epsilon for s in spends), 0.0)
    return eps, min(1.0, sum((s.delta for s in spends), 0.0))


def rdp_epsilon(spends, delta, order=None, reserve=None):
    """Epsilon at ``delta`` of the spends composed under RDP; spends without a curve added by basic composition.

    ``order``: convert at that order only (a filter's fixed order); None: the
    best order. ``reserve``: the share of ``delta`` fixed in advance for the
    curve-less spends (their deltas must fit in it; the RDP part converts at
    ``delta - reserve`` whatever they spend); None: their deltas are taken
    from ``delta`` first (valid for spends fixed in advance only). inf when
    the deltas do not fit.
    """
    curved = [s for s in spends if s.rdp is not None]
    rest = [s for s in spends if s.rdp is None]
    eps_rest, delta_rest = basic(rest)
    if reserve is not None:
        if delta_rest > reserve * (1 + 1e-9):
            return math.inf
        left = delta - reserve
    else:
        left = delta - delta_rest
    if not curved:
        return eps_rest if delta_rest <= delta else math.inf
    if not left > 0:
        return math.inf
    total = np.sum([np.asarray(s.rdp) for s in curved], axis=0)
    if order is None:
        eps = rdp_to_epsilon(LEDGER_ORDERS, total, left)[0]
    else:
        i = LEDGER_ORDERS.index(order)
        eps = rdp_to_epsilon([order], [total[i]], left)[0]
    return eps + eps_rest


def compose(spends, delta=None):
    """``(epsilon, delta, adjacency)`` of releases fixed in advance: the tighter of basic and RDP composition.

    Every spend is first stated under one adjacency (:func:`common_adjacency`).
    Basic composition gives ``(sum eps, sum delta)``; RDP composition is
    converted at ``delta`` (default: that same sum of deltas, so that both
    totals are at one delta) and the smaller epsilon is reported.

    Parameters
    ----------
    spends : iterable of Spend
        The releases.
    delta : float or None, default=None
        Target delta of the RDP conversion; None: the sum of the deltas.

    Returns
    -------
    epsilon : float
        The composed epsilon.
    delta : float
        Its delta.
    adjacency : str
        The adjacency of the total.

    See Also
    --------
    Spend : One release's cost.
    privacy_spent : The same composition over a fitted estimator's steps.

    Examples
    --------
    >>> from skdp.privacy import Spend, compose
    >>> compose([Spend.approx(1.0, 1e-6), Spend.approx(2.0, 1e-6, "replace-one")])
    (4.0, 4.718281828459045e-06, 'replace-one')
    """
    spends = list(spends)
    adjacency = common_adjacency(spends)
    spends = [s.under(adjacency) for s in spends]
    eps_b, delta_b = basic(spends)
    if not spends or math.isinf(eps_b) and all(s.rdp is None or math.isinf(s.epsilon) for s in spends):
        return eps_b, (0.0 if math.isinf(eps_b) else delta_b), adjacency
    target = delta_b if delta is None else float(delta)
    if 0 < target < 1:
        eps_r = rdp_epsilon(spends, target)
        if eps_r < eps_b or delta_b > target:
            return eps_r, target, adjacency
    return eps_b, delta_b, adjacency
