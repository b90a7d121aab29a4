"""Defaults that work: each estimator with only the settings a user must give, against the best
documented configuration and an Opacus MLP (issue 13; rerun for issue 28's recipe: EMA of the weights,
the GroupNorm CNN, augmentation multiplicity).

The user sets epsilon, delta, the label set, the public bounds and public preprocessing; everything
else is the estimator's default. The default rules were chosen on development data
(``benchmarks/dev_defaults.py``: the training part of load_digits and synthetic tables), never on
the test splits below. Mean +- std over seeds; every fit draws fresh noise.

Rows
- DPMomentumClassifier on load_digits (stratified 80/20, pixels / 8 - 1) and on MNIST 8k / 2k
  (../shared/data/mnist-t10k, pixels / 127.5 - 1), epsilon 1 and 10, delta 1e-5; on digits also
  module="cnn" (the weight-standardised GroupNorm CNN) and module="cnn" with augment=4 (4 shifted
  copies of each record averaged inside its clipped gradient: the same privacy). The MNIST pixel rows
  pass image_shape=(28, 28) (what the rows are), so module="auto" takes the CNN (lots of 500) and
  augment="auto" 4 shifted copies, with augment=None beside it; the digits rows pass none (8x8: the
  linear model, no copies). Fit seconds are the mean of
  the row's fits, on 2 cores (the MNIST rows ran beside a niced dpmm job and an attacker's review).
- the same behind ScatteringTransform (its defaults: J=2, L=8, per-example group normalisation, on
  MNIST; J=1 and one channel a group on the 8 x 8 digits and the 14 x 11 faces), an explicit step the
  user adds: the digits and ORL "scattering" rows are measured against those data's targets.
- ORL faces 14x11 (Downsample(8, "area") -> CenterNormalize(public mean face) -> classifier),
  image 1 of each subject public, 6 train / 3 test of the other 9, delta 1e-3, epsilon 5 and 10.
- PGEGenerator on load_digits and breast cancer, epsilon 1: LogisticRegression trained on 10x
  synthetic records, tested on the real test split.
- Opacus MLP (hidden 256, Poisson lots of 256, 30 epochs, SGD lr 0.5 momentum 0.9, clip 1) where
  Opacus is installed, on digits and ORL: the peer library's usual recipe, not tuned here either
  (on MNIST its per-sample hooks take ~5 minutes a fit on 2 cores; the issue's figures are quoted).

Run: python benchmarks/bench_defaults.py [--seeds 3] [--skip-shared]
"""
import argparse
import importlib.util
import time
import warnings

import numpy as np
import torch
from sklearn.datasets import load_breast_cancer, load_digits
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import train_test_split

from _common import SHARED_DATA, environment, markdown_table, write_result
from skdp import DPMomentumClassifier, PGEGenerator
from skdp.datasets import load_mnist_folder, load_orl_faces
from skdp.demo import digits_split
from skdp.generative import downstream_accuracy
from skdp.preprocessing import CenterNormalize, Downsample, ScatteringTransform
from reproduce_thesis import split as thesis_split  # the thesis's public/private protocol, one home

# Targets of issue 28, and the best documented configuration of each row (where it was measured).
TARGETS = {("digits", "pixels", 1.0): 0.93, ("digits", "pixels", 10.0): 0.97,
           ("MNIST 8k", "pixels", 1.0): 0.92, ("MNIST 8k", "pixels", 10.0): 0.95,
           ("MNIST 8k", "scattering", 1.0): 0.97,
           ("ORL 14x11", "public mean face", 5.0): 0.75, ("ORL 14x11", "public mean face", 10.0): 0.88,
           ("digits", "PGE", 1.0): 0.86,
           # The digits and ORL targets, met (or not) with the explicit scattering step in front.
           ("digits", "scattering", 1.0): 0.93, ("digits", "scattering", 10.0): 0.97,
           ("ORL 14x11", "scattering", 5.0): 0.75, ("ORL 14x11", "scattering", 10.0): 0.88}
# On digits, the recipe's image rows beside the linear default (module and augment are the user's choice).
DIGITS_EXTRA = {"skdp defaults, module='cnn'": dict(module="cnn"),
                "skdp defaults, module='cnn', augment=4": dict(module="cnn", augment=4)}
