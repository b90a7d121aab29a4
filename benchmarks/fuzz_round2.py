"""Rerun of the odd inputs of issue 24 ("Odd inputs, round 2"), each classified.

Every case is one call a careless or hurried user might make. Its outcome is put in one class:

- silent-wrong: it returned, and what it returned is wrong (a reconstruction of 1e12, 3 channels
  asked and 1 given, a parameter dropped without a word, NaN weights under a certified epsilon);
- hang: it took more than ``HANG_S`` seconds to refuse (or was stopped at ``TIMEOUT_S``);
- confusing error: it refused, but the message does not name the problem (or prints a private
  label value);
- fine: refused quickly with a message that names the problem, or accepted and right.

The one-run audit's delta (the issue's first bullet) is rerun too, in its own section: another
change owns it. Run: ``python benchmarks/fuzz_round2.py [--out results/fuzz_round2.md]``; it takes
a few minutes on 2 cores (the epsilon=1e-12 fits and the MI-Face attacks dominate).
"""
import argparse
import math
import re
import signal
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import torch
from sklearn.datasets import load_digits, make_blobs

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import environment, markdown_table, write_result  # noqa: E402

HANG_S = 10.0  # a refusal slower than this is a hang (the were 4-87 s)
TIMEOUT_S = 120.0  # stop a call here (SIGALRM)
PRIVATE_LABEL = 123456789  # a label value no error may print


class Wrong(Exception):
    """Raised by a check: the call returned, and its result is wrong."""


def _X(n=60, d=4):
    X, y = make_blobs(n_samples=n, n_features=d, centers=2, random_state=0)
    return X.astype(np.float32), y


def _returned(result):
    """What a call that should have refused returned instead."""
    if callable(getattr(result, "epsilon_spent", None)):  # a DPNet
        finite = all(bool(torch.isfinite(p.detach()).all()) for p in result.module_.parameters())
        return f"{'finite' if finite else 'NaN/inf'} weights, epsilon reported {result.epsilon_spent():.3g}"
    if isinstance(result, np.ndarray):
        return f"an array of shape {result.shape}"
    return f"{type(result).__name__}: the input was taken silently"


def refuses(pattern, leak=None):
    """The expectation of a refusal: an error whose message matches ``pattern`` (and omits ``leak``)."""
    return ("refuse", pattern, leak)


def accepts(check):
    """The expectation of an accepted call: ``check(result)`` raises ``Wrong`` if the result is wrong."""
    return ("accept", check, None)


# -- the calls ------------------------------------------------------------------------------------
def miface_default(normalize_rows="rms"):
    from skdp import DPMomentumClassifier
    from skdp.attacks import MIFace
    X, y = load_digits(return_X_y=True)
    clf = DPMomentumClassifier(epsilon=math.inf, classes=range(10), max_epochs=5, normalize_rows=normalize_rows,
                               random_state=0).fit(X / 16, y)
    return MIFace(clf, alpha=300, lambda_=1.0).run(np.arange(10))


def miface_sensible(result):
    size = float(np.abs(result.reconstructions).max())
    if not (np.isfinite(size) and size < 1e3):
        raise Wrong(f"largest pixel of the reconstruction {size:.3g}")
    return f"largest pixel {size:.3g}, mean confidence {result.confidences.mean():.2f}"


def miface_n_features():
    from skdp import DPMomentumClassifier
    from skdp.attacks import MIFace
    X, y = _X()
    return MIFace(DPMomentumClassifier(classes=[0, 1], max_epochs=1).fit(X, y), n_features=7, alpha=5).run([0])


def upsample(output_size):
    from skdp.preprocessing import Upsample
    return Upsample(output_size=output_size).fit_transform(np.zeros((2, 16, 16), np.float32))


def shape_is(shape):
    def check(result):
        if result.shape[1:] != shape:
            raise Wrong(f"returned images of shape {result.shape[1:]}")
        return f"shape {result.shape[1:]}"
    return check


def callbacks_typo(make, key):
    def run():
        X, y = _X()
        est = make().set_params(**{key: 1})
        return est.fit(X, y)
    return run


