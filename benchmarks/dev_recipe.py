"""Issue 28's recipe on development data only: the EMA decay rule, the CNN's step size, augmentation
multiplicity, and the lot / steps / learning-rate rules re-derived with them in place.

Development data (never a benchmark's test split): ``digits-dev`` (the training part of the
benchmark's digits split, split again 75/25) and ``mnist-dev`` (the training part of the MNIST
benchmark split, split again; needs ../shared/data). Validation accuracy, mean of 2 seeds, fresh
noise in every fit, epsilon 1 and 10. Each row changes rules of ``skdp.nn._defaults`` in the
worker (``EMA_WINDOWS``: the average's memory is steps / EMA_WINDOWS lots; ``NOISE_RADIUS`` (and
``NOISE_RADIUS_CNN`` for module="cnn"): the "auto" learning rate is proportional to it;
``SAMPLE_RATE``: the expected lot is n x SAMPLE_RATE; ``STEPS``: the number of lots) or one
estimator parameter. Every job first restores the rules of the module as committed, so a worker
reused by joblib carries nothing from its previous job.

Run: python benchmarks/dev_recipe.py --group {recipe,schedule-digits,schedule-mnist,mnist-cnn,digits-modules}
Each group replaces its own section of ``benchmarks/results/dev_recipe.md``.
"""
import argparse
import re
import time
import warnings

import numpy as np
import torch
from joblib import Parallel, delayed

from _common import RESULTS, environment, markdown_table, write_result
from dev_defaults import digits_dev, mnist_dev

DATA = {"digits-dev": digits_dev, "mnist-dev": mnist_dev}
RULES = ("SAMPLE_RATE", "STEPS", "NOISE_RADIUS", "NOISE_RADIUS_CNN", "EMA_WINDOWS", "LR_MAX", "CNN_MAX_LOT",
         "AUTO_AUGMENT_COPIES")


def _set_rules(rules):
    """The committed rules of ``skdp.nn._defaults``, then ``rules`` on top (a reused worker keeps nothing).

    The committed values are kept on the module itself, read before any job changed it: ``run`` is
    pickled by value from ``__main__``, so a global of this script would not outlive a job.
    """
    from skdp.nn import _defaults

    if not hasattr(_defaults, "_committed_rules"):
        _defaults._committed_rules = {k: getattr(_defaults, k) for k in RULES}
    for key, value in {**_defaults._committed_rules, **rules}.items():
        setattr(_defaults, key, value)


def run(data, seed, eps, name, rules, params, device="cpu"):
    torch.set_num_threads(1)
    from skdp import DPMomentumClassifier

    _set_rules(rules)
    Xa, Xv, ya, yv = DATA[data](seed)
    params = dict(params)
    scattering = params.pop("scattering", None)
    start = time.perf_counter()
    if scattering is not None:  # a fixed row-wise map: the same for both parts, part of the fit's time
        from skdp.preprocessing import ScatteringTransform

        side = int(round(np.sqrt(Xa.shape[1])))
        st = ScatteringTransform(image_shape=(side, side), **scattering).fit(Xa[:1])
        Xa, Xv = st.transform(Xa), st.transform(Xv)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        clf = DPMomentumClassifier(epsilon=eps, classes=range(10), random_state=seed, device=device,
                                   **params).fit(Xa, ya)
    fit_s = time.perf_counter() - start
    plan = f"B {clf.batch_size_}, T {clf.n_steps_}, sigma {clf.noise_multiplier_:.2f}, lr {clf.lr_:.3g}"
    return data, eps, name, clf.score(Xv, yv), fit_s, plan