# On MNIST pixels, the default (image_shape=(28, 28): the CNN with augment="auto", 4 copies) beside the CNN
# without copies.
MNIST_EXTRA = {"skdp defaults, augment=None": dict(augment=None)}
BEST_DOCUMENTED = {("digits", "pixels", 1.0): "0.90 (previous defaults, classifier_accuracy.md)",
                   ("MNIST 8k", "pixels", 1.0): "0.859 (linear, lots of 1000); Opacus MLP 0.841 (issue 13)",
                   ("MNIST 8k", "pixels", 10.0): "0.922 (CNN, lots of 1000); Opacus MLP 0.898 (issue 13)",
                   ("ORL 14x11", "public mean face", 10.0): "0.81 (lr 3.33, 30 epochs, full lots)",
                   ("digits", "PGE", 1.0): "0.839 (gaussian, lr 0.01, 16 projections)"}


def quiet(fn, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(*args, **kwargs)


def opacus_mlp(Xtr, ytr, Xte, yte, eps, delta, seed, n_classes=10):
    """The peer's usual recipe: MLP, Poisson lots of 256, 30 epochs, SGD with momentum, clip 1."""
    from opacus import PrivacyEngine

    g = torch.Generator().manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(Xtr.shape[1], 256), torch.nn.ReLU(), torch.nn.Linear(256, n_classes))
    opt = torch.optim.SGD(model.parameters(), lr=0.5, momentum=0.9)
    data = torch.utils.data.TensorDataset(torch.as_tensor(Xtr, dtype=torch.float32), torch.as_tensor(ytr))
    loader = torch.utils.data.DataLoader(data, batch_size=min(256, len(Xtr)), generator=g)
    engine = PrivacyEngine()
    model, opt, loader = engine.make_private_with_epsilon(module=model, optimizer=opt, data_loader=loader,
                                                          target_epsilon=eps, target_delta=delta, epochs=30,
                                                          max_grad_norm=1.0, poisson_sampling=True)
    for _ in range(30):
        for xb, yb in loader:
            if len(xb) == 0:
                continue
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(xb), yb).backward()
            opt.step()
    with torch.no_grad():
        pred = model(torch.as_tensor(Xte, dtype=torch.float32)).argmax(1).numpy()
    return float(np.mean(pred == yte))