def dpnet(max_grad_norm):
    from skdp.nn import DPNet
    X, y = _X(64)
    net = DPNet(torch.nn.Linear, module__in_features=4, module__out_features=2, max_grad_norm=max_grad_norm,
                epsilon=1.0, delta=1e-3, lr=0.5, batch_size=16, max_epochs=2, verbose=0)
    return net.fit(X, y.astype(np.int64))


def calibrate():
    from skdp.privacy import calibrate_noise_multiplier
    return calibrate_noise_multiplier(1e-9, 1e-5, 0.5, 10000)


def fit_on(make, images=False, n=200):
    def run():
        if images:
            return make().fit(np.random.default_rng(0).random((n, 8, 8)).astype(np.float32))
        X, y = _X(n)
        return make().fit(X, y)
    return run


def unreachable():
    """epsilon=1e-12 with each DP-SGD estimator's default schedule (the issue's hangs: 3.9 s to 74 s).

    Small data sets: the lots are then a large share of the data (sample rate 0.4-0.6), where each
    accountant call of the old bracket search took seconds.
    """
    from skdp import DPMomentumClassifier, DPMomentumRegressor, PGEGenerator, SRGANTransformer
    return {
        "DPMomentumClassifier": fit_on(lambda: DPMomentumClassifier(epsilon=1e-12), n=40),
        "DPMomentumRegressor": fit_on(lambda: DPMomentumRegressor(epsilon=1e-12), n=40),
        "PGEGenerator": fit_on(lambda: PGEGenerator(epsilon=1e-12), n=40),
        "SRGANTransformer": fit_on(lambda: SRGANTransformer(scale=2, image_shape=(8, 8), epsilon=1e-12),
                                   images=True, n=32),
    }


def fit_labels(make, y, **params):
    def run():
        X, _ = _X(len(y))
        return make(**params).fit(X, y)
    return run


def classes_are(expected):
    def check(est):
        if list(est.classes_) != list(expected):
            raise Wrong(f"classes_ {list(est.classes_)}")
        return f"classes_ {list(est.classes_)}"
    return check


def audit_bound(delta):
    from skdp.audit import one_run_epsilon_lower_bound
    return one_run_epsilon_lower_bound(1000, 100, 100, delta)


def audit_run(delta):
    from skdp import DPMomentumClassifier
    from skdp.audit import one_run_audit
    X, y = _X(200)
    return one_run_audit(DPMomentumClassifier(classes=[0, 1], max_epochs=1), X[:150], y[:150], X[150:], y[150:],
                         delta=delta)


# -- the cases ------------------------------------------------------------------------------------
def estimators():
    from skdp import (DFSRelease, DPFisherClassifier, DPFisherSelector, DPMomentumClassifier, DPMomentumRegressor,
                      PGEGenerator, SRGANTransformer, TTestSelector)
    return {
        "DPMomentumClassifier": (lambda **k: DPMomentumClassifier(max_epochs=1, **k), True, True),
        "DPMomentumRegressor": (lambda **k: DPMomentumRegressor(max_epochs=1, **k), False, True),
        "PGEGenerator": (lambda **k: PGEGenerator(max_epochs=1, hidden_size=16, n_levels=3, **k), True, True),
        "SRGANTransformer": (lambda **k: SRGANTransformer(scale=2, n_filters=4, discriminator_filters=4,
                                                          n_residual_blocks=1, pretrain_epochs=1, gan_epochs=1,
                                                          image_shape=(8, 8), **{"epsilon": 1.0, **k}),
                             False, True),
        "DPFisherClassifier": (lambda **k: DPFisherClassifier(bounds=(-20, 20), **k), True, False),
        "DPFisherSelector": (lambda **k: DPFisherSelector(2, bounds=(-20, 20), **k), True, False),
        "DFSRelease": (lambda **k: DFSRelease(2, bounds=(-20, 20), **k), True, False),
        "TTestSelector": (lambda **k: TTestSelector(2, **k), True, False),
    }


