"""The "auto" training schedule of the DP-SGD momentum estimators, from public quantities only.

In DP every tuning run on the private data costs budget, so these rules are
what a careful user can afford. They read only what is public or declared
public: the number of records n (treated as public, see ``doc/privacy.md``),
the number of trainable parameters p of the model, epsilon, delta, the
momentum and the clipping bound. They were chosen on development data only
(the training part of load_digits, and two ``make_classification`` tables;
``benchmarks/dev_defaults.py`` and ``benchmarks/results/dev_defaults.md``),
never on a benchmark's test split.

The rules, and why
------------------
Lots: expected size ``B = n / 4`` (Poisson rate q = 1/4).
    Large lots with a fixed number of steps (De et al. 2022; Sander et al.
    2023, "TAN without a burn"): once sigma is large, the noise on the
    averaged gradient, ``sigma * C / B``, barely depends on q at a fixed
    number of steps, so q only trades compute; q = 1/4 and q = 1 were equally
    good on the development data, and 1/4 costs a quarter.
Steps: ``T = 300`` (``max_epochs_ = ceil(T / round(n / B))``, 75 epochs).
    100 to 300 steps were best on every development set; more steps do not
    add noise per step in that regime but gave no better models.
Learning rate: the noise that SGD with momentum ``m`` accumulates in the
    weights is a random walk of about ``lr / (1 - m) * sigma * C / B *
    sqrt(T * p)`` (p parameters, T steps). ``lr_`` sets that to a fixed radius
    ``r = 7``: ``lr = r * (1 - m) * B / (sigma * C * sqrt(T * p))``, at most
    1. It ties the step to the noise-to-lot ratio ``sigma / B`` (De et al.;
    Sander et al.) and to the model's size; ``r`` is the one constant fitted
    on the development data (the best ``lr * T`` there lay within a factor
    2 of this rule on all six sets, and accuracy is flat within a factor 3).
    Without noise (epsilon = inf), sigma is taken as 1, and so is a sigma
    below 1 (the rule uses ``max(sigma, 1)``).
    ``module="cnn"`` (weight-standardised convolutions with GroupNorm: the
    output does not change when a filter is rescaled, so the rule's picture
    of noise accumulating in the weights holds only loosely) takes ``r =
    NOISE_RADIUS_CNN = 21``: 3 x 7 gave 0.826 / 0.958 on digits-dev at
    epsilon 1 / 10 against 0.797 / 0.940 with 7 and 0.732 / 0.950 with 70
    (``benchmarks/dev_recipe.py``, ``benchmarks/results/dev_recipe.md``).
Moving average of the weights: ``ema="auto"`` releases the exponential
    moving average of the iterates with decay ``1 - EMA_WINDOWS / T``
    (memory T / 10 lots) and the warm-up ``min(decay, (1 + t) / (10 + t))``:
    post-processing, free in privacy. ``EMA_WINDOWS = 10`` was chosen on the
    training part of the digits split and of the MNIST split (each split
    again 75/25): the linear default at epsilon 1 went from 0.892 to 0.903
    (digits-dev) and from 0.831 to 0.844 (mnist-dev), at epsilon 10 from
    0.964 to 0.958 and from 0.892 to 0.897; memories of T / 3 and T / 30
    gave 0.896 and 0.881 at epsilon 1 on digits-dev.
Re-derived with EMA in place (issue 28): with ``ema="auto"`` and the
    current modules, the lot, step and radius rules were swept again on
    digits-dev and mnist-dev (linear model, epsilon 1 / 10, 2 seeds, fresh
    noise; ``benchmarks/dev_recipe.py --group schedule-digits`` and
    ``schedule-mnist``, ``benchmarks/results/dev_recipe.md``). The
    committed rule (q = 1/4, T = 300, r = 7) gave 0.907 / 0.958 on
    digits-dev and 0.848 / 0.896 on mnist-dev, and no variant beat it on
    both sets: r = 3.5, 14, 28 lost at epsilon 1 (0.867, 0.883, 0.822 on
    digits-dev; 0.823, 0.837, 0.822 on mnist-dev); T = 1000 gave 0.904 /
    0.967 and 0.847 / 0.897 (a gain of 0.009 at epsilon 10 on digits-dev
    only, at 3.3x the compute); full lots (q = 1) 0.892 / 0.958 and 0.840 /
    0.899; q = 1 with T = 1000 and r = 14 0.865 / 0.956 and 0.839 / 0.897
    at 13x the compute. So the rules stay. With the learning rate tied to
    sigma / B, ``lr * T`` is about ``r (1 - m) n mu / (C sqrt(p))`` whatever
    q and T (sigma ~ q sqrt(T) / mu once sigma is large, mu the plan's
    Gaussian-DP parameter: lr * T was 7.3 in the three r = 7 cells at
    epsilon 1 on digits-dev), which is why larger lots and more steps
    (Sander et al.) change little here; on mnist-dev the model limits, not
    the schedule: module="cnn" with lots of 500 gets 0.899 / 0.941 there.
    The CNN's schedule on digits-dev (``--group digits-modules``): the
    committed one gave 0.810 / 0.954, T = 1000 0.833 / 0.964 and full lots
    0.799 / 0.968 (the MLP 0.857 / 0.942): more compute helps the CNN at
    epsilon 10 by about 0.01, but at 3.3x to 4x the time (22 to 28 s a fit
    on one thread; on 28x28 images the committed schedule already takes
    minutes) and not measured on mnist-dev, so the rule stays one for all
    modules.
Clipping: ``max_grad_norm`` stays 1; the rule divides by C, so a clipping
    bound changed by the user scales the step with it (most gradients are
    clipped, so only ``lr * C`` matters, as in automatic clipping, Bu et al.
    2023).
"""
import math