def mnist(seed, X, y):
    return train_test_split(X, y, train_size=8000, test_size=2000, stratify=y, random_state=seed)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--skip-shared", action="store_true", help="only scikit-learn's shipped data")
    parser.add_argument("--pge-only", action="store_true",
                        help="only the PGEGenerator rows; every other row of the committed defaults.md is kept")
    parser.add_argument("--only", default="",
                        help="only these 'data/features' rows (comma-separated, e.g. 'MNIST 8k/pixels'); every "
                             "other row of the committed defaults.md is kept")
    args = parser.parse_args()
    only = {w.strip() for w in args.only.split(",") if w.strip()}

    def wanted(data, features):
        if args.pge_only:
            return features == "PGE"
        return not only or f"{data}/{features}" in only
    seeds = range(args.seeds)
    have_opacus = importlib.util.find_spec("opacus") is not None
    results = {}  # (data, features, eps, what) -> [accuracy]
    fit_seconds = {}  # (data, features, eps, what) -> [seconds]
    start = time.perf_counter()

    def add(key, acc, seconds=None):
        results.setdefault(key, []).append(acc)
        if seconds is not None:
            fit_seconds.setdefault(key, []).append(seconds)
        print(key, f"{acc:.3f}", f"{time.perf_counter() - start:.0f}s", flush=True)

    def timed_fit(estimator, X, y):
        t0 = time.perf_counter()
        quiet(estimator.fit, X, y)
        return estimator, time.perf_counter() - t0

    # -- DPMomentumClassifier on pixels ----------------------------------------------------------
    splits = [("digits", "pixels", 1e-5, (1.0, 10.0), digits_split, {})] if wanted("digits", "pixels") else []
    if wanted("digits", "scattering"):
        # ScatteringTransform's defaults on 8 x 8 images (J="auto": 1, a group per channel): row-wise and fixed.
        scatter = ScatteringTransform(image_shape=(8, 8)).fit(np.zeros((1, 64)))
        splits.append(("digits", "scattering", 1e-5, (1.0, 10.0),
                       lambda s: [scatter.transform(a) if i < 2 else a for i, a in enumerate(digits_split(s))], {}))
    if not args.skip_shared and (wanted("MNIST 8k", "pixels") or wanted("MNIST 8k", "scattering")):
        Xm, ym = load_mnist_folder(SHARED_DATA / "mnist-t10k")
        Xm = Xm.reshape(len(Xm), -1) / 127.5 - 1.0
        if wanted("MNIST 8k", "pixels"):
            # image_shape says what the rows are (public): module="auto" then takes the CNN.
            splits.append(("MNIST 8k", "pixels", 1e-5, (1.0, 10.0), lambda s: mnist(s, Xm, ym),
                           {"image_shape": (28, 28)}))
        if wanted("MNIST 8k", "scattering"):
            # Scattering is row-wise and fixed: transform every image once, then split.
            Sm = ScatteringTransform().fit(Xm[:1]).transform(Xm)
            splits.append(("MNIST 8k", "scattering", 1e-5, (1.0, 10.0), lambda s: mnist(s, Sm, ym), {}))
    for data, features, delta, epsilons, make, given in splits:
        extra = {} if features != "pixels" else DIGITS_EXTRA if data == "digits" else MNIST_EXTRA
        for seed in seeds:
            Xtr, Xte, ytr, yte = make(seed)
            for eps in epsilons:
                clf, secs = timed_fit(DPMomentumClassifier(epsilon=eps, delta=delta, classes=range(10), **given),
                                      Xtr, ytr)
                add((data, features, eps, "skdp defaults"), clf.score(Xte, yte), secs)
                for what, params in extra.items():
                    params = {**given, **params}
                    clf, secs = timed_fit(DPMomentumClassifier(epsilon=eps, delta=delta, classes=range(10), **params),
                                          Xtr, ytr)
                    add((data, features, eps, what), clf.score(Xte, yte), secs)
                # Opacus's per-sample hooks take ~5 min per MNIST fit here: digits only; MNIST's Opacus
                # MLP figures (0.841 / 0.898) are the issue's, quoted in the table.
                if have_opacus and features == "pixels" and data == "digits":
                    add((data, features, eps, "Opacus MLP"), quiet(opacus_mlp, Xtr, ytr, Xte, yte, eps, delta, seed))

    # -- ORL faces, the thesis's 14x11 pipeline with classifier defaults -------------------------
    if not args.skip_shared and (wanted("ORL 14x11", "public mean face") or wanted("ORL 14x11", "scattering")):
        images, target = load_orl_faces(SHARED_DATA / "orl_faces.npz")
        public = np.flatnonzero(np.arange(len(target)) % 10 == 0)  # image 1 of each subject
        low = Downsample(8, method="area").fit(images[:1]).transform(images.astype(np.float32) / 255.0)
        Z = low.reshape(len(low), -1)
        norm = CenterNormalize(Z[public].mean(0)).fit(Z[public])
        Zn = norm.transform(Z)
        # ScatteringTransform's defaults on the 14 x 11 images (J="auto": 1), the rule digits-dev chose.
        Zs = ScatteringTransform(image_shape=low.shape[1:]).fit(Z[:1]).transform(Z)
        for seed in seeds:
            train, test = thesis_split(target, public, seed)
            for eps in (5.0, 10.0):
                for features, F in (("public mean face", Zn), ("scattering", Zs)):
                    if wanted("ORL 14x11", features):
                        clf, secs = timed_fit(DPMomentumClassifier(epsilon=eps, delta=1e-3, classes=range(40)),
                                              F[train], target[train])
                        add(("ORL 14x11", features, eps, "skdp defaults"), clf.score(F[test], target[test]), secs)
                if have_opacus and wanted("ORL 14x11", "public mean face"):
                    add(("ORL 14x11", "public mean face", eps, "Opacus MLP"),
                        quiet(opacus_mlp, Zn[train], target[train], Zn[test], target[test], eps, 1e-3, seed, 40))

    # -- PGEGenerator, train on synthetic / test on real -----------------------------------------
    Xd, yd = load_digits(return_X_y=True)
    Xb, yb = load_breast_cancer(return_X_y=True)
    pge_data = [("digits", Xd, yd, (0.0, 16.0), lambda A: A / 16.0),
                # breast cancer has no public ranges: we take them from the whole set (labelled so).
                ("breast_cancer (bounds from the data)", Xb, yb, (Xb.min(0), Xb.max(0)), None)]
    for name, X, y, bounds, scale in pge_data:
        if not wanted(name, "PGE") and not (only and name == "digits" and "digits/PGE" in only):
            continue
        for seed in seeds:
            Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.2, stratify=y, random_state=seed)
            gen, secs = timed_fit(PGEGenerator(epsilon=1.0, bounds=bounds, classes=np.unique(y), random_state=seed),
                                  Xtr, ytr)
            Xs, ys = gen.sample(10 * len(Xtr), random_state=seed)
            f = scale or (lambda A: (A - Xtr.mean(0)) / Xtr.std(0))
            add((name, "PGE", 1.0, "skdp defaults"),
                quiet(downstream_accuracy, f(Xs), ys, f(Xte), yte, LogisticRegression(max_iter=150)), secs)

    rows = []
    for (data, features, eps, what), accs in results.items():
        target = TARGETS.get((data, features, eps))
        mean = np.mean(accs)
        verdict = "" if target is None or not what.startswith("skdp defaults") else (
            f">= {target}: {'met' if mean >= target else f'missed by {target - mean:.3f}'}")
        best = BEST_DOCUMENTED.get((data, features, eps), "") if what == "skdp defaults" else ""
        secs = fit_seconds.get((data, features, eps, what))
        rows.append((data, features, f"{eps:g}", what, f"{mean:.3f} ± {np.std(accs):.3f}", len(accs),
                     "" if secs is None else f"{np.mean(secs):.1f}", best, verdict))
    if args.pge_only or only:  # the committed report with this run's rows in place of its own
        _replace_rows(rows, args.seeds, "--pge-only" if args.pge_only else f"--only {args.only!r}")
        return
    table = markdown_table(["data", "features", "epsilon", "estimator", "accuracy", "seeds", "fit s",
                            "best documented configuration", "target"], rows)
    text = (f"# Defaults that work (issues 13, 28)\n\n{environment()}; {args.seeds} seeds; whole benchmark "
            f"{(time.perf_counter() - start) / 60:.1f} min.\n\n{__doc__.split('Run:')[0]}\n{table}\n")
    print(text)
    write_result("defaults.md", text)


