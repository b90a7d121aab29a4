"""Augmentation multiplicity (De et al. 2022): K augmented copies of each record inside its clipped gradient.

DP-SGD clips each record's gradient to C. With augmentation multiplicity a
record's gradient is the *average* of the gradients of K augmented copies of
it, taken before the clipping::

    g_i = (1 / K) sum_k grad loss(f(aug_k(x_i)), y_i),    released: sum_i clip(g_i, C) + N(0, sigma^2 C^2)

so one record still moves the clipped sum by at most C: the sensitivity,
the noise and the accountant's one charge per lot are those of plain DP-SGD.
The averaging lowers the variance of ``g_i`` before clipping (no extra
noise), which is where the gain comes from. The transforms are public and
data-independent (random shifts and flips of each image on its own), and
their randomness is drawn from the fit's fresh mechanism generator.
"""
import numbers

import numpy as np
import torch
import torch.nn.functional as F

from ..imaging.layout import row_image_shape

#: The "auto" shift, in pixels on each axis, at every image size (ImageAugmentation says which data chose it).
AUTO_SHIFT = 1


class ImageAugmentation:
    """K randomly shifted (and optionally flipped) copies of each image of a lot.

    Each copy is the image padded by ``shift`` pixels (edge pixels repeated:
    a function of that image alone) and cropped back to its size at a random
    offset in ``[-shift, shift]`` on each axis, then, with ``flip``, mirrored
    left-right with probability 1/2. Nothing is read from other records and
    nothing is learnt: it is a public, data-independent map of each record.

    Parameters
    ----------
    copies : int
        K, the number of augmented copies of each record (at least 1).
    image_shape : tuple of int (C, H, W)
        Shape of one image; flat rows are reshaped to it and back.
    shift : int or "auto", default="auto"
        Largest shift in pixels on each axis. "auto": ``AUTO_SHIFT`` = 1
        pixel, whatever the image size. Chosen on development data
        (``benchmarks/results/dev_recipe.md``): on mnist-dev (28x28), 4 copies
        with the CNN and lots of 500 gave 0.898 / 0.959 at epsilon 1 / 10
        with shifts of 1 pixel against 0.862 / 0.961 with 3 (an eighth of the
        image, De et al. 2022's 4 pixels on CIFAR-10's 32x32, the previous
        rule) and 0.899 / 0.941 without copies. On 8x8 digits both rules
        give 1 pixel.
    flip : bool, default=False
        Mirror each copy left-right with probability 1/2 (not for digits or
        text, whose mirror image is another symbol).

    See Also
    --------
    skdp.nn.DPMomentumClassifier : Its ``augment`` parameter builds one.

    Examples
    --------
    >>> import torch
    >>> from skdp.nn import ImageAugmentation
    >>> aug = ImageAugmentation(4, (1, 8, 8))
    >>> aug(torch.zeros(5, 64), torch.Generator().manual_seed(0)).shape
    torch.Size([5, 4, 64])
    """

    def __init__(self, copies, image_shape, shift="auto", flip=False):
        if not (isinstance(copies, numbers.Integral) and not isinstance(copies, bool) and copies >= 1):
            raise ValueError(f"augment: copies={copies!r} must be an int >= 1 (the copies of each record).")
        if shift == "auto":
            shift = AUTO_SHIFT
        if not (isinstance(shift, numbers.Integral) and not isinstance(shift, bool) and shift >= 0):
            raise ValueError(f"augment: shift={shift!r} must be an int >= 0 (pixels).")
        self.copies, self.image_shape, self.shift, self.flip = int(copies), tuple(image_shape), int(shift), bool(flip)

    def __repr__(self):
        return (f"ImageAugmentation(copies={self.copies}, image_shape={self.image_shape}, shift={self.shift}, "
                f"flip={self.flip})")

    def __call__(self, X, generator):
        """Return K augmented copies of every row of ``X``, shape ``(n, K, *row_shape)``.

        Parameters
        ----------
        X : torch.Tensor of shape (n, ...)
            The lot: flat rows or images, ``C * H * W`` values per row.
        generator : torch.Generator or numpy.random.Generator
            Source of the shifts and flips (the fit's fresh mechanism generator).

        Returns
        -------
        copies : torch.Tensor of shape (n, K, ...)
            ``copies[i, k]`` is copy k of row i, shaped as the row.

        Notes
        -----
        Each call (a lot) takes the same number of draws from ``generator`` whatever its size, and
        row i's shifts and flips are the i-th of that lot's own streams: a record appended to the data
        (last in every lot it joins) changes no other record's copies in any lot. The released sum is
        then within C of the neighbour's for every draw of the augmentations, not only on average over
        them, and tests/test_sensitivity_harness.py can replay it.
        """
        n, row_shape, K = X.shape[0], X.shape[1:], self.copies
        C, H, W = self.image_shape
        imgs = X.reshape(n, 1, C, H, W).expand(n, K, C, H, W).reshape(n * K, C, H, W)
        shifts, flips = _lot_streams(generator)
        s = self.shift
        if s > 0 and n:
            padded = F.pad(imgs, (s, s, s, s), mode="replicate")
            offsets = torch.as_tensor(shifts.integers(0, 2 * s + 1, size=(n * K, 2)), device=X.device)  # row-major
            dy, dx = offsets[:, :1], offsets[:, 1:]
            rows = (dy + torch.arange(H, device=X.device))[:, None, :, None]      # (nK, 1, H, 1)
            cols = (dx + torch.arange(W, device=X.device))[:, None, None, :]      # (nK, 1, 1, W)
            idx = torch.arange(n * K, device=X.device)[:, None, None, None]
            imgs = padded[idx, torch.arange(C, device=X.device)[None, :, None, None], rows, cols]
        if self.flip and n:
            mirror = torch.as_tensor(flips.random(n * K) < 0.5, device=X.device)
            imgs = torch.where(mirror[:, None, None, None], imgs.flip(-1), imgs)
        return imgs.reshape(n, K, *row_shape)


