"""Image layouts shared by the image estimators.

Estimators accept images three ways: flat rows ``(n, C*H*W)`` with an
``image_shape`` of ``(H, W)`` or ``(C, H, W)``, grey stacks ``(n, H, W)`` and
batches ``(n, C, H, W)``. Internally everything is ``(n, C, H, W)`` float32;
results go back in the caller's layout.
"""
import math
import numbers

import numpy as np


def normalize_image_shape(image_shape, owner, name="image_shape"):
    """Return an image shape as ``(C, H, W)``, from ``(H, W)`` or ``(C, H, W)`` of positive ints.

    A two-element shape is a grey image and gets one channel. Anything else
    raises a ``ValueError`` that names the estimator and the parameter, so a
    user sees which argument to fix.

    Parameters
    ----------
    image_shape : tuple or list of int
        ``(H, W)`` or ``(C, H, W)``, every entry a positive int.
    owner : str
        Name of the caller (e.g. ``"Downsample"``), used in the error message.
    name : str, default="image_shape"
        Name of the parameter, used in the error message.

    Returns
    -------
    shape : tuple of int
        ``(C, H, W)``.

    Raises
    ------
    ValueError
        If ``image_shape`` is not two or three positive ints.

    See Also
    --------
    as_images : Reshapes data to ``(n, C, H, W)`` with such a shape.

    Examples
    --------
    >>> from skdp.imaging import normalize_image_shape
    >>> normalize_image_shape((112, 92), "Downsample")
    (1, 112, 92)
    >>> normalize_image_shape([3, 32, 32], "Downsample")
    (3, 32, 32)
    """
    shape = tuple(image_shape)
    if len(shape) == 2:
        shape = (1,) + shape
    if len(shape) != 3 or not all(isinstance(s, (int, np.integer)) and s > 0 for s in shape):
        raise ValueError(f"{owner}: {name} must be (H, W) or (C, H, W) of positive ints, got {image_shape!r}.")
    return tuple(int(s) for s in shape)


def row_image_shape(input_shape, image_shape=None, in_channels=None, owner="module='cnn'"):
    """Return the ``(C, H, W)`` of image rows: the one rule of the image networks, augmentation and PGE.

    Rows are channels-first images ``(C, H, W)``, grey ``(H, W)`` or flat ``(n_features,)``. ``image_shape`` (a public
    parameter) declares ``(H, W)`` or ``(C, H, W)``, ``in_channels`` (``module__in_channels``) the
    channels. Flat rows hold ``C * H * W`` features, C from ``image_shape`` or ``in_channels``, else 1;
    without ``image_shape`` the images are square. Nothing else is read off the row length: a table whose
    length happens to be a multiple of H * W is not taken for several channels.

    Parameters
    ----------
    input_shape : tuple of int
        The shape of one row: ``(C, H, W)``, ``(H, W)`` (one channel) or ``(n_features,)``.
    image_shape : tuple of int or None, default=None
        ``(H, W)`` or ``(C, H, W)``, as the user gave it (quoted so in the errors).
    in_channels : int or None, default=None
        The channels, when the network's ``in_channels`` was given.
    owner : str, default="module='cnn'"
        What needs the images, named in the errors.

    Returns
    -------
    shape : tuple of int
        ``(C, H, W)``.

    Raises
    ------
    ValueError
        If the declared shape and channels disagree, do not describe the rows, or flat rows are not square
        when no ``image_shape`` is given.

    Examples
    --------
    >>> from skdp.imaging.layout import row_image_shape
    >>> row_image_shape((64,)), row_image_shape((768,), (3, 16, 16)), row_image_shape((2, 8, 8))
    ((1, 8, 8), (3, 16, 16), (2, 8, 8))
    """
    input_shape = tuple(int(v) for v in input_shape)
    if len(input_shape) == 2:  # rows (H, W): one channel
        input_shape = (1, *input_shape)
    given = None if image_shape is None else tuple(image_shape)  # quoted as given in the errors
    if in_channels is not None and (isinstance(in_channels, bool) or not isinstance(in_channels, numbers.Integral)
                                    or in_channels < 1):
        raise ValueError(f"module__in_channels={in_channels!r}: give the images' channels as a positive int, or "
                         "leave it out (one channel, or the C of image_shape=(C, H, W)).")
    asked = in_channels  # the network's in_channels as the user gave it
    hw = None
    if given is not None:
        declared = normalize_image_shape(given, owner)
        if len(given) == 3:
            if in_channels is not None and in_channels != declared[0]:
                raise ValueError(f"image_shape={given} declares {given[0]} channels, module__in_channels="
                                 f"{in_channels}: give one of them.")
            in_channels = declared[0]
        hw = declared[1:]
    if len(input_shape) == 3:  # rows (C, H, W)
        if (hw is not None and hw != input_shape[1:]) or (in_channels is not None and in_channels != input_shape[0]):
            what = " and ".join([f"image_shape={given}"] * (given is not None)
                                + [f"module__in_channels={asked}"] * (asked is not None))
            raise ValueError(
                f"{what} does not describe rows of shape {input_shape}: image rows are (H, W) or "
                f"channels first, (C, H, W) (channels-last rows such as (28, 28, 1) are read as 28 channels "
                f"of 28 x 1). Pass the rows' (H, W) or (C, H, W), or move the channels first "
                f"(X.transpose(0, 3, 1, 2)).")
        return input_shape
    if len(input_shape) != 1:
        raise ValueError(f"{owner} needs images (C, H, W), (H, W) or flat rows; got rows of shape {input_shape}.")
    d, channels = input_shape[0], 1 if in_channels is None else int(in_channels)
    if hw is None:  # square images of `channels` channels
        pixels, rest = divmod(d, channels)
        side = math.isqrt(pixels)
        if rest or side * side != pixels:
            raise ValueError(f"{owner} needs image_shape=(H, W) for flat rows of {d} features"
                             + (f" (not {in_channels} channels of a square image)" if asked is not None else "")
                             + ".")
        return (channels, side, side)
    if channels * hw[0] * hw[1] != d:
        hint = (f"; for {d // (hw[0] * hw[1])} channels, channels first: image_shape=({d // (hw[0] * hw[1])}, "
                f"{hw[0]}, {hw[1]})" if d % (hw[0] * hw[1]) == 0 and asked is None and len(given) == 2 else "")
        raise ValueError(f"image_shape={given}" + (f" with {asked} channels" if asked is not None and len(given) == 2
                                                    else "") + f" does not match {d} features{hint}.")
    return (channels, *hw)


