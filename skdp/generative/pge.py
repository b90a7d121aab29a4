"""PGEGenerator: Private Gradient Estimation (Liu et al. 2023), faithful and certified."""
import math
import numbers
import time
import warnings

import numpy as np
import torch
from sklearn.base import _fit_context
from sklearn.utils._param_validation import HasMethods, Interval, StrOptions
from sklearn.utils.validation import check_is_fitted, validate_data

from ..exceptions import PrivacyLeakWarning, warn_privacy
from .tabular import TableCodec, needs_codec
from ..privacy.composition import Spend
from ..privacy.ledger import charge
from ..utils.bounds import resolve_bounds
from ..nn._estimator import DPSGDEstimator, fill_dp_docs
from ..nn.net import check_device
from ..privacy import set_privacy_attributes
from ..utils.log import ProgressTimer, progress, progress_callback
from ..imaging.layout import row_image_shape
from ..utils import taps
from ..utils.random import make_rng, mechanism_rng, torch_generator
from ..utils.validation import DPSGD_CONSTRAINTS, encode_labels, resolve_batch_size, warn_if_delta_too_large
from .hmc import hmc_sample
from .net import PGENet, harmonic_square_levels
from .networks import GaussianScore, ScoreCNN, ScoreMLP

# Share of epsilon that releases the class proportions (Laplace noise on the counts).
COUNT_SHARE = 0.05
# Chains sampled together.
SAMPLE_CHUNK = 4096
# cells="auto": at least this many records per cell on average (n is public); chosen on development splits
# (the benchmark's training parts split again) of ISLR Default and modeldata credit_data at epsilon 1
# (benchmarks/dev_pge_cells.py, results/dev_pge_cells.md).
CELL_ROWS = 100
# cells="auto" never makes more conditions (classes x cells) than this: per-example gradients and the
# sampler's conditioning grow with them.
MAX_CELLS = 64