SAMPLE_RATE = 0.25
#: The largest "auto" lot of module="cnn" (see ``auto_batch_size``).
CNN_MAX_LOT = 500
#: The smallest image side (declared by ``image_shape``) for which module="auto" takes the CNN.
CNN_MIN_SIDE = 16
#: Copies of augment="auto" for the CNN on such images (see ``auto_augment``).
AUTO_AUGMENT_COPIES = 4
#: The blocks of module="auto"'s CNN (module="cnn" keeps GroupNormCNN's two): a third block of 64 channels
#: gave 0.907 +- 0.007 against 0.897 +- 0.007 on 28 x 28 mnist-dev at epsilon 1 (8 fits each on a lent GPU;
#: benchmarks/results/dev_recipe.md, "The CNN's width and depth").
AUTO_CNN_CHANNELS = (16, 32, 64)
STEPS = 300
NOISE_RADIUS = 7.0
#: The radius of module="cnn" (GroupNormCNN): 3 x NOISE_RADIUS (benchmarks/results/dev_recipe.md).
NOISE_RADIUS_CNN = 21.0
LR_MAX = 1.0
EMA_WINDOWS = 10.0


def auto_module(image_shape):
    """Return the module of ``module="auto"``: "cnn" for declared images of at least 16 x 16, else "linear".

    The rule reads the estimator's parameters only (``image_shape``, public), never the data, so that the
    privacy plan (which depends on the lot size, see :func:`auto_batch_size`) is fixed before any row
    is read: rows passed as ``(n, H, W)`` arrays without ``image_shape`` take the linear model, as do
    flat rows (a table of 784 columns is not an image). The GroupNorm CNN beat the linear model on
    28 x 28 mnist-dev by 0.05 at epsilon 1 and 10 (0.899 / 0.941 against 0.848 / 0.896, lots of 500,
    ``benchmarks/results/dev_recipe.md``) and lost to it on 8 x 8 digits-dev (0.826 / 0.958 against
    0.907 / 0.958): hence the threshold between the two sizes.

    Parameters
    ----------
    image_shape : tuple of int or None
        The estimator's ``image_shape`` ((H, W) or (C, H, W)).

    Returns
    -------
    module : {"cnn", "linear"}
    """
    if image_shape is None or len(tuple(image_shape)) < 2:
        return "linear"
    return "cnn" if min(tuple(image_shape)[-2:]) >= CNN_MIN_SIDE else "linear"


def auto_augment(module, image_shape, clipping="auto", task="classification"):
    """Return the augmentation of ``augment="auto"``: 4 shifted copies for the CNN on images of 16 x 16 or more.

    Chosen on 28 x 28 mnist-dev (lots of 500, 2 seeds, ``benchmarks/results/dev_recipe.md``): 4 copies
    shifted by up to 1 pixel gave 0.898 / 0.959 at epsilon 1 / 10 against 0.899 / 0.941 without (a tie at
    1, +0.018 at 10), for about three times the time. On 8 x 8 digits the CNN with copies lost (0.743
    against 0.840 at epsilon 1, with shifts of 2 pixels, ``defaults.md``), and the linear model is the
    default there. Free in privacy (the copies are averaged inside each record's clipped gradient), so the
    rule may read anything public; it reads the resolved module and ``image_shape``. Classification only:
    a shift keeps a digit's label but not a position-like regression target, and no regression development
    data chose copies, so a regressor takes none (review_s35 c06).

    Parameters
    ----------
    module : str or None
        The resolved module ("cnn" for the GroupNorm CNN).
    image_shape : tuple of int or None
        The estimator's ``image_shape``.
    clipping : str, default="auto"
        The estimator's ``clipping``: copies need the per-record (vmap) path, so ``"ghost"`` takes none.
    task : {"classification", "regression"}, default="classification"
        The estimator's task: "regression" takes none.

    Returns
    -------
    augment : int or None
        ``AUTO_AUGMENT_COPIES`` (4) or None.
    """
    if (task != "classification" or module != "cnn" or clipping == "ghost" or image_shape is None
            or len(tuple(image_shape)) < 2):
        return None
    return AUTO_AUGMENT_COPIES if min(tuple(image_shape)[-2:]) >= CNN_MIN_SIDE else None