def as_images(X, image_shape, owner, name="X"):
    """Return ``X`` as ``(n, C, H, W)`` images and the layout to give results back in.

    Flat rows ``(n, C*H*W)`` are reshaped to ``image_shape`` (layout
    ``"flat"``), grey stacks ``(n, H, W)`` get a channel axis (``"grey"``) and
    batches ``(n, C, H, W)`` are kept (``"nchw"``). Image input is checked
    against ``image_shape`` when one is given. The data are not copied or
    converted: the dtype is the caller's.

    Parameters
    ----------
    X : array-like of shape (n, C*H*W), (n, H, W) or (n, C, H, W)
        The images.
    image_shape : tuple (C, H, W) or None
        What flat rows are reshaped to and what image input is checked
        against; None is allowed for image input only.
    owner : str
        Name of the caller, used in error messages.
    name : str, default="X"
        Name of the argument, used in error messages.

    Returns
    -------
    images : ndarray of shape (n, C, H, W)
        A view of ``X``.
    layout : {"flat", "grey", "nchw"}
        The input's layout, for :func:`restore_layout`.

    Raises
    ------
    ValueError
        If ``X`` is not 2-, 3- or 4-D, or does not match ``image_shape``.

    See Also
    --------
    restore_layout : Gives results back in the layout found here.
    normalize_image_shape : Turns ``(H, W)`` into ``(C, H, W)``.

    Examples
    --------
    >>> import numpy as np
    >>> from skdp.imaging import as_images
    >>> images, layout = as_images(np.zeros((5, 12)), (1, 3, 4), "example")
    >>> images.shape, layout
    ((5, 1, 3, 4), 'flat')
    >>> as_images(np.zeros((5, 3, 4)), None, "example")[1]
    'grey'
    """
    X = np.asarray(X)
    if X.ndim == 2:
        if image_shape is None:
            raise ValueError(f"{owner}: flat {name} of shape {X.shape} needs image_shape=(H, W) or (C, H, W).")
        if X.shape[1] != int(np.prod(image_shape)):
            raise ValueError(
                f"{owner}: {name} has {X.shape[1]} features per row but image_shape={image_shape} "
                f"needs {int(np.prod(image_shape))}.")
        return X.reshape((X.shape[0],) + tuple(image_shape)), "flat"
    if X.ndim == 3:
        X4, layout = X[:, None], "grey"
    elif X.ndim == 4:
        X4, layout = X, "nchw"
    else:
        raise ValueError(f"{owner}: {name} must be 2-D (flat), 3-D (n, H, W) or 4-D (n, C, H, W); got {X.ndim}-D.")
    if image_shape is not None and X4.shape[1:] != tuple(image_shape):
        raise ValueError(f"{owner}: {name} images are {X4.shape[1:]} (C, H, W) but image_shape is {image_shape}.")
    return X4, layout


def restore_layout(X4, layout):
    """Give ``(n, C, H, W)`` results back in the layout :func:`as_images` found.

    This inverts :func:`as_images` for results of another image size (a
    resampled or super-resolved batch): ``"flat"`` flattens each image to a
    row, ``"grey"`` drops the channel axis (which must be of length 1) and
    ``"nchw"`` returns the batch as it is.

    Parameters
    ----------
    X4 : ndarray of shape (n, C, H, W)
        The results.
    layout : {"flat", "grey", "nchw"}
        The layout returned by :func:`as_images` for the input.

    Returns
    -------
    X : ndarray
        ``X4`` of shape (n, C*H*W), (n, H, W) or (n, C, H, W).

    See Also
    --------
    as_images : Finds the layout.

    Examples
    --------
    >>> import numpy as np
    >>> from skdp.imaging import restore_layout
    >>> restore_layout(np.zeros((5, 1, 6, 8)), "flat").shape
    (5, 48)
    >>> restore_layout(np.zeros((5, 1, 6, 8)), "grey").shape
    (5, 6, 8)
    """
    if layout == "flat":
        return X4.reshape(X4.shape[0], -1)
    if layout == "grey":
        return X4[:, 0]
    return X4