def _lot_streams(generator):
    """One lot's two numpy streams (shifts, flips), from a fixed number of draws of ``generator``.

    A numpy generator spawns two children; a torch generator gives four 62-bit words (248 bits) that seed
    them. Either way the parent advances by the same amount for every lot, whatever its size.
    """
    if isinstance(generator, np.random.Generator):
        return generator.spawn(2)
    words = torch.randint(0, 2 ** 62, (4,), generator=generator).tolist()
    return np.random.default_rng(words).spawn(2)


def make_augmentation(augment, input_shape, image_shape=None, in_channels=None):
    """Resolve an estimator's ``augment`` to an :class:`ImageAugmentation` (or None) from the rows' shape.

    Parameters
    ----------
    augment : None, int or dict
        None: no augmentation. An int K: K copies, shifts of up to
        ``AUTO_SHIFT`` = 1 pixel, no flips. A dict: the arguments of :class:`ImageAugmentation`
        (``copies``, ``shift``, ``flip``).
    input_shape : tuple of int
        Shape of one row as the network gets it: ``(C, H, W)``, or
        ``(n_features,)`` for flat rows.
    image_shape : tuple of int (H, W) or (C, H, W), or None, default=None
        Image size of flat rows; None: square images.
    in_channels : int or None, default=None
        The channels of flat rows (the network's ``in_channels``), when ``image_shape`` is ``(H, W)``;
        None: one. The rule is :func:`skdp.imaging.layout.row_image_shape`, the image networks' own.

    Returns
    -------
    augmentation : ImageAugmentation or None
        The augmentation of the fit.

    Raises
    ------
    ValueError
        If the rows are not images of a shape that can be found.
    """
    if augment is None:
        return None
    spec = dict(augment) if isinstance(augment, dict) else {"copies": augment}
    unknown = set(spec) - {"copies", "shift", "flip"}
    if unknown or "copies" not in spec:
        raise ValueError(f"augment={augment!r}: give an int (copies) or a dict with 'copies' and optionally "
                         f"'shift' and 'flip'{f' (unknown: {sorted(unknown)})' if unknown else ''}.")
    shape = row_image_shape(input_shape, image_shape, in_channels, owner="augment")
    return ImageAugmentation(image_shape=shape, **spec)
