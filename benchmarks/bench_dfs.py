"""DFS: test error of a Fisher classifier after feature selection, private and as published.

Pipelines (each a scikit-learn Pipeline; "Fisher" is the diagonal Fisher rule with equal priors):
  none          all features, certified noisy release (analytic Gaussian, full epsilon) -> Fisher
  ttest         t-test top m (NOT private) -> certified noisy release (full epsilon) -> Fisher
  ttest_paper   t-test top m (NOT private) -> the paper's noise (NOT certified) -> Fisher
  dfs_paper     Algorithm 1 as written (NOT certified) -> Fisher
  dfs_private   DFSRelease: private top m (epsilon/2) + certified release (epsilon/2) -> Fisher
  dfs_dpfisher  DPFisherSelector top m (epsilon/2) -> DPFisherClassifier (epsilon/2): certified
                end to end, labels included
  dpfisher      DPFisherClassifier on all features (epsilon): certified
Synthetic data: the paper's theory setting (s = 10 informative features, adjacent class means one
apart, identity covariance, public bounds +-4). Real data: load_digits (stratified 80/20) and the
MNIST test set (8k / 2k), public pixel bounds. delta = 1e-5 throughout.

Run: python benchmarks/bench_dfs.py [--seeds 3] [--skip-mnist]
"""
import argparse
import math
import time
import warnings

import matplotlib
import numpy as np
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from sklearn.pipeline import make_pipeline

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from _common import RESULTS, SHARED_DATA, environment, markdown_table, write_result  # noqa: E402
from skdp import DFSRelease, DPFisherClassifier, DPFisherSelector, PrivacyLeakWarning, TTestSelector  # noqa: E402
from skdp.datasets import load_mnist_folder  # noqa: E402

DELTA = 1e-5
PIPELINES = ("none", "ttest", "ttest_paper", "dfs_paper", "dfs_private", "dfs_dpfisher", "dpfisher")
CERTIFIED = {"none": "yes", "ttest": "no (selection)", "ttest_paper": "no", "dfs_paper": "no",
             "dfs_private": "yes (features)", "dfs_dpfisher": "yes", "dpfisher": "yes"}


def fisher():
    return DPFisherClassifier(epsilon=math.inf, priors="uniform")


def build(name, m, eps, bounds, classes, clip_norm, seed):
    p_all = None  # filled by the caller through m == n_features for "none"
    common = dict(delta=DELTA, bounds=bounds, classes=classes, random_state=seed)
    if name == "none":
        return make_pipeline(DFSRelease(p_all or m, epsilon=eps, clip_norm=clip_norm, **common), fisher())
    if name == "ttest":
        return make_pipeline(TTestSelector(m), DFSRelease(m, epsilon=eps, clip_norm=clip_norm, **common),
                             fisher())
    if name == "ttest_paper":
        return make_pipeline(TTestSelector(m), DFSRelease(m, epsilon=eps, method="paper", **common), fisher())
    if name == "dfs_paper":
        return make_pipeline(DFSRelease(m, epsilon=eps, method="paper", **common), fisher())
    if name == "dfs_private":
        return make_pipeline(DFSRelease(m, epsilon=eps, clip_norm=clip_norm, **common), fisher())
    if name == "dfs_dpfisher":
        return make_pipeline(DPFisherSelector(m, epsilon=eps / 2, **common),
                             DPFisherClassifier(epsilon=eps / 2, priors="uniform", **common))
    if name == "dpfisher":
        return DPFisherClassifier(epsilon=eps, priors="uniform", **common)
    raise ValueError(name)


def run(name, data, m, eps, bounds, clip_norm, seed):
    Xtr, Xte, ytr, yte = data
    classes = np.unique(np.concatenate([ytr, yte]))  # the public label set of the task
    m_eff = Xtr.shape[1] if name in ("none", "dpfisher") else m
    cn = None if clip_norm is None else clip_norm(m_eff)
    pipe = build(name, m_eff, eps, bounds, classes, cn, seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyLeakWarning)
        pipe.fit(Xtr, ytr)
    return 1.0 - pipe.score(Xte, yte), pipe


def gaussian_task(n, p, k, seed, s=10, n_test=2000):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, k, n + n_test)
    X = rng.normal(size=(n + n_test, p))
    X[:, :s] += (y[:, None] - (k - 1) / 2) * 1.0
    return X[:n], X[n:], y[:n], y[n:]