@fill_dp_docs
class PGEGenerator(DPSGDEstimator):
    """Generative model: a score network trained by sliced score matching, sampled by Hamiltonian dynamics.

    ``mechanism="dpsgd"`` (certified, the default)
        The sliced-score-matching loss is trained through skdp's DP-SGD engine:
        Poisson lots, per-example clipping of the loss's gradient (which
        differentiates the network, so torch.func computes it), Gaussian
        noise, RDP/PRV accounting. Class proportions are released with Laplace
        noise (``0.05 * epsilon``); the rest of epsilon goes to DP-SGD. The fit
        is (epsilon, delta)-DP under add/remove of one (x, y) record.
    ``mechanism="randomized_response"`` (not certified)
        Algorithm 1 of the supplement as written: randomized response with
        ``k`` candidates on the Gaussian projection vectors, no clipping, no
        noise. The projections are drawn independently of the data, so this
        protects no record; fitting warns with ``PrivacyLeakWarning``,
        ``privacy_certified_`` is False and ``epsilon_`` only repeats the
        paper's claim. Class proportions are taken from the data as they are.

    The network is conditioned on the noise level sigma: training uses the
    levels ``sigma_m = sigma_min * (M / m)^2`` (m = 1..M) so that Algorithm 2's
    step ``lambda0 * (M / m)^2`` stays proportional to the level (see
    ``skdp.generative.hmc``). Inputs are scaled to [-1, 1] by the public
    ``bounds``; samples are mapped back and clipped to them.

    Parameters
    ----------
    module : {"auto", "mlp", "cnn", "gaussian"}, default="auto"
        "gaussian": the score of a class-conditional diagonal Gaussian (2 k d
        parameters); under DP-SGD it is the one that keeps its signal at the
        data sizes we measured (digits, MNIST 8k, breast cancer). Its loss
        separates by coordinate, so under ``mechanism="dpsgd"`` it is trained
        on the exact divergence (no projections) with each coordinate's term
        weighted to keep the per-example gradients bounded
        (``skdp.generative.net.PGENet._separable_loss``). "auto":
        "gaussian" when DP-SGD adds noise (``mechanism="dpsgd"``, finite
        epsilon or a noise multiplier), else the networks of the paper: "cnn"
        when ``image_shape`` is given, "mlp" otherwise. The choice is in
        ``module_``.
    mechanism : {"dpsgd", "randomized_response"}, default="dpsgd"
        "dpsgd": certified DP-SGD; "randomized_response": the paper's
        mechanism, which certifies nothing (see above).
    {dp:epsilon}
    {dp:delta}
    k : int, default=10
        Candidates of the randomized response ("randomized_response" only).
    n_projections : int or "auto", default="auto"
        Gaussian projection vectors per example. "auto": 1 (the networks'
        per-example gradients cost one pass per projection). The Gaussian
        module under DP-SGD uses none: its divergence is exact. In
        ``n_projections_``.
    residual : bool, default=True
        The residual enhancement structure (skip connections).
    hidden_size, n_blocks : int, default=256, 2
        Width (channels for "cnn") and depth of the score network.
    sigma_min : float, default=0.01
        Smallest noise level of the score network (in the [-1, 1] scale of
        the inputs); the levels are ``sigma_min * (M / m)**2``, m = 1..M.
    n_levels : int, default=10
        M: noise levels, and sampling rounds of Algorithm 2.
    {dp:max_epochs}
    {dp:batch_size}
    lr : float or "auto", default="auto"
        Adam's learning rate (post-processing of the noisy gradients). "auto":
        3e-2 for the Gaussian module, 3e-3 for the networks. In ``lr_``.
    {dp:ema}
    {dp:max_grad_norm}
    {dp:noise_multiplier}
    {dp:accounting}
    bounds : None, (lower, upper) or dict, default=None
        Public range of the features; None reads it from the data (warns). A
        dict ``{column: (lower, upper)}`` gives each numeric column of a
        DataFrame its own (a column left out is read from the data: warns).
    categories : dict or None, default=None
        ``{column: [public categories]}`` of a DataFrame's categorical columns,
        modelled as categories (one-hot coordinates in {-1, 1}) and sampled
        back as values of the column's dtype (``skdp.generative.tabular``). A
        ``pd.CategoricalDtype`` column's categories and a bool column's are
        public as declared; another non-numeric column's are read from the
        data (warns; not certified).
    cells : "auto", list or None, default="auto"
        Columns of ``categories`` whose joint categories ("cells", crossed
        with the classes) condition the model: each cell gets its own
        parameters, so that a number's distribution may differ between the
        categories (a mixture with one component per cell), and the cell
        proportions are released with Laplace noise beside the class ones
        (the same ``0.05 * epsilon``: one record moves one count of the joint
        table by 1). Sampling draws a cell, sets those columns from it and
        samples the rest given it. "auto": under the Gaussian module, the
        columns of ``categories`` taken fewest categories first while the
        classes times the cells stay within ``n_samples / 100`` and 64 (public:
        the number of records is public, ``doc/privacy.md``); none otherwise,
        and none with ``epsilon=inf`` (the counts would be exact).
        A list names them (each must be a key of ``categories``); None:
        none. The columns used are in ``cell_columns_``.
    classes : array-like or None, default=None
        Public label set of a class-conditional model; None reads it from y (warns).
    image_shape : tuple or None, default=None
        (H, W) or (C, H, W) of flat image input.
    n_leapfrog : int, default=10
        N: leapfrog steps per round.
    n_repeats : int, default=5
        Rounds per noise level (Algorithm 2 as printed: 1).
    step_size : float or None, default=None
        Leapfrog step lambda0 of the sampler; None takes ``0.3 * sigma_min``:
        each leapfrog step moves about 0.3 noise levels.
    acceptance : {"hmc", "density"}, default="hmc"
        Accept/reject test of the sampler, on the log-density change
        estimated by integrating the score along the leapfrog path
        (``skdp.generative.hmc``): "hmc" adds the kinetic-energy change (a
        Metropolis-Hastings test for HMC); "density" is the supplement's
        printed rule ``min(1, q(x_new) / q(x_old))``.
    {dp:ledger}
    {dp:device}
    verbose : "auto" or int, default="auto"
        "auto": silent for fits and samplings that end within 10 seconds;
        longer ones report every 10 seconds (epoch, epsilon spent so far,
        time elapsed and left; for sampling, records drawn). 0: silent. 1:
        skorch's training log each epoch (with epsilon and, for the data
        curator only, the unnoised loss) and each noise level of sampling.
    {dp:random_state}

    Attributes
    ----------
    net_ : PGENet
        The fitted skorch net holding the score network.
    module_ : str
        The score module used ("gaussian", "mlp" or "cnn").
    lr_ : float
        The learning rate used.
    n_projections_ : int
        Projection vectors per example used.
    classes_ : ndarray or None
        The label set of a class-conditional model (public if ``classes``
        was given); None when fitted without labels.
    class_prior_ : ndarray or None
        Class proportions that :meth:`sample` draws labels from: released
        with Laplace noise for "dpsgd", read from the data otherwise.
    cell_columns_ : list
        The columns whose joint categories condition the model (see ``cells``).
    cell_prior_ : ndarray of shape (max(n_classes, 1), n_cells) or None
        Proportions of the cells (the rows: classes), released with Laplace
        noise; None without cells.
    bounds_ : (lower, upper)
        The feature range used for scaling and clipping (public if
        ``bounds`` was given); ``(-1, 1)`` per coordinate for a table encoded
        by ``codec_``.
    codec_ : TableCodec or None
        The encoding of a DataFrame with categories or bounds by column
        (``skdp.generative.tabular``); None for numeric arrays.
    sigmas_ : tuple
        The noise levels, largest first.
    {dp:attributes}
    n_features_in_ : int
        Features per record.
    acceptance_rates_ : ndarray of shape (n_levels,)
        Mean acceptance rate of the sampler per noise level, set by the last
        :meth:`sample`.

    See Also
    --------
    TrainOnSynthetic : Fits a classifier on this generator's samples.
    label_entropy : Diversity of the labels of generated samples.
    downstream_accuracy : Accuracy on real data of a classifier trained on samples.

    Examples
    --------
    A given ``noise_multiplier`` skips the calibration to ``epsilon``; the
    accountant reports the spend. ``n_repeats=1`` is Algorithm 2 as printed
    (and quick):

    >>> import numpy as np
    >>> from skdp.generative import PGEGenerator
    >>> rng = np.random.default_rng(0)
    >>> X = np.r_[rng.normal(-1, 0.2, (100, 2)), rng.normal(1, 0.2, (100, 2))]
    >>> y = np.repeat([0, 1], 100)
    >>> gen = PGEGenerator(noise_multiplier=1.0, bounds=(-2, 2), classes=[0, 1], max_epochs=1, n_repeats=1,
    ...                    random_state=0).fit(X, y)
    >>> round(gen.epsilon_, 2), gen.privacy_certified_
    (5.33, True)
    >>> Xs, ys = gen.sample(10, random_state=0)
    >>> Xs.shape, ys.shape, bool(((Xs >= -2) & (Xs <= 2)).all())
    ((10, 2), (10,), True)
    """

    _parameter_constraints = {
        **DPSGD_CONSTRAINTS,
        "module": [StrOptions({"auto", "mlp", "cnn", "gaussian"})],
        "mechanism": [StrOptions({"dpsgd", "randomized_response"})],
        "k": [Interval(numbers.Integral, 2, None, closed="left")],
        "n_projections": [StrOptions({"auto"}), Interval(numbers.Integral, 1, None, closed="left")],
        "residual": ["boolean"],
        "hidden_size": [Interval(numbers.Integral, 1, None, closed="left")],
        "n_blocks": [Interval(numbers.Integral, 0, None, closed="left")],
        "sigma_min": [Interval(numbers.Real, 0, None, closed="neither")],
        "n_levels": [Interval(numbers.Integral, 1, None, closed="left")],
        "lr": [StrOptions({"auto"}), Interval(numbers.Real, 0, None, closed="neither")],
        "ema": [None, StrOptions({"auto"}), Interval(numbers.Real, 0, 1, closed="left")],
        "bounds": [None, tuple, list, dict],
        "categories": [None, dict],
        "cells": [None, StrOptions({"auto"}), list, tuple],
        "classes": [None, "array-like"],
        "image_shape": [None, tuple],
        "n_leapfrog": [Interval(numbers.Integral, 1, None, closed="left")],
        "n_repeats": [Interval(numbers.Integral, 1, None, closed="left")],
        "step_size": [None, Interval(numbers.Real, 0, None, closed="neither")],
        "acceptance": [StrOptions({"hmc", "density"})],
        "ledger": [None, HasMethods(["spend"])],
        "device": [str, torch.device],
        "verbose": [StrOptions({"auto"}), "verbose"],
    }
    _parameter_constraints.pop("clipping")

    def __init__(self, module="auto", *, mechanism="dpsgd", epsilon=1.0, delta=1e-5, k=10, n_projections="auto",
                 residual=True, hidden_size=256, n_blocks=2, sigma_min=0.01, n_levels=10, max_epochs=30,
                 batch_size="auto", lr="auto", ema=None, max_grad_norm=1.0, noise_multiplier=None, accounting="rdp",
                 bounds=None, categories=None, cells="auto", classes=None, image_shape=None, n_leapfrog=10,
                 n_repeats=5, step_size=None, acceptance="hmc", ledger=None, device="cpu", verbose="auto",
                 random_state=None):
        self._set_init_params(locals())

    # -- fit ---------------------------------------------------------------------------------
    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y=None):
        """Train on private ``X`` (and labels ``y`` for a class-conditional model).

        With ``mechanism="dpsgd"`` the fit spends at most (``epsilon``,
        ``delta``): ``0.05 * epsilon`` on the class counts (if labelled), the
        rest on DP-SGD; with a given ``noise_multiplier`` the spend is what
        the accountant certifies, in ``epsilon_``. The spend is charged to
        ``ledger`` before training.

        Parameters
        ----------
        X : array-like or DataFrame of shape (n_samples, n_features)
            Private records, at least 2; clipped to ``bounds``. A DataFrame
            may hold categorical columns (see ``categories``).
        y : array-like of shape (n_samples,) or None, default=None
            Private labels, all in ``classes``; None fits an unconditional model.

        Returns
        -------
        self : object
            Fitted estimator.
        """
        owner = type(self).__name__
        if self.cells is not None and not isinstance(self.cells, str):
            self._cell_columns(0)  # a list of cells is checked before the data are read
        columns, self.codec_ = None, None
        if needs_codec(X, self.categories, self.bounds):  # a mixed table: coordinates in [-1, 1]
            columns = np.asarray(X.columns, dtype=object)
            self.codec_ = TableCodec(self.categories, self.bounds, owner).fit(X, warn=self.mechanism == "dpsgd")
            X = self.codec_.transform(X)
        X = validate_data(self, X, dtype=np.float32, ensure_min_samples=2, reset=True) if y is None else \
            validate_data(self, X, y, dtype=np.float32, ensure_min_samples=2, reset=True)[0]
        rng = make_rng(self.random_state)  # initialisation and the loss's draws: not a mechanism
        certified = self.mechanism == "dpsgd"
        check_device(self.device)  # before anything is charged
        if certified:
            warn_if_delta_too_large(self.delta, X.shape[0], owner)
        self.bounds_ = resolve_bounds((-1.0, 1.0) if self.codec_ else self.bounds, X, owner, warn=certified)
        codes = self._encode_labels(y, X.shape[0])
        Z = self._scale(X)
        self.sigmas_ = harmonic_square_levels(self.sigma_min, self.n_levels)
        self._resolve_auto(certified)
        # The number of records is public (doc/privacy.md): the replay of a neighbour hands it the recorded one.
        self.cell_columns_ = self._cell_columns(taps.public_count("n_samples", X.shape[0]), self._n_classes())
        codes, Z = self._join_cells(codes, Z)  # the conditioning codes (class x cell); the modelled coordinates
        self.net_ = self._make_net(Z.shape[1], X.shape[0], rng, certified)
        # Everything that can fail is checked before the class counts are charged.
        q, _, sigma, _ = self.net_.plan_privacy(X.shape[0], self.max_epochs)
        self.net_.check_runnable(sigma, q * X.shape[0])
        if certified:
            self._check_ledger(X.shape[0])
        self._fit_prior(codes, mechanism_rng(self), certified)
        if not certified:
            warn_privacy("PGEGenerator(mechanism='randomized_response') perturbs only the Gaussian projection "
                "vectors, which do not depend on the data; it certifies NOTHING. epsilon_ repeats the "
                "paper's claim.")
        with warnings.catch_warnings():
            if not certified:  # the no-noise warning of the engine is the one just given
                warnings.simplefilter("ignore", PrivacyLeakWarning)
            self.net_.fit(Z, codes)
        read = (self.codec_.read_from_data_ if self.codec_ else [] if self.bounds is not None else ["bounds"]) + (
            ["classes"] if self.classes is None and y is not None else [])
        if columns is not None:  # the table's own columns, not its coordinates
            self.n_features_in_, self.feature_names_in_ = len(columns), columns
        # Class and cell proportions cost COUNT_SHARE * epsilon (Laplace); with epsilon=inf they are exact.
        eps_counts = COUNT_SHARE * self.epsilon if self._counted() else 0.0
        self._set_fit_results(self.net_, extra_epsilon=eps_counts, read_from_data=read)
        if not certified:
            set_privacy_attributes(self, self.epsilon, 0.0, read_from_data=read, certified=(
                "randomized response on data-independent projections certifies nothing (the paper's claim)"))
        return self

    def _planned_costs(self, n_samples, **plan):
        """Randomized response: one pure epsilon-DP release; DP-SGD: the base's plan (``plan``: see ``_plan``)."""
        if self.mechanism != "dpsgd":
            return [Spend.pure(float(self.epsilon))]
        return super()._planned_costs(n_samples, **plan)

    def _planned_privacy(self, n_samples):
        """(epsilon, delta) a fit on ``n_samples`` records will certify; labels assumed (``classes`` set)."""
        if self.mechanism != "dpsgd":
            return float(self.epsilon), 0.0
        return super()._planned_privacy(n_samples)

    def _plan(self, n_samples, n_classes=None):
        """The base's plan; ``n_classes``: the classes a fit conditions on (0: none), None: assumed from
        ``classes`` (labels given whenever ``classes`` is set)."""
        batch_size = resolve_batch_size(self.batch_size, n_samples)
        labelled = self.classes is not None if n_classes is None else n_classes > 0
        if not labelled and not self._cell_columns(n_samples, n_classes):  # no counts released
            return batch_size, self.max_epochs, self.epsilon, 0.0
        if math.isinf(self.epsilon):  # the counts are exact (DP-SGD may still be noised by a noise_multiplier)
            return batch_size, self.max_epochs, self.epsilon, math.inf
        return batch_size, self.max_epochs, (1 - COUNT_SHARE) * self.epsilon, COUNT_SHARE * self.epsilon

    def _check_ledger(self, n_samples):
        """The fit's spends as it will charge them (the counts, then DP-SGD) checked against the ledger first.

        The counts are charged first; a ledger that cannot afford the DP-SGD part after them refused the fit
        with the counts' share already spent. Planned from the fit's own state (labels read from y included),
        each release with its own cost (one combined spend's replace-one view is looser than theirs).
        """
        check = getattr(self.ledger, "check_all", None)
        if check is None or not self._counted():  # a user's ledger without it checks each charge itself
            return
        dpsgd, *counts = self._planned_costs(n_samples, n_classes=self._n_classes())
        check([*counts, dpsgd])

    def _n_classes(self):
        """Classes the fit conditions on: 0 for an unconditional fit, whatever ``classes`` says."""
        return 0 if self.classes_ is None else len(self.classes_)

    def _counted(self):
        """Whether the fit releases counts (of classes, of cells or of both)."""
        return self.classes_ is not None or bool(self.cell_columns_)

    def _encode_labels(self, y, n):
        if y is None:
            self.classes_, self.class_prior_ = None, None
            return np.zeros(n, dtype=np.int64)
        self.classes_, codes = encode_labels(self.classes, y, type(self).__name__)
        return codes

    # -- cells: the joint categories of some columns, crossed with the classes ----------------
    def _cell_columns(self, n_samples, n_classes=None):
        """The columns of ``categories`` whose joint categories condition the model (``cells``).

        From public settings only (``categories``, ``classes``, the module rule, the public number of records
        and, in a fit, the number of classes it conditions on), so that the plan of a fit knows whether counts
        are released before it sees the data.
        """
        if self.cells is None:
            return []
        if isinstance(self.cells, str):  # "auto": the Gaussian module, noised counts; fewest categories first
            if (not self.categories or math.isinf(self.epsilon)
                    or self._module_choice(self.mechanism == "dpsgd") != "gaussian"):
                return []
            cap = min(MAX_CELLS, int(n_samples) // CELL_ROWS)
            if n_classes is None:  # a plan: labels assumed whenever classes is set
                n_classes = len(self.classes) if self.classes is not None else 1
            size = max(1, n_classes)
            chosen = []
            for column in sorted(self.categories, key=lambda c: (len(self.categories[c]), repr(c))):
                width = len(self.categories[column])
                if width > 1 and size * width <= cap:
                    chosen.append(column)
                    size *= width
            return chosen
        chosen = list(self.cells)
        if chosen and not self.categories:
            raise ValueError(f"cells={self.cells!r} names columns of categories, but categories is "
                             f"{self.categories!r}; give their public categories in categories={{column: [...]}}.")
        unknown = [c for c in chosen if c not in (self.categories or {})]
        if unknown or len(set(chosen)) != len(chosen) or len(set(map(repr, chosen))) != len(chosen):
            raise ValueError(f"cells={self.cells!r} must name distinct keys of categories "
                             f"({list(self.categories)[:10]}); not keys: {unknown[:5]}.")
        return chosen

    def _cell_blocks(self):
        """``(slices, widths, keep)``: the cell columns' one-hot blocks among the table's coordinates, and the
        mask of the coordinates left to the model."""
        slices = [self.codec_.slices_[c] for c in self.cell_columns_]
        keep = np.ones(self.codec_.n_coordinates_, dtype=bool)
        for part in slices:
            keep[part] = False
        return slices, [s.stop - s.start for s in slices], keep

    def _join_cells(self, codes, Z):
        """Conditioning codes ``class * n_cells + cell`` and the coordinates left to the model.

        A cell column's block is one-hot ({-1, 1}, exactly one 1), so its category is the block's argmax;
        the cell is the mixed-radix number of the columns' categories. The blocks leave the modelled
        coordinates: sampling sets them from the drawn cell.
        """
        self._n_cells = 1
        if not self.cell_columns_:
            return codes, Z
        if self.codec_ is None:
            raise ValueError("cells name DataFrame columns; pass X as a pandas DataFrame.")
        slices, widths, keep = self._cell_blocks()
        cell = np.zeros(len(Z), dtype=np.int64)
        for part, width in zip(slices, widths):
            cell = cell * width + np.argmax(Z[:, part], axis=1)
        self._n_cells = int(np.prod(widths))
        return codes * self._n_cells + cell, np.ascontiguousarray(Z[:, keep])

    def _n_conditions(self):
        """Rows of the model's conditioning: classes times cells (0: an unconditional model)."""
        n_classes = self._n_classes()
        return n_classes * self._n_cells if n_classes else (self._n_cells if self.cell_columns_ else 0)

    def _fit_prior(self, codes, rng, certified):
        """Class (and cell) proportions from Laplace-noised counts of the joint table (the counts' epsilon).

        One record adds one to one count of the joint table of classes and cells: L1 sensitivity 1. With
        ``epsilon=inf`` the counts are exact, and charged as such (inf) beside a noised DP-SGD. A class's
        share sums its cells' noisy counts before clipping at 0 (clipping each cell first biased a rare
        class up); the cells' shares within a class clip each count.
        """
        self.cell_prior_ = None
        if not self._counted():
            return
        counts = np.bincount(codes, minlength=self._n_conditions()).astype(float)
        if certified:
            what = {(True, False): "class counts", (False, True): "cell counts"}.get(
                (self.classes_ is not None, bool(self.cell_columns_)), "class and cell counts")
            eps_counts = COUNT_SHARE * self.epsilon
            if math.isinf(eps_counts):
                charge(self.ledger, math.inf, 0.0, f"{type(self).__name__}: {what}, exact (epsilon=inf)")
            else:
                charge(self.ledger, eps_counts, 0.0, f"{type(self).__name__}: {what}",
                       cost=Spend.pure(eps_counts))
                counts = taps.release("laplace:class_counts", counts, 1.0, "l1")
                counts = counts + rng.laplace(scale=taps.noise_factor() / eps_counts, size=counts.shape)
        joint = counts.reshape(-1, self._n_cells)
        if self.classes_ is not None:
            totals = np.maximum(joint.sum(axis=1), 0.0) + 1e-12
            self.class_prior_ = totals / totals.sum()
        if self.cell_columns_:
            cells = np.maximum(joint, 0.0) + 1e-12
            self.cell_prior_ = cells / cells.sum()

    # "auto" values by module; chosen on load_digits' training split and breast cancer (bench_pge.py); the
    # Gaussian's lr on digits-dev (benchmarks/results/dev_pge.md: 0.845 at 3e-2 against 0.788 at 1e-2, 6 seeds).
    AUTO = {"gaussian": dict(lr=3e-2, n_projections=1), "mlp": dict(lr=3e-3, n_projections=1),
            "cnn": dict(lr=3e-3, n_projections=1)}

    def _module_choice(self, certified):
        """The module of ``module="auto"``: the Gaussian one when DP-SGD adds noise (public settings only)."""
        if self.module != "auto":
            return self.module
        noisy = certified and (self.noise_multiplier is not None or not math.isinf(self.epsilon))
        return "gaussian" if noisy else ("cnn" if self.image_shape is not None else "mlp")

    def _resolve_auto(self, certified):
        """``module_``, ``lr_`` and ``n_projections_``: the "auto" rules, from public settings only."""
        module = self._module_choice(certified)
        self.module_ = module
        auto = self.AUTO[module]
        self.lr_ = auto["lr"] if self.lr == "auto" else float(self.lr)
        self.n_projections_ = auto["n_projections"] if self.n_projections == "auto" else int(self.n_projections)

    def _make_net(self, n_features, n_samples, rng, certified):
        n_classes = self._n_conditions()
        use_cnn = self.module_ == "cnn"
        if self.module_ == "gaussian":
            module, kwargs = GaussianScore, dict(n_features=n_features, n_classes=n_classes)
        elif use_cnn:
            shape = self._image_shape(n_features)
            module, kwargs = ScoreCNN, dict(image_shape=shape[1:], in_channels=shape[0], n_classes=n_classes,
                                            channels=self.hidden_size, n_blocks=self.n_blocks,
                                            residual=self.residual)
        else:
            module, kwargs = ScoreMLP, dict(n_features=n_features, n_classes=n_classes,
                                            hidden_size=self.hidden_size, n_blocks=self.n_blocks,
                                            residual=self.residual)
        privacy = self._dp_net_kwargs(lr=self.lr_)
        if self.verbose == "auto":  # skorch's log off; a long fit reports its epochs (released values only)
            privacy.update(verbose=0, callbacks=[("progress", progress_callback(type(self).__name__))])
        privacy["random_state"] = rng
        if certified:
            share = COUNT_SHARE if (self._counted() and not math.isinf(self.epsilon)) else 0.0
            privacy["epsilon"] = (1 - share) * self.epsilon
        else:  # the paper: no clipping, no noise; the paper's randomized response on projections
            privacy.update(epsilon=math.inf, noise_multiplier=0.0, max_grad_norm=math.inf, ledger=None,
                           rr_k=self.k, rr_epsilon=self.epsilon)
        return PGENet(
            module, sigmas=self.sigmas_, n_projections=self.n_projections_, n_classes=n_classes,
            batch_size=resolve_batch_size(self.batch_size, n_samples), optimizer=torch.optim.Adam,
            iterator_valid__batch_size=1024, **{f"module__{k}": v for k, v in kwargs.items()}, **privacy)

    def _image_shape(self, n_features):
        # The image networks' rule (skdp.imaging.layout.row_image_shape): flat rows, (H, W) or (C, H, W).
        return row_image_shape((n_features,), self.image_shape, owner="PGEGenerator(module='cnn')")

    def _scale(self, X):
        lower, upper = self.bounds_
        width = np.where(upper > lower, upper - lower, 1.0)
        return (2 * (np.clip(X, lower, upper) - lower) / width - 1).astype(np.float32)

    def _unscale(self, Z):
        lower, upper = self.bounds_
        return np.clip((Z + 1) / 2 * (upper - lower) + lower, lower, upper)

    # -- sample ------------------------------------------------------------------------------
    def sample(self, n_samples, y=None, random_state=None):
        """Draw ``n_samples`` records (post-processing: spends no privacy).

        Parameters
        ----------
        n_samples : int
            Number of records to draw.
        y : array-like of shape (n_samples,) or None, default=None
            Labels to condition on (class-conditional model); None draws them
            from ``class_prior_``.
        random_state : int, Generator or None, default=None
            Seeds the sampler (the model is already released: no privacy rests on it).

        Returns
        -------
        X : ndarray or DataFrame of shape (n_samples, n_features)
            A DataFrame with the fitted columns when the model was fitted on one.
        y : ndarray or Series of shape (n_samples,)
            The labels, for a class-conditional model only.
        """
        check_is_fitted(self)
        if not isinstance(n_samples, numbers.Integral) or isinstance(n_samples, bool) or n_samples <= 0:
            raise ValueError(f"n_samples must be a positive integer, got {n_samples!r}.")
        rng = make_rng(random_state)
        labels, conditions, width, cells = self._sample_labels(n_samples, y, rng)
        gen = torch_generator(rng, device=self.device)
        cell_columns = getattr(self, "cell_columns_", [])
        # Coordinates of the model: a table's one-hot blocks included, but for the cells' (set from the cell).
        d = int(self._cell_blocks()[2].sum()) if cell_columns else len(self.bounds_[0])
        module = self.net_.module_
        module.eval()

        def score(x, labels, sigma):
            with torch.no_grad():
                return module(x, labels, torch.full((x.shape[0],), float(sigma), device=x.device))

        step = self.step_size if self.step_size is not None else 0.3 * self.sigma_min
        auto = self.verbose == "auto"
        report = _progress(time.perf_counter()) if self.verbose and not auto else None
        timer = ProgressTimer() if auto else None
        chunks, self.acceptance_rates_ = [], []
        for start in range(0, n_samples, SAMPLE_CHUNK):  # chunks keep the working set in cache
            rows = slice(start, min(start + SAMPLE_CHUNK, n_samples))
            x0 = self.sigmas_[0] * torch.randn(rows.stop - rows.start, d, generator=gen, device=self.device)
            Y = self._one_hot(conditions[rows], width) if width else torch.zeros(len(x0), 0, device=self.device)
            z, rates = hmc_sample(lambda x, sigma: score(x, Y, sigma), x0, self.sigmas_,
                                  step_size=step, n_leapfrog=self.n_leapfrog, n_repeats=self.n_repeats,
                                  acceptance=self.acceptance, generator=gen,
                                  callback=((report if start == 0 else None) if report
                                            else _timed(timer, start, n_samples)))
            chunks.append(z)
            self.acceptance_rates_.append(rates)
        self.acceptance_rates_ = np.mean(self.acceptance_rates_, axis=0)
        Z = torch.cat(chunks).cpu().numpy().astype(np.float64)
        Z = self._category_probabilities(Z, conditions if width else None)
        if cell_columns:
            Z = self._place_cells(Z, cells)
        X = self._unscale(Z)
        if getattr(self, "codec_", None) is not None:  # a table: its columns, dtypes and categories
            import pandas as pd
            X = self.codec_.inverse_transform(X, rng)
            labels = None if labels is None else pd.Series(labels, name="y")
        elif hasattr(self, "feature_names_in_"):  # fitted on a DataFrame: give one back, same columns
            import pandas as pd
            X = pd.DataFrame(X, columns=self.feature_names_in_)
            labels = None if labels is None else pd.Series(labels, name="y")
        return X if labels is None else (X, labels)

    def _sample_labels(self, n_samples, y, rng):
        """Labels, the model's conditioning codes and their number (0: none), and the cells (None without).

        A class is drawn from ``class_prior_`` (or given), then a cell from its class's row of ``cell_prior_``.
        """
        prior = getattr(self, "cell_prior_", None)
        if self.classes_ is None:
            if y is not None:
                raise ValueError("y was given to sample() but the model was fitted without labels.")
            if prior is None:
                return None, None, 0, None
            cells = rng.choice(prior.size, size=n_samples, p=prior.ravel() / prior.sum())
            return None, cells, prior.size, cells
        if y is None:
            codes = rng.choice(len(self.classes_), size=n_samples, p=self.class_prior_)
        else:
            y = np.asarray(y)
            if y.shape != (n_samples,):
                raise ValueError(f"y must have shape ({n_samples},), got {y.shape}.")
            unknown = np.setdiff1d(np.unique(y), self.classes_)
            if len(unknown):
                raise ValueError(f"y contains labels not in classes_: {unknown[:5]!r}.")
            codes = np.searchsorted(self.classes_, y)
        if prior is None:
            return self.classes_[codes], codes, len(self.classes_), None
        cells = np.zeros(n_samples, dtype=np.int64)
        for c in np.unique(codes):  # each record's cell given its class
            rows = np.flatnonzero(codes == c)
            cells[rows] = rng.choice(prior.shape[1], size=len(rows), p=prior[c] / prior[c].sum())
        return self.classes_[codes], codes * prior.shape[1] + cells, prior.size, cells

    def _category_probabilities(self, Z, conditions):
        """Under the diagonal Gaussian module, each categorical block of ``Z`` set to its component's mean.

        The module models a one-hot block's coordinates as independent given the class and cell, with mean
        ``2 p_k - 1``: ``p_k`` is its estimate of the category's probability, and the codec's draw from the
        mean is a draw from ``p``. A draw from a *sampled* block (weights ``max((z + 1) / 2, 0)`` of a noisy
        coordinate) flattens ``p`` towards uniform: the truncation at 0 gives a rare category mass it does not
        have (Home in credit_data: a total variation of 0.14 from the draw alone). The means are released
        parameters: post-processing. Other modules learn the one-hot structure, and their samples are drawn from.
        """
        codec = getattr(self, "codec_", None)
        module = self.net_.module_
        if codec is None or not isinstance(module, GaussianScore):
            return Z
        mask = np.zeros(codec.n_coordinates_, dtype=bool)
        for column in codec.columns_:
            if codec.kinds_[column] == "category":
                mask[codec.slices_[column]] = True
        if getattr(self, "cell_columns_", []):
            mask = mask[self._cell_blocks()[2]]  # the cells' blocks are set from the cell, not modelled
        if not mask.any():
            return Z
        means = module.mean.detach().cpu().numpy().astype(np.float64)  # one row per condition (or one)
        rows = np.zeros(len(Z), dtype=np.int64) if conditions is None else np.asarray(conditions)
        Z = Z.copy()
        Z[:, mask] = means[rows][:, mask]
        return Z

    def _one_hot(self, codes, width):
        return torch.nn.functional.one_hot(torch.as_tensor(codes, device=self.device), width).float()

    def _place_cells(self, Z, cells):
        """The table's coordinates: the model's ``Z`` and, in the cell columns' blocks, the cells' one-hot codes."""
        slices, widths, keep = self._cell_blocks()
        full = np.empty((len(Z), len(keep)))
        full[:, keep] = Z
        for part, width in zip(slices[::-1], widths[::-1]):  # mixed radix: the last column varies fastest
            cells, code = np.divmod(cells, width)
            full[:, part] = -1.0
            full[np.arange(len(Z)), part.start + code] = 1.0
        return full


def _timed(timer, start, n_samples):
    """The sampler's callback under verbose="auto": progress over all chunks' noise levels (None: silent)."""
    if timer is None:
        return None
    n_chunks, chunk = -(-n_samples // SAMPLE_CHUNK), start // SAMPLE_CHUNK

    def report(m, M, sigma, rate):
        timer.report(chunk * M + m, n_chunks * M, "PGEGenerator sample, noise level")
    return report


def _progress(start):
    def report(m, M, sigma, rate):
        progress(f"sampling: level {m}/{M} sigma={sigma:.4f} acceptance={rate:.2f} "
                 f"({time.perf_counter() - start:.1f}s)")
    return report