def cases():
    from skdp import DPMomentumClassifier, DPMomentumRegressor
    ests = estimators()
    out = []
    add = lambda section, name, call, expect: out.append((section, name, call, expect))  # noqa: E731
    add("attack", "MIFace, default classifier (rms rows)", miface_default, accepts(miface_sensible))
    add("attack", "MIFace, normalize_rows='none' (reference)", lambda: miface_default("none"),
        accepts(miface_sensible))
    add("attack", "MIFace(n_features=7), 4-feature model", miface_n_features, refuses(r"n_features=7.*4"))
    add("images", "Upsample(output_size=(3, 8, 8)), 1x16x16", lambda: upsample((3, 8, 8)),
        refuses(r"output_size.*channel"))
    add("images", "Upsample(output_size=(5, 32, 32)), 1x16x16", lambda: upsample((5, 32, 32)),
        refuses(r"output_size.*channel"))
    add("images", "Upsample(output_size=(1, 32, 32)), 1x16x16", lambda: upsample((1, 32, 32)),
        accepts(shape_is((32, 32))))
    for make, name in ((lambda: DPMomentumClassifier(max_epochs=1, classes=[0, 1]), "DPMomentumClassifier"),
                       (lambda: DPMomentumRegressor(max_epochs=1), "DPMomentumRegressor")):
        for key in ("callbacks__x", "callbacks__x__y"):
            add("parameters", f"{name}.set_params({key}=1).fit", callbacks_typo(make, key),
                refuses(r"callback 'x'.*not exist"))
    for value in (math.inf, math.nan, 0.0, -1.0, True):
        add("parameters", f"DPNet(max_grad_norm={value!r}).fit", lambda v=value: dpnet(v),
            refuses(r"max_grad_norm"))
    for est, (make, labels, dpsgd) in ests.items():
        if est == "TTestSelector":
            continue
        images = est == "SRGANTransformer"
        add("parameters", f"{est}(epsilon=True).fit", fit_on(lambda m=make: m(epsilon=True), images),
            refuses(r"epsilon.*True"))
        if dpsgd:
            add("parameters", f"{est}(batch_size=True).fit", fit_on(lambda m=make: m(batch_size=True), images),
                refuses(r"batch_size.*True"))
    for est, run in unreachable().items():
        add("hangs", f"{est}(epsilon=1e-12).fit, default schedule", run, refuses(r"[Cc]annot reach epsilon"))
    add("hangs", "calibrate_noise_multiplier(1e-9, 1e-5, 0.5, 10000)", calibrate,
        refuses(r"[Cc]annot reach epsilon.*least epsilon reachable.*0\.00"))
    y = np.arange(60) % 2
    label_inputs = {
        "ints above int64": ({}, np.array([2 ** 64 + int(v) for v in y], dtype=object), refuses(r"int64")),
        "whole labels 1e20, 2e20": ({}, np.where(y == 0, 1e20, 2e20), refuses(r"int64")),
        "classes={0, 1} (a set)": ({"classes": {1, 0}}, y, accepts(classes_are([0, 1]))),
        "one class, private value": ({}, np.full(60, PRIVATE_LABEL), refuses(r"one class|2 distinct",
                                                                             leak=str(PRIVATE_LABEL))),
        "label outside classes": ({"classes": [0, 1]}, np.where(y == 0, 0, PRIVATE_LABEL),
                                  refuses(r"not in classes", leak=str(PRIVATE_LABEL))),
    }
    for est, (make, labels, _) in ests.items():
        if not labels:
            continue
        for case, (params, y_bad, expect) in label_inputs.items():
            if params and est == "TTestSelector":
                continue  # no classes parameter
            add("labels", f"{est}: {case}", fit_labels(make, y_bad, **params), expect)
    for delta in (math.nan, 2.0, -1.0):
        add("audit (other change)", f"one_run_epsilon_lower_bound(1000, 100, 100, {delta})",
            lambda d=delta: audit_bound(d), refuses(r"delta"))
    add("audit (other change)", "one_run_audit(..., delta=nan)", lambda: audit_run(math.nan), refuses(r"delta"))
    return out


# -- running and classifying ----------------------------------------------------------------------
def _alarm(signum, frame):
    raise TimeoutError(f"stopped after {TIMEOUT_S:g} s")


def _cold_caches():
    """Empty skdp's accountant caches: each case is timed as the first of its kind in a session."""
    from skdp.privacy import accounting, calibration
    for cached in (getattr(calibration, "_calibrate", None), getattr(accounting, "_rdp_of_one_step", None)):
        if hasattr(cached, "cache_clear"):
            cached.cache_clear()