def unit_scale_clip(m):
    return math.sqrt(m)  # public: features are on unit scale, so a row of m has norm about sqrt(m)


def synthetic(seeds, rows_eps, recovery, curves_m, curves_eps):
    bounds = (-4.0, 4.0)
    epsilons = (0.5, 1, 3, 6, 10)
    for k in (2, 4):
        for n in (500, 2000):
            for p in (50, 200, 1000, 2000):
                for eps in epsilons:
                    errs = {name: [] for name in PIPELINES}
                    for seed in seeds:
                        data = gaussian_task(n, p, k, seed)
                        for name in PIPELINES:
                            err, pipe = run(name, data, 10, eps, bounds, unit_scale_clip, seed)
                            errs[name].append(err)
                            if name == "dfs_private":
                                found = len(set(pipe[0].selector_.get_support(indices=True)) & set(range(10)))
                                recovery.setdefault((k, n, p, eps), []).append(found)
                    means = {name: np.mean(v) for name, v in errs.items()}
                    rows_eps.append((k, n, p, eps, *(f"{means[nm]:.3f}" for nm in PIPELINES),
                                     f"{np.mean(recovery[(k, n, p, eps)]):.1f}"))
                    if (n, p) == (2000, 1000):
                        curves_eps[k] = curves_eps.get(k, []) + [means]
                    print(rows_eps[-1], flush=True)
    # The U-shape of Theorem 6: error against m at epsilon = 3, n = 2000, p = 1000.
    for eps in (3, 10):
        for m in (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000):
            errs = {name: [] for name in ("ttest", "dfs_paper", "dfs_private", "dfs_dpfisher")}
            for seed in seeds:
                data = gaussian_task(2000, 1000, 2, seed)
                for name in errs:
                    errs[name].append(run(name, data, m, eps, bounds, unit_scale_clip, seed)[0])
            curves_m.setdefault(eps, []).append((m, {nm: np.mean(v) for nm, v in errs.items()}))
            print("m", eps, curves_m[eps][-1], flush=True)
    return epsilons


def real(seeds, skip_mnist, rows_real, curves_real):
    sets = [("digits", load_digits(return_X_y=True), (0.0, 16.0), 20)]
    if not skip_mnist:
        X, y = load_mnist_folder(SHARED_DATA / "mnist-t10k")
        sets.append(("MNIST 8k", (X.reshape(len(X), -1) / 255.0, y), (0.0, 1.0), 100))
    for name, (X, y), bounds, m in sets:
        for eps in (1, 3, 6, 10):
            errs = {nm: [] for nm in PIPELINES}
            for seed in seeds:
                split = (dict(test_size=0.2) if name == "digits" else dict(train_size=8000, test_size=2000))
                data = train_test_split(X, y, stratify=y, random_state=seed, **split)
                for nm in PIPELINES:
                    errs[nm].append(run(nm, data, m, eps, bounds, None, seed)[0])
            rows_real.append((name, m, eps, *(f"{np.mean(errs[nm]):.3f} ± {np.std(errs[nm]):.3f}"
                                              for nm in PIPELINES)))
            curves_real.setdefault(name, []).append({nm: np.mean(v) for nm, v in errs.items()})
            print(rows_real[-1], flush=True)