def recipe():
    """Last session's rows: EMA windows, the CNN's radius, augment (digits-dev; mnist-dev's EMA rows)."""
    from skdp.nn import _defaults

    radius = _defaults.NOISE_RADIUS
    rows = []
    for w in (None, 3.0, 10.0, 30.0):
        name = "linear, no EMA" if w is None else f"linear, EMA_WINDOWS={w:g}"
        rows.append(("digits-dev", name, {} if w is None else {"EMA_WINDOWS": w}, {"ema": None if w is None else "auto"}))
    for f in (1, 3, 10):
        rows.append(("digits-dev", f"cnn, NOISE_RADIUS x{f}", {"NOISE_RADIUS_CNN": radius * f}, {"module": "cnn"}))
    for f in (1, 3):
        rows.append(("digits-dev", f"cnn, NOISE_RADIUS x{f}, augment=4", {"NOISE_RADIUS_CNN": radius * f},
                     {"module": "cnn", "augment": 4}))
    rows.append(("digits-dev", "linear, augment=4", {}, {"augment": 4}))
    for w in (None, 10.0):
        rows.append(("mnist-dev", "linear, no EMA" if w is None else f"linear, EMA_WINDOWS={w:g}",
                     {} if w is None else {"EMA_WINDOWS": w}, {"ema": None if w is None else "auto"}))
    return rows


# The schedule with EMA and the current modules in place: lot size (sample rate q), lots T, radius r.
SCHEDULE = [
    ("q 1/4, T 300, r 7 (committed)", {}),
    ("q 1/4, T 300, r 3.5", {"NOISE_RADIUS": 3.5}),
    ("q 1/4, T 300, r 14", {"NOISE_RADIUS": 14.0}),
    ("q 1/4, T 300, r 28", {"NOISE_RADIUS": 28.0}),
    ("q 1/4, T 1000, r 7", {"STEPS": 1000}),
    ("q 1/4, T 1000, r 14", {"STEPS": 1000, "NOISE_RADIUS": 14.0}),
    ("q 1, T 300, r 7", {"SAMPLE_RATE": 1.0}),
    ("q 1, T 1000, r 14", {"SAMPLE_RATE": 1.0, "STEPS": 1000, "NOISE_RADIUS": 14.0}),
]


def schedule(data):
    return [(data, f"linear, {name}", rules, {}) for name, rules in SCHEDULE]


def mnist_cnn():
    """module="cnn" on 28x28 mnist-dev, with and without augmentation multiplicity (shifts of 3 and 1 pixels).

    Lots of 500 (the rest "auto": about 300 lots, the CNN's radius): the "auto" lots of n / 4 = 1,500
    take ~1.5 s each on 2 cores (~7.5 min a fit); at epsilon 1 the noise on the mean gradient,
    sigma / B, is the same (17.6 / 1,500 against 6.0 / 500, the large-sigma regime of Sander et al.).
    Shifts of 3 pixels were the "auto" shift (an eighth of the image) until these rows made it 1.
    """
    return [("mnist-dev", "cnn, lots of 500", {}, {"module": "cnn", "batch_size": 500}),
            ("mnist-dev", "cnn, lots of 500, augment=4, shift 3", {},
             {"module": "cnn", "batch_size": 500, "augment": {"copies": 4, "shift": 3}}),
            ("mnist-dev", "cnn, lots of 500, augment=4, shift 1", {},
             {"module": "cnn", "batch_size": 500, "augment": {"copies": 4, "shift": 1}}),
            ("mnist-dev", "cnn (auto lots)", {}, {"module": "cnn"})]


def digits_modules():
    """The other modules on digits-dev under the "auto" schedule, and the CNN with more lots or full lots."""
    return [("digits-dev", "mlp", {}, {"module": "mlp"}),
            ("digits-dev", "cnn, q 1/4, T 300, r 21 (committed)", {}, {"module": "cnn"}),
            ("digits-dev", "cnn, q 1/4, T 1000, r 21", {"STEPS": 1000}, {"module": "cnn"}),
            ("digits-dev", "cnn, q 1, T 300, r 21", {"SAMPLE_RATE": 1.0}, {"module": "cnn"})]