def _replace_rows(rows, seeds, how):
    """Rewrite the committed defaults.md with ``rows`` in place of its rows of the same data, features,
    epsilon and estimator; a row it lacks goes after the last row of its data and features, and a committed
    row of a rerun data and features that this run did not make is dropped (an estimator no longer run)."""
    from _common import RESULTS

    lines = (RESULTS / "defaults.md").read_text().splitlines()
    fresh = {tuple(str(c) for c in r[:4]): "| " + " | ".join(str(c) for c in r) + " |" for r in rows}
    rerun = {key[:2] for key in fresh}
    out, last = [], {}
    for line in lines:
        cells = [c.strip() for c in line.strip("|").split("|")]
        if line.startswith("|") and len(cells) >= 9:
            key = tuple(cells[:4])
            if key[:2] in rerun and key not in fresh:
                continue
            line = fresh.pop(key, line)
            last[key[:2]] = len(out)
        out.append(line)
    # From the bottom up, and the rows of one place in reverse: each lands in this run's order.
    pending = sorted(enumerate(fresh.items()), key=lambda item: (-last.get(item[1][0][:2], len(out)), -item[0]))
    for _, (key, line) in pending:
        out.insert(last.get(key[:2], len(out) - 1) + 1, line)
    data = sorted({f"{r[0]} / {r[1]}" for r in rows})
    note = (f"Rows of {', '.join(data)} rerun on {time.strftime('%Y-%m-%d')} ({seeds} seeds, `{how}`); every "
            "other row is kept from the committed run (`git log benchmarks/results/defaults.md`).")
    out.insert(2, note + "\n")
    write_result("defaults.md", "\n".join(out) + "\n")


if __name__ == "__main__":
    main()