def auto_batch_size(n_samples, module=None):
    """Return the expected lot size of the "auto" rule: ``n / 4`` (at least 1; at most 500 for the CNN).

    The CNN's lot is capped at ``CNN_MAX_LOT`` (500) for compute: on 28 x 28 mnist-dev (6,000 records)
    lots of n / 4 = 1,500 take about 7.5 min a fit on 2 cores and lots of 500 about 1.2 min, with the
    same noise on the mean gradient in the large-sigma regime at epsilon 1 (sigma / B: 17.6 / 1,500
    against 6.0 / 500; Sander et al. 2023); lots of 500 gave 0.899 / 0.941 there at epsilon 1 / 10
    (``benchmarks/results/dev_recipe.md``; n / 4 was not run to the end: too slow).

    Parameters
    ----------
    n_samples : int
        Number of training records n (treated as public).
    module : str or None, default=None
        The resolved built-in module ("cnn" takes the cap); None or another: no cap.

    Returns
    -------
    batch_size : int
        ``max(1, round(n / 4))``: Poisson rate q = 1/4 (``min(.., 500)`` for "cnn").
    """
    batch_size = int(max(1, round(SAMPLE_RATE * n_samples)))
    return min(batch_size, CNN_MAX_LOT) if module == "cnn" else batch_size


def auto_max_epochs(n_samples, batch_size):
    """Return the number of epochs that gives about ``STEPS`` lots of expected size ``batch_size``.

    Parameters
    ----------
    n_samples : int
        Number of training records n (treated as public).
    batch_size : int
        Expected lot size B.

    Returns
    -------
    max_epochs : int
        ``ceil(STEPS / max(1, round(n / B)))``: an epoch is ``round(n / B)``
        lots, so the fit takes at least ``STEPS`` lots.
    """
    lots_per_epoch = max(1, int(round(n_samples / batch_size)))
    return int(math.ceil(STEPS / lots_per_epoch))


def auto_lr(batch_size, n_steps, noise_multiplier, n_params, momentum, max_grad_norm, radius=NOISE_RADIUS):
    """Return the learning rate that keeps the noise accumulated in the weights at ``NOISE_RADIUS``.

    ``lr = NOISE_RADIUS * (1 - momentum) * B / (sigma * C * sqrt(T * p))``,
    at most ``LR_MAX``, with sigma taken as ``max(sigma, 1)`` (1 without
    noise); the module docstring says why.

    Parameters
    ----------
    batch_size : int
        Expected lot size B.
    n_steps : int
        Number of DP-SGD steps T of the fit.
    noise_multiplier : float
        Sigma of the fit (0 without noise).
    n_params : int
        Number of trainable parameters p of the model.
    momentum : float
        Momentum m of SGD, in [0, 1).
    max_grad_norm : float
        Clipping bound C.
    radius : float, default=NOISE_RADIUS
        The noise radius r (``NOISE_RADIUS_CNN`` for ``module="cnn"``).

    Returns
    -------
    lr : float
        The learning rate, in (0, ``LR_MAX``].
    """
    sigma = max(float(noise_multiplier), 1.0) if noise_multiplier > 0 else 1.0
    lr = radius * (1.0 - momentum) * batch_size / (
        sigma * max_grad_norm * math.sqrt(max(n_steps, 1) * max(n_params, 1)))
    return float(min(lr, LR_MAX))


def auto_ema_decay(n_steps):
    """Return the decay of the "auto" moving average of the weights: ``1 - EMA_WINDOWS / T``.

    The average's memory, ``1 / (1 - decay)`` lots, is a fixed fraction
    ``1 / EMA_WINDOWS`` of the fit's T lots (a public quantity), so a fit of
    any length averages over its last tenth or so; with the warm-up
    ``beta_t = min(decay, (1 + t) / (10 + t))`` of :class:`skdp.nn.DPNet`.

    Parameters
    ----------
    n_steps : int
        Number of DP-SGD steps T of the fit.

    Returns
    -------
    decay : float
        In [0, 1); 0 (no average) for fits of at most ``EMA_WINDOWS`` lots.
    """
    return float(max(0.0, 1.0 - EMA_WINDOWS / max(int(n_steps), 1)))
