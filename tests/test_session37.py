"""Fixes of 2026-11-26 (session 37), each with the test that failed before it."""
import warnings

import numpy as np
import pytest

from skdp import BudgetLedger, DPMomentumClassifier, DPMomentumRegressor


def _fitted(estimator_class, **params):
    rng = np.random.default_rng(0)
    X = rng.uniform(-1, 1, (80, 4)).astype(np.float32)
    y = np.arange(80) % 2 if estimator_class is DPMomentumClassifier else X[:, 0]
    extra = {"classes": [0, 1]} if estimator_class is DPMomentumClassifier else {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = estimator_class(epsilon=1.0, max_epochs=1, bounds=(-1, 1), random_state=0, **extra, **params).fit(X, y)
    return est, X, y


@pytest.mark.parametrize("estimator_class, how", [(DPMomentumClassifier, "partial_fit"),
                                                   (DPMomentumClassifier, "warm fit"),
                                                   (DPMomentumRegressor, "warm fit")])  # the regressor has no partial_fit
@pytest.mark.parametrize("change", ["ledger", "epsilon", "delta", "max_grad_norm", "noise_multiplier"])
def test_a_continuation_refuses_privacy_parameters_changed_since_the_fit(estimator_class, how, change):
    # review_s36 n1: set_params(ledger=L2) after a fit, then a continuation: it charged L1 (the ledger the network
    # was built with) and L2 stayed empty, so the ledger the user now keeps never saw the spend. epsilon, delta,
    # the clipping bound and the noise multiplier were silently ignored the same way. Refused by name before
    # any charge.
    first = BudgetLedger(epsilon=100.0, delta=1e-2)
    est, X, y = _fitted(estimator_class, ledger=first, warm_start=how == "warm fit")
    second = BudgetLedger(epsilon=100.0, delta=1e-2)
    new = {"ledger": second, "epsilon": 2.0, "delta": 1e-6, "max_grad_norm": 0.5, "noise_multiplier": 2.0}[change]
    est.set_params(**{change: new})
    spent, steps, entries = est.epsilon_, est.n_steps_, len(first.entries)
    with pytest.raises(ValueError, match=rf"{change}.*changed since the fit"):
        est.partial_fit(X, y) if how == "partial_fit" else est.fit(X, y)
    assert (est.epsilon_, est.n_steps_, len(first.entries), len(second.entries)) == (spent, steps, entries, 0)
    assert est.get_params()[change] is new  # the parameter stays as the user set it


def test_a_network_that_does_not_record_its_plan_refuses_a_continuation():
    # second read: a network without a plan argument (an older pickle) was refused as "changed since the fit".
    est, X, y = _fitted(DPMomentumClassifier, warm_start=True)
    del est.net_.accounting
    spent = est.epsilon_
    with pytest.raises(ValueError, match="does not record its accounting"):
        est.fit(X, y)
    assert est.epsilon_ == spent


def test_a_continuation_with_the_same_privacy_parameters_still_runs():
    ledger = BudgetLedger(epsilon=100.0, delta=1e-2)
    est, X, y = _fitted(DPMomentumClassifier, ledger=ledger)
    est.set_params(ledger=ledger, epsilon=1.0, verbose=0)  # the same values: nothing changed
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est.partial_fit(X, y)
    assert len(ledger.entries) == 2 and est.privacy_certified_


@pytest.mark.parametrize("new_classes", [[0, 1], [0, 1, 2]])
@pytest.mark.parametrize("refused_first", [False, True])
def test_a_warm_fit_keeps_the_note_of_a_label_set_read_from_the_data(new_classes, refused_first):
    # review_s37 k01: fit with classes=None (uncertified: "classes read from the private data"), then
    # set_params(classes=...) as the PrivacyLeakWarning advises and a warm fit: the warm branch rewrote the note from
    # the current parameter and certified a network whose label set (and output layer) was read from y. A warm fit
    # refused by the plan check had rewritten it too, so the next partial_fit certified.
    rng = np.random.default_rng(0)
    X = rng.uniform(-1, 1, (80, 4)).astype(np.float32)
    y = np.arange(80) % 2
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = DPMomentumClassifier(epsilon=1.0, max_epochs=1, bounds=(-1, 1), warm_start=True).fit(X, y)
        assert not est.privacy_certified_  # classes_ read from y
        est.set_params(classes=new_classes)
        if refused_first:
            est.set_params(epsilon=2.0)
            with pytest.raises(ValueError, match="epsilon changed"):
                est.fit(X, y)
            est.set_params(epsilon=1.0)
            est.partial_fit(X, y)
        else:
            est.fit(X, y)
    assert list(est.classes_) == [0, 1]  # the label set the network was built on, read from the data
    assert not est.privacy_certified_ and "classes read from the private data" in est.privacy_notes_


@pytest.mark.parametrize("how", ["partial_fit", "warm fit"])
def test_continuing_a_private_search_winner_is_refused_before_any_charge(how):
    # review_s37 k02: PrivateSearchCV charges its ledger once with the whole search and gives the trials ledger=None;
    # best_estimator_.partial_fit then charged no ledger, and the winner's epsilon_ fell from the search's (the
    # selection's cost included) to its own DP-SGD spend, still certified. Refused by name, nothing charged.
    from skdp import PrivateSearchCV

    rng = np.random.default_rng(0)
    X = rng.uniform(-1, 1, (200, 4)).astype(np.float32)
    y = (X[:, 0] > 0).astype(int)
    ledger = BudgetLedger(epsilon=100.0, delta=1e-2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        search = PrivateSearchCV(DPMomentumClassifier(classes=[0, 1], bounds=(-1, 1), max_epochs=1, warm_start=True),
                                 {"lr": [0.1, 0.5]}, epsilon=2.0, ledger=ledger, random_state=0).fit(X, y)
    best = search.best_estimator_
    spent, steps, entries = best.epsilon_, best.n_steps_, len(ledger.entries)
    with pytest.raises(ValueError, match="PrivateSearchCV"):
        best.partial_fit(X, y) if how == "partial_fit" else best.fit(X, y)
    assert (best.epsilon_, best.n_steps_, len(ledger.entries)) == (spent, steps, entries)
    assert best.epsilon_ == search.epsilon_ and best.privacy_certified_


# -- second read (review_s37 k10-k12) ------------------------------------------------------------------------------
def _warm(**kw):
    return DPMomentumClassifier(classes=[0, 1], bounds=(-1, 1), max_epochs=1, warm_start=True, **kw)


def _xy():
    rng = np.random.default_rng(0)
    X = rng.uniform(-1, 1, (200, 4)).astype(np.float32)
    return X, (X[:, 0] > 0).astype(int)


@pytest.mark.parametrize("tap", ["noise_off", "scaled_noise"])
def test_a_continuation_keeps_the_notes_of_the_fits_it_continues(tap):
    # k10: a fit inside taps.noise_off() (or scaled_noise) is uncertified; a partial_fit outside the tap rebuilt the
    # notes from its own call and reported the model certified, though its first lots had no (or a tenth of the) noise.
    from skdp.utils import taps

    X, y = _xy()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with taps.noise_off() if tap == "noise_off" else taps.scaled_noise(0.1):
            est = _warm(epsilon=1.0).fit(X, y)
        assert not est.privacy_certified_
        est.partial_fit(X, y)
    assert not est.privacy_certified_ and any("audit tap" in n for n in est.privacy_notes_)


@pytest.mark.parametrize("where", ["search", "step"])
def test_a_fresh_fit_of_a_search_winner_charges_the_ledger_the_search_charged(where):
    # k11: the search runs its trials with ledger=None and the winner kept it: clone(best_estimator_).fit (what the
    # k02 refusal suggests), GridSearchCV(best) or a fresh fit retrained on the private data and charged nothing.
    from sklearn.base import clone

    from skdp import PrivateSearchCV

    X, y = _xy()
    ledger = BudgetLedger(epsilon=100.0, delta=1e-2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        search = PrivateSearchCV(_warm(ledger=ledger if where == "step" else None), {"lr": [0.1, 0.5]}, epsilon=2.0,
                                 ledger=ledger if where == "search" else None, random_state=0).fit(X, y)
        assert search.best_estimator_.ledger is ledger
        entries = len(ledger.entries)
        clone(search.best_estimator_).fit(X, y)
    assert len(ledger.entries) == entries + 1


def test_a_warm_pipeline_whose_dp_step_continues_after_a_refit_dp_step_is_not_certified():
    # k12: the quantile scaler is refit (0.5 again) on each warm pipe.fit while the network continues from weights
    # trained on the earlier scalers' outputs: privacy_spent counted only the last scaler and certified the sum.
    from sklearn.pipeline import make_pipeline

    from skdp.exceptions import PrivacyLeakWarning
    from skdp.preprocessing import DPQuantileScaler
    from skdp.privacy import privacy_spent

    X, y = _xy()
    ledger = BudgetLedger(epsilon=100.0, delta=1e-2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pipe = make_pipeline(DPQuantileScaler(epsilon=0.5, domain=(-2, 2), ledger=ledger), _warm(ledger=ledger))
        pipe.fit(X, y)
        assert privacy_spent(pipe)[2]  # one fit of each: certified
        pipe.fit(X, y)
    with pytest.warns(PrivacyLeakWarning, match="continued"):
        eps, _, certified = privacy_spent(pipe)
    assert not certified
    # k12b: a warm refit whose DP step refuses (its plan changed) has refit and charged the scaler all the same
    fresh = make_pipeline(DPQuantileScaler(epsilon=0.5, domain=(-2, 2), ledger=ledger), _warm(ledger=ledger))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fresh.fit(X, y)
        fresh.set_params(dpmomentumclassifier__epsilon=2.0)
        with pytest.raises(ValueError, match="changed since the fit"):
            fresh.fit(X, y)
    with pytest.warns(PrivacyLeakWarning, match="continued"):
        assert not privacy_spent(fresh)[2]


# -- third read (review_s37 k13-k17) -------------------------------------------------------------------------------
@pytest.mark.parametrize("case", ["pge classes", "pge tap", "pge mechanism", "srgan public"])
def test_a_fresh_refit_keeps_no_note_of_the_fit_it_replaces(case):
    # k13: the k10 fix carried the notes on every fit; PGEGenerator and SRGANTransformer fit afresh each time (they
    # keep their fitted state until overwritten), so a certified refit still carried the replaced fit's notes.
    from skdp.generative import PGEGenerator
    from skdp.superres import SRGANTransformer
    from skdp.utils import taps

    X, y = _xy()
    rng = np.random.default_rng(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if case.startswith("pge"):
            est = PGEGenerator(max_epochs=1, hidden_size=8, n_levels=2, bounds=(-1, 1), epsilon=1.0,
                               classes=None if case == "pge classes" else [0, 1],
                               mechanism="randomized_response" if case == "pge mechanism" else "dpsgd")
            with taps.noise_off() if case == "pge tap" else warnings.catch_warnings():
                est.fit(X, y)
            assert not est.privacy_certified_
            est.set_params(classes=[0, 1], mechanism="dpsgd").fit(X, y)
        else:
            images = rng.uniform(0, 1, (16, 4, 4)).astype(np.float32)
            est = SRGANTransformer(scale=2, n_filters=4, discriminator_filters=4, n_residual_blocks=1,
                                   pretrain_epochs=1, gan_epochs=0, random_state=0).fit(images)
            est.set_params(epsilon=1.0, delta=1e-3, norm="group").fit(images)
    assert est.privacy_certified_ and est.privacy_notes_ == ()


@pytest.mark.parametrize("at", [1, 2])
def test_a_completed_continuation_after_an_interrupted_fit_is_certified_as_its_network_is(at):
    # k14: the interruption's note was carried forever; the network re-certifies a continuation that completes
    # (review_s33 f08), and the note is re-derived from it on every call.
    from skorch.callbacks import Callback

    class CtrlC(Callback):
        def __init__(self, at):
            self.at, self.n = at, 0

        def on_train_begin(self, net, **kw):
            self.n += 1

        def on_batch_begin(self, net, **kw):
            if self.n == self.at:
                raise KeyboardInterrupt

    X, y = _xy()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = _warm(callbacks=[CtrlC(at)]).fit(X, y)
        if at == 2:
            est.partial_fit(X, y)  # interrupted
        assert not est.privacy_certified_
        est.partial_fit(X, y)  # completes
    assert est.net_.privacy_certified_ and est.privacy_certified_


def _scaled_pipe(ledger):
    from sklearn.pipeline import make_pipeline

    from skdp.preprocessing import DPQuantileScaler

    return make_pipeline(DPQuantileScaler(epsilon=0.5, domain=(-2, 2), ledger=ledger), _warm(ledger=ledger))


@pytest.mark.parametrize("refusal", ["label", "sample_weight", "columns"])
def test_a_warm_pipeline_refused_before_the_dp_step_plans_is_not_certified(refusal):
    # k15: the warm Pipeline refits (and charges) the scaler, then the DP step refuses before _fit ran (a label outside
    # classes_, sample_weight, other columns): no marker was set, and the old network was certified beside the new
    # scaler. k17: refitting the first step by hand is the same.
    from skdp.exceptions import PrivacyLeakWarning
    from skdp.privacy import privacy_spent

    X, y = _xy()
    ledger = BudgetLedger(epsilon=100.0, delta=1e-2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pipe = _scaled_pipe(ledger)
        pipe.fit(X, y)
        entries = len(ledger.entries)
        with pytest.raises(ValueError):
            if refusal == "label":
                pipe.fit(X, np.where(y == 1, 2, 0))
            elif refusal == "sample_weight":
                pipe.fit(X, y, dpmomentumclassifier__sample_weight=np.ones(len(y)))
            else:
                pipe.fit(X[:, :3], y)
        assert len(ledger.entries) >= entries + (refusal != "columns")  # the scaler was refit and charged
    with pytest.warns(PrivacyLeakWarning, match="fitted again"):
        assert not privacy_spent(pipe)[2]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        manual = _scaled_pipe(ledger).fit(X, y)
        manual[0].fit(X)  # k17: the first step refit by hand, the network trained on its earlier release
    with pytest.warns(PrivacyLeakWarning, match="fitted again"):
        assert not privacy_spent(manual)[2]


def test_a_dp_step_continued_on_the_same_upstream_release_stays_certified():
    # k16 (a false positive of the k12 marker): the scaler fitted once, the network continued on its one release.
    from skdp.privacy import privacy_spent

    X, y = _xy()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pipe = _scaled_pipe(BudgetLedger(epsilon=100.0, delta=1e-2)).fit(X, y)
        pipe[-1].partial_fit(pipe[:-1].transform(X), y)
        eps, _, certified = privacy_spent(pipe)
    assert certified and eps >= 0.5 + pipe[-1].epsilon_ - 1e-9


# -- fourth read (review_s37 k18-k20) ------------------------------------------------------------------------------
def _dpnet(**kw):
    import torch

    from skdp.nn import DPNet

    return DPNet(torch.nn.Linear, module__in_features=4, module__out_features=2, module__dtype=torch.float64,
                 **{"epsilon": 1.0, "delta": 1e-3, "lr": 0.5, "batch_size": 20, "max_epochs": 1, "verbose": 0, **kw})


def _quiet_certified(estimator):
    from skdp.privacy import privacy_spent

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return privacy_spent(estimator)[2]


def test_a_dpnet_continuation_keeps_its_notes_and_when_its_training_began():
    # k18: DPNet reported every fit as a fresh one: a warm DPNet step after a refit scaler was certified, and a
    # partial_fit after a fit inside noise_off, or after a fit whose history holds exact validation losses, too.
    from sklearn.pipeline import make_pipeline
    from skorch.dataset import ValidSplit

    from skdp.preprocessing import DPQuantileScaler
    from skdp.utils import taps

    X, y = _xy()
    X64, y64 = X.astype(np.float64), y.astype(np.int64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pipe = make_pipeline(DPQuantileScaler(epsilon=0.5, domain=(-2, 2)), _dpnet(warm_start=True)).fit(X, y64)
        assert _quiet_certified(pipe)
        pipe.fit(X, y64)  # the scaler refit, the network continued on its earlier release
        assert not _quiet_certified(pipe)
        with taps.noise_off():
            net = _dpnet().fit(X64, y64)
        net.partial_fit(X64, y64)
        assert not net.privacy_certified_ and any("audit tap" in n for n in net.privacy_notes_)
        net = _dpnet(train_split=ValidSplit(5)).fit(X64, y64)
        net.set_params(train_split=None).partial_fit(X64, y64)
        assert not net.privacy_certified_ and any("train_split" in n for n in net.privacy_notes_)
        fresh = _dpnet().fit(X64, y64)
        fresh.partial_fit(X64, y64)  # a continuation of a certified fit stays certified
        assert fresh.privacy_certified_


def test_train_on_synthetic_reports_when_its_generator_was_trained():
    # k19: TrainOnSynthetic copied the generator's report without its stamps: a scaler refit by hand upstream of it
    # left the Pipeline certified.
    from sklearn.pipeline import make_pipeline

    from skdp.generative import PGEGenerator, TrainOnSynthetic
    from skdp.preprocessing import DPQuantileScaler

    X, y = _xy()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        gen = PGEGenerator(noise_multiplier=1.0, bounds=(-2, 2), classes=[0, 1], max_epochs=1, n_repeats=1)
        pipe = make_pipeline(DPQuantileScaler(epsilon=0.5, domain=(-2, 2)),
                             TrainOnSynthetic(gen, synthetic_ratio=1)).fit(X, y)
        assert _quiet_certified(pipe)
        pipe[0].fit(X)
    assert not _quiet_certified(pipe)


def test_a_continuation_of_a_report_without_stamps_counts_as_begun_before_everything():
    # k20: a pickle from before the stamps, continued in a warm Pipeline, had its training stamped as beginning now.
    import pickle

    from sklearn.pipeline import make_pipeline

    from skdp.preprocessing import DPQuantileScaler

    X, y = _xy()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pipe = make_pipeline(DPQuantileScaler(epsilon=0.5, domain=(-2, 2)), _warm()).fit(X, y)
        for _, step in pipe.steps:
            step.__dict__.pop("_released_at_", None)
            step.__dict__.pop("_trained_since_", None)
        pipe = pickle.loads(pickle.dumps(pipe)).fit(X, y)
    assert not _quiet_certified(pipe)


# -- fifth read (review_s37 k23, k24) ------------------------------------------------------------------------------
def _boom(at, exc=KeyboardInterrupt, after=1):
    """A callback that raises ``exc`` after ``after`` lots of the fit number ``at`` (skorch swallows a Ctrl-C)."""
    from skorch.callbacks import Callback

    class Boom(Callback):
        def __init__(self):
            self.n = self.b = 0

        def on_train_begin(self, net, **kw):
            self.n, self.b = self.n + 1, 0

        def on_batch_end(self, net, **kw):
            self.b += 1
            if self.n == at and self.b >= after:
                raise exc("boom")
    return Boom()


@pytest.mark.parametrize("exc", [KeyboardInterrupt, RuntimeError])
def test_an_interrupted_dpnet_continuation_keeps_the_notes_of_the_fits_it_continues(exc):
    # k23: the interruption's note replaced the earlier notes, and the next continuation dropped it: a fit inside
    # noise_off (or with train_split), a cut partial_fit, then one that completes came out certified.
    from skorch.dataset import ValidSplit

    from skdp.utils import taps

    X, y = _xy()
    X64, y64 = X.astype(np.float64), y.astype(np.int64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with taps.noise_off():
            net = _dpnet(callbacks=[_boom(2, exc)]).fit(X64, y64)
        try:
            net.partial_fit(X64, y64)  # cut after one lot
        except RuntimeError:
            pass
        net.partial_fit(X64, y64)  # completes
        assert not net.privacy_certified_ and any("audit tap" in n for n in net.privacy_notes_)
        net = _dpnet(train_split=ValidSplit(5), callbacks=[_boom(2)]).fit(X64, y64)
        net.set_params(train_split=None).partial_fit(X64, y64)  # cut
        net.partial_fit(X64, y64)
    assert not net.privacy_certified_ and any("train_split" in n for n in net.privacy_notes_)


def test_an_interrupted_first_fit_continued_on_the_same_release_stays_certified():
    # k24: a first DPNet fit cut after 2 lots had no stamps; its completing partial_fit counted as begun before
    # everything, and a Pipeline with the scaler it was trained on (fitted once) came out uncertified.
    from sklearn.pipeline import Pipeline

    from skdp.preprocessing import DPQuantileScaler
    from skdp.privacy import privacy_spent

    X, y = _xy()
    X64, y64 = X.astype(np.float64), y.astype(np.int64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        scaler = DPQuantileScaler(epsilon=0.5, domain=(-2, 2)).fit(X64)
        net = _dpnet(callbacks=[_boom(1, after=2)])
        net.fit(scaler.transform(X64), y64)  # cut after 2 lots
        net.partial_fit(scaler.transform(X64), y64)
        assert net.privacy_certified_
        assert privacy_spent(Pipeline([("s", scaler), ("n", net)]))[2]


# -- sixth read (review_s37 k25, k26) ------------------------------------------------------------------------------
@pytest.mark.parametrize("case", ["noise_off-ctrl-c", "noise_off-error", "scaled_noise", "seeded", "train_split"])
def test_a_cut_fit_keeps_its_own_conditions_for_the_fit_that_completes_it(case):
    # k25: a cut fit never wrote its report, so its own tap / seed / train_split note was written nowhere, and the
    # partial_fit that completed it (outside the tap) certified a module whose first lots had no (or a tenth of the)
    # noise, or whose history holds exact validation losses.
    from skorch.dataset import ValidSplit

    from skdp.utils import taps
    from skdp.utils.random import insecure_noise_seed

    X, y = _xy()
    X64, y64 = X.astype(np.float64), y.astype(np.int64)
    exc = RuntimeError if case == "noise_off-error" else KeyboardInterrupt
    context = {"scaled_noise": lambda: taps.scaled_noise(0.1), "seeded": lambda: insecure_noise_seed(0),
               "train_split": warnings.catch_warnings}.get(case, taps.noise_off)
    extra = {"train_split": ValidSplit(5)} if case == "train_split" else {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        net = _dpnet(callbacks=[_boom(1, exc, after=2)], **extra)
        with context():
            try:
                net.fit(X64, y64)
            except RuntimeError:
                pass
        net.set_params(train_split=None).partial_fit(X64, y64)
    assert not net.privacy_certified_, net.privacy_notes_


def test_an_upstream_refit_during_a_fresh_fit_is_seen():
    # k26: the fresh fit's report re-stamped when its training began at its end: a refit of the upstream step during
    # the fit went unseen (it was seen when the same fit was cut, then completed).
    from skorch.callbacks import Callback
    from sklearn.pipeline import Pipeline

    from skdp.preprocessing import DPQuantileScaler
    from skdp.privacy import privacy_spent

    X, y = _xy()
    X64, y64 = X.astype(np.float64), y.astype(np.int64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        scaler = DPQuantileScaler(epsilon=0.5, domain=(-2, 2)).fit(X64)

        class Refit(Callback):
            def on_epoch_end(self, net, **kw):
                if not getattr(self, "done", False):
                    self.done = True
                    scaler.fit(X64)

        net = _dpnet(max_epochs=2, callbacks=[Refit()]).fit(scaler.transform(X64), y64)
        assert not privacy_spent(Pipeline([("s", scaler), ("n", net)]))[2]
        est = DPMomentumClassifier(classes=[0, 1], bounds=(-2, 2), max_epochs=2, callbacks=[Refit()])
        est.fit(scaler.transform(X64), y)
        assert not privacy_spent(Pipeline([("s", scaler), ("n", est)]))[2]


# -- seventh read (review_s37 k27) ---------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["DPNet", "DPMomentumClassifier"])
def test_an_upstream_refit_in_on_train_begin_is_seen(kind):
    # k27: skorch notifies on_train_begin (and initialises the callbacks) before fit_loop, where the fresh fit's
    # start was stamped: an upstream refit there went unseen. The fit is stamped when it is entered.
    from skorch.callbacks import Callback
    from sklearn.pipeline import Pipeline

    from skdp.preprocessing import DPQuantileScaler
    from skdp.privacy import privacy_spent

    X, y = _xy()
    X64, y64 = X.astype(np.float64), y.astype(np.int64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        scaler = DPQuantileScaler(epsilon=0.5, domain=(-2, 2)).fit(X64)

        class RefitAtBegin(Callback):
            def on_train_begin(self, net, **kw):
                scaler.fit(X64)

        Xt = scaler.transform(X64)  # the network trains on this release, refit (no longer counted) at on_train_begin
        if kind == "DPNet":
            step = _dpnet(callbacks=[RefitAtBegin()]).fit(Xt, y64)
        else:
            step = DPMomentumClassifier(classes=[0, 1], bounds=(-2, 2), max_epochs=1, batch_size=20,
                                        callbacks=[RefitAtBegin()]).fit(Xt, y)
        assert not privacy_spent(Pipeline([("s", scaler), ("n", step)]))[2]


# -- eighth read (review_s37 k29) ----------------------------------------------------------------------------------
_COPIES = []


def _copy_at_epoch_end(how):
    """A callback (picklable: module level) that keeps a copy of the net taken during its fit in ``_COPIES``."""
    from skorch.callbacks import Callback

    class CopyAtEpochEnd(Callback):
        def on_epoch_end(self, net, **kw):
            import copy
            import pickle

            _COPIES.append(pickle.loads(pickle.dumps(net)) if how == "pickle" else copy.deepcopy(net))
    CopyAtEpochEnd.__qualname__ = CopyAtEpochEnd.__name__ = f"_CopyAtEpochEnd_{how}"
    globals()[CopyAtEpochEnd.__name__] = CopyAtEpochEnd
    return CopyAtEpochEnd()


@pytest.mark.parametrize("copy_how", ["pickle", "deepcopy"])
def test_a_net_copied_mid_fit_stamps_its_later_fits_afresh(copy_how):
    # k29: the entry stamp travelled in a copy taken during a fit (a pickle, a deepcopy, skorch's Checkpoint) and in
    # get_params: every later fresh fit of the copy, or of its clone, was stamped at the copy's time, and a Pipeline
    # with a scaler fitted since came out uncertified.
    from sklearn.base import clone
    from sklearn.pipeline import Pipeline

    from skdp.preprocessing import DPQuantileScaler
    from skdp.privacy import privacy_spent

    X, y = _xy()
    X64, y64 = X.astype(np.float64), y.astype(np.int64)
    _COPIES.clear()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _dpnet(callbacks=[_copy_at_epoch_end(copy_how)]).fit(X64, y64)
        restored = _COPIES[0]
        restored.set_params(callbacks=[])
        assert not any(k.startswith("_entered_at") for k in list(vars(restored)) + list(restored.get_params()))
        scaler = DPQuantileScaler(epsilon=0.5, domain=(-2, 2)).fit(X64)  # fitted after the copy
        for net in (restored, clone(restored)):
            net.fit(scaler.transform(X64), y64)
            assert privacy_spent(Pipeline([("s", scaler), ("n", net)]))[2]