def classify(call, expect):
    kind, arg, leak = expect
    _cold_caches()
    signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, TIMEOUT_S)
    start = time.perf_counter()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result, error = call(), None
    except TimeoutError as exc:
        return "hang", time.perf_counter() - start, str(exc)
    except Exception as exc:  # noqa: BLE001 - every error is classified
        result, error = None, exc
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    seconds = time.perf_counter() - start
    message = "" if error is None else f"{type(error).__name__}: {error}"
    if error is not None and seconds > HANG_S:
        return "hang", seconds, message
    if kind == "refuse":
        if error is None:
            return "silent-wrong", seconds, f"returned {_returned(result)}"
        if leak is not None and leak in message:
            return "confusing error", seconds, message + " (prints a private label value)"
        return ("fine" if re.search(arg, message) else "confusing error"), seconds, message
    if error is not None:
        return "confusing error", seconds, message
    try:
        return "fine", seconds, arg(result)
    except Wrong as wrong:
        return "silent-wrong", seconds, str(wrong)


def _read_result(path):
    """``{call: (class, seconds)}`` from the table of an earlier result."""
    out = {}
    for line in Path(path).read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| ") and len(cells) >= 5 and cells[0] not in ("section",):
            out[cells[1]] = (cells[-3], cells[-2])
    return out


def before_summary(before):
    counts = {}
    for name, (outcome, _) in before.items():
        if not name.startswith("one_run"):
            counts[outcome] = counts.get(outcome, 0) + 1
    return ", ".join(f"{counts.get(c, 0)} {c}" for c in ("silent-wrong", "hang", "confusing error", "fine"))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="fuzz_round2.md", help="file name under benchmarks/results")
    parser.add_argument("--only", default=None, help="run one section only (e.g. hangs)")
    parser.add_argument("--before", default=None,
                        help="an earlier result (markdown) of the same script, e.g. on the code before the fixes: "
                             "its class and seconds are shown beside each call")
    parser.add_argument("--before-label", default=None, help="what the earlier result ran on, for the text")
    args = parser.parse_args()
    before = _read_result(args.before) if args.before else {}
    import skdp
    from opacus.accountants.analysis import rdp  # noqa: F401 - imported once here, not inside a timed call
    from torch.optim import adam  # noqa: F401
    torch.optim.Adam(torch.nn.Linear(1, 1).parameters())  # its first use imports torch._dynamo (1.6 s)
    rows, counts = [], {}
    for section, name, call, expect in cases():
        if args.only is not None and section != args.only:
            continue
        outcome, seconds, note = classify(call, expect)
        if not section.startswith("audit"):
            counts[outcome] = counts.get(outcome, 0) + 1
        note = note.replace("|", "/").replace("\n", " ")
        was = before.get(name)
        rows.append([section, name] + ([f"{was[0]} ({was[1]} s)" if was else "-"] if before else [])
                    + [outcome, f"{seconds:.2f}", note[:220]])
        print(rows[-1], flush=True)
    classes = ("silent-wrong", "hang", "confusing error", "fine")
    summary = ", ".join(f"{counts.get(c, 0)} {c}" for c in classes)
    text = (f"# Odd inputs, round 2 (issue 24): rerun\n\n"
            f"`python benchmarks/fuzz_round2.py` on skdp at {Path(skdp.__file__).parent}; {environment()}.\n\n"
            f"**{summary}** over the {sum(counts.values())} calls of this task (the one-run audit's delta, "
            f"owned by another change, is listed apart and not counted; its rows show the tree as it was).\n\n"
            f"A refusal slower than {HANG_S:g} s counts as a hang; seconds are wall time of the call, in one "
            "process after the imports, with the accountant's caches emptied before each call.\n\n"
            + (f"Before (the same calls on {args.before_label or args.before}): {before_summary(before)}.\n\n"
               if before else "")
            + markdown_table(["section", "call"] + (["before"] if before else []) + ["class", "seconds", "outcome"],
                             rows) + "\n")
    write_result(args.out, text)


if __name__ == "__main__":
    main()