def mnist_recipe():
    """The defaults on 28x28 mnist-dev (``image_shape=(28, 28)``: module="auto" is the GroupNorm CNN, lots of
    ``CNN_MAX_LOT``, ``AUTO_AUGMENT_COPIES`` shifted copies, ``STEPS`` lots, radius ``NOISE_RADIUS_CNN``), one
    rule changed a row. Run on a lent GPU (``--device cuda``): a CPU fit takes 4-5 minutes."""
    base = {"image_shape": (28, 28)}
    return [("mnist-dev", "committed (K 4, lots 500, T 300, r 21)", {}, base),
            ("mnist-dev", "K 8", {"AUTO_AUGMENT_COPIES": 8}, base),
            ("mnist-dev", "T 600", {"STEPS": 600}, base),
            ("mnist-dev", "r 42", {"NOISE_RADIUS_CNN": 42.0}, base),
            ("mnist-dev", "r 10.5", {"NOISE_RADIUS_CNN": 10.5}, base),
            ("mnist-dev", "lots 1000", {"CNN_MAX_LOT": 1000}, base),
            ("mnist-dev", "EMA windows 3", {"EMA_WINDOWS": 3.0}, base),
            ("mnist-dev", "K 16", {"AUTO_AUGMENT_COPIES": 16}, base),
            ("mnist-dev", "lots 250, T 600", {"CNN_MAX_LOT": 250, "STEPS": 600}, base),
            ("mnist-dev", "lots 1000, T 600", {"CNN_MAX_LOT": 1000, "STEPS": 600}, base),
            ("mnist-dev", "lots 1000, K 8", {"CNN_MAX_LOT": 1000, "AUTO_AUGMENT_COPIES": 8}, base),
            ("mnist-dev", "lots 2000 (lots 1000 doubled)", {"CNN_MAX_LOT": 2000}, base)]


def mnist_width():
    """The CNN's width and depth on 28x28 mnist-dev under the defaults (``module__channels``; the "auto" rules
    otherwise, the learning rate from the model's size). Run on a lent GPU."""
    base = {"image_shape": (28, 28)}
    return [("mnist-dev", f"channels {c}", {}, {**base, "module__channels": c})
            for c in ((16, 32), (32, 64), (64, 128), (16, 32, 64))]


def scattering():
    """ScatteringTransform's scales and channel groups before the linear default (``J="auto"`` and
    ``n_groups="auto"``), on 8 x 8 digits-dev and 28 x 28 mnist-dev, with raw pixels beside them."""
    rows = [("digits-dev", "pixels (no transform)", {}, {})]
    for name, st in (("J 1, 9 groups (auto)", {"J": 1, "n_groups": 9}), ("J 1, 3 groups", {"J": 1, "n_groups": 3}),
                     ("J 1, 1 group", {"J": 1, "n_groups": 1}), ("J 2, 27 groups", {"J": 2, "n_groups": 27}),
                     ("J 1, no normalisation", {"J": 1, "normalize": "none"})):
        rows.append(("digits-dev", f"scattering {name}", {}, {"scattering": st}))
    for name, st in (("J 2, 27 groups (auto)", {"J": 2, "n_groups": 27}), ("J 2, 81 groups", {"J": 2, "n_groups": 81}),
                     ("J 1, 9 groups", {"J": 1, "n_groups": 9}), ("J 3, 217 groups", {"J": 3, "n_groups": 217})):
        rows.append(("mnist-dev", f"scattering {name}", {}, {"scattering": st}))
    return rows


GROUPS = {"recipe": ("EMA windows, the CNN's radius, augmentation (issue 28, first pass)", recipe),
          "schedule-digits": ("Lots, steps and radius with EMA in place: digits-dev", lambda: schedule("digits-dev")),
          "schedule-mnist": ("Lots, steps and radius with EMA in place: mnist-dev", lambda: schedule("mnist-dev")),
          "mnist-cnn": ("module='cnn' and augmentation on mnist-dev (28x28)", mnist_cnn),
          "digits-modules": ("The MLP and the CNN's schedule on digits-dev", digits_modules),
          "mnist-recipe": ("The image defaults' rules on mnist-dev (28x28, module='auto')", mnist_recipe),
          "mnist-width": ("The CNN's width and depth on mnist-dev (28x28, module='auto')", mnist_width),
          "scattering": ("ScatteringTransform's scales and groups before the linear default", scattering)}