def plot(curves_m, curves_eps, epsilons, curves_real):
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for ax, eps in zip(axes, sorted(curves_m)):
        ms = [m for m, _ in curves_m[eps]]
        for nm in curves_m[eps][0][1]:
            ax.plot(ms, [e[nm] for _, e in curves_m[eps]], marker="o", label=nm)
        ax.set(xscale="log", xlabel="features kept m", ylabel="test error",
               title=f"n=2000, p=1000, 2 classes, epsilon={eps}")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(RESULTS / "dfs_error_vs_m.png", dpi=120)
    fig, axes = plt.subplots(1, len(curves_eps), figsize=(11, 4))
    for ax, (k, means) in zip(np.atleast_1d(axes), sorted(curves_eps.items())):
        for nm in PIPELINES:
            ax.plot(epsilons, [mm[nm] for mm in means], marker="o", label=nm)
        ax.set(xscale="log", xlabel="epsilon", ylabel="test error", title=f"n=2000, p=1000, {k} classes, m=10")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(RESULTS / "dfs_error_vs_epsilon.png", dpi=120)
    fig, axes = plt.subplots(1, len(curves_real), figsize=(5.5 * len(curves_real), 4))
    for ax, (name, means) in zip(np.atleast_1d(axes), curves_real.items()):
        for nm in PIPELINES:
            ax.plot((1, 3, 6, 10), [mm[nm] for mm in means], marker="o", label=nm)
        ax.set(xscale="log", xlabel="epsilon", ylabel="test error", title=name)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(RESULTS / "dfs_real_error_vs_epsilon.png", dpi=120)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--skip-mnist", action="store_true")
    args = parser.parse_args()
    seeds = range(args.seeds)
    t0 = time.perf_counter()
    rows_eps, recovery, curves_m, curves_eps, rows_real, curves_real = [], {}, {}, {}, [], {}
    epsilons = synthetic(seeds, rows_eps, recovery, curves_m, curves_eps)
    real(seeds, args.skip_mnist, rows_real, curves_real)
    plot(curves_m, curves_eps, epsilons, curves_real)
    elapsed = time.perf_counter() - t0

    rec = [(eps, np.mean(recovery[(2, 2000, 1000, eps)]), np.mean(recovery[(4, 2000, 1000, eps)]))
           for eps in epsilons]
    def where_below(name):
        """Per class count: the epsilons <= 6 at which ``name`` has lower error than ttest."""
        out = {}
        for k in (2, 4):
            rows = [r for r in rows_eps if r[:3] == (k, 2000, 1000) and r[3] <= 6]
            good = [r[3] for r in rows if float(r[4 + PIPELINES.index(name)]) < float(r[4 + PIPELINES.index("ttest")])]
            bad = [r[3] for r in rows if r[3] not in good]
            out[k] = f"{'met' if not bad else 'NOT met'} (below at epsilon {good or 'none'}; not at {bad or 'none'})"
        return out

    beats, beats_dp = where_below("dfs_private"), where_below("dfs_dpfisher")
    text = [
        "# DFS: Fisher test error after feature selection", "",
        f"{environment()}; {len(seeds)} seeds; whole benchmark {elapsed / 60:.1f} min.", "",
        __doc__.split("Run:")[0].strip(), "",
        "## Targets (n = 2000, p = 1000)", "",
        markdown_table(["epsilon", "informative kept by dfs_private, 2 classes (of 10)", "4 classes"],
                       [(e, f"{a:.1f}", f"{b:.1f}") for e, a, b in rec]),
        "",
        f"- Recovery >= 8 at every epsilon >= 3: 2 classes "
        f"{'met' if all(a >= 8 for e, a, _ in rec if e >= 3) else 'NOT met'}, 4 classes "
        f"{'met' if all(b >= 8 for e, _, b in rec if e >= 3) else 'NOT met'}.",
        f"- dfs_private error below ttest at every epsilon <= 6: 2 classes {beats[2]}; 4 classes {beats[4]}.",
        f"- dfs_dpfisher (certified end to end) error below ttest at every epsilon <= 6: 2 classes "
        f"{beats_dp[2]}; 4 classes {beats_dp[4]}.",
        "- ttest pays nothing for its selection; the private pipelines pay half of epsilon for theirs.",
        "", "## Synthetic: test error at m = 10 (mean over seeds)", "",
        markdown_table(["classes", "n", "p", "epsilon", *PIPELINES, "dfs_private recovered"], rows_eps),
        "", "Certified: " + ", ".join(f"{k}: {v}" for k, v in CERTIFIED.items()) + ".", "",
        "## Synthetic: test error against m (n = 2000, p = 1000, 2 classes)", "",
    ]
    for eps, curve in sorted(curves_m.items()):
        names = list(curve[0][1])
        text += [f"epsilon = {eps}", "", markdown_table(["m", *names],
                 [(m, *(f"{e[nm]:.3f}" for nm in names)) for m, e in curve]), ""]
    text += ["## Real data: test error (mean ± std over seeds)", "",
             markdown_table(["data", "m", "epsilon", *PIPELINES], rows_real), "",
             "Plots: dfs_error_vs_m.png, dfs_error_vs_epsilon.png, dfs_real_error_vs_epsilon.png.", ""]
    write_result("dfs.md", "\n".join(text))


if __name__ == "__main__":
    main()