def section_rows(title):
    """The table rows (tuples of cells) of the section ``## title`` of dev_recipe.md, if any."""
    path = RESULTS / "dev_recipe.md"
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", path.read_text() if path.exists() else "",
                      re.S | re.M)
    lines = [] if match is None else [line for line in match.group(1).splitlines() if line.startswith("| ")]
    return [tuple(c.strip() for c in line.strip("|").split("|")) for line in lines[1:]]  # [0] is the header


def write_section(title, text):
    """Replace (or append) the section ``## title`` of dev_recipe.md, keeping the others."""
    path = RESULTS / "dev_recipe.md"
    old = path.read_text() if path.exists() else "# Issue 28's recipe on development data\n\n" + __doc__.split("Run:")[0]
    section = f"## {title}\n\n{text.strip()}\n"
    pattern = re.compile(rf"^## {re.escape(title)}\n.*?(?=^## |\Z)", re.S | re.M)
    new = pattern.sub(lambda _: section + "\n", old) if pattern.search(old) else old.rstrip("\n") + "\n\n" + section
    write_result("dev_recipe.md", new.rstrip("\n") + "\n")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--group", choices=sorted(GROUPS), required=True)
    parser.add_argument("--epsilons", type=float, nargs="+", default=(1.0, 10.0))
    parser.add_argument("--only", help="only the configurations whose name contains this")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--dry", action="store_true", help="print, do not write")
    parser.add_argument("--merge", action="store_true", help="keep the section's rows not rerun")
    parser.add_argument("--device", default="cpu", help="where the fits run (cuda on a lent GPU)")
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--deadline", type=float, default=None,
                        help="seconds after which no new fit starts (the finished ones are written)")
    args = parser.parse_args()
    title, make = GROUPS[args.group]
    configs = [c for c in make() if args.only is None or args.only in c[1]]
    # Every configuration at the first epsilon, then at the next: a deadline cuts the later epsilons first.
    jobs = [(data, seed, eps, name, rules, params, args.device) for eps in args.epsilons
            for data, name, rules, params in configs for seed in range(args.seeds)]
    start = time.perf_counter()

    def started():
        for j in jobs:
            if args.deadline is not None and time.perf_counter() - start > args.deadline:
                print(f"deadline: {j[3]!r} at epsilon {j[2]:g} and after not run", flush=True)
                return
            yield delayed(run)(*j)
    results = []
    for r in Parallel(n_jobs=args.jobs, verbose=5, return_as="generator_unordered")(started()):
        print("result", r, flush=True)
        results.append(r)
    table = {}
    for data, eps, name, acc, dur, plan in results:
        table.setdefault((data, name, eps), []).append((acc, dur, plan))
    rows = [(data, name, f"{eps:g}", f"{np.mean([a for a, _, _ in v]):.3f} ± {np.std([a for a, _, _ in v]):.3f}",
             f"{np.mean([d for _, d, _ in v]):.1f}", v[0][2]) for (data, name, eps), v in table.items()]
    minutes = f"{(time.perf_counter() - start) / 60:.1f} min"
    if args.merge:  # keep the section's rows of other configurations / epsilons (earlier runs of the group)
        new = {(r[0], r[1], r[2]) for r in rows}
        rows = [r for r in section_rows(title) if (r[0], r[1], r[2]) not in new] + rows
        minutes += " (this run; the section's other rows: earlier runs)"
    where = f"device {torch.cuda.get_device_name()}" if args.device.startswith("cuda") else "CPU"
    text = (f"{environment()}; {where}; {args.jobs} fits at a time, 1 torch thread each; whole run {minutes}.\n\n"
            + (make.__doc__.strip() + "\n\n" if make.__doc__ else "")
            + markdown_table(["data", "configuration", "epsilon", f"validation accuracy ({args.seeds} seeds)", "fit s",
                              "plan (seed 0)"], rows) + "\n")
    print(text)
    if not args.dry:
        write_section(title, text)


if __name__ == "__main__":
    main()
