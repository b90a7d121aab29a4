"""Image layouts shared by the image estimators.

Estimators accept images three ways: flat rows ``(n, C*H*W)`` with an
``image_shape`` of ``(H, W)`` or ``(C, H, W)``, grey stacks ``(n, H, W)`` and
batches ``(n, C, H, W)``. Internally everything is ``(n, C, H, W)`` float32;
results go back in the caller's layout.
"""
import numpy as np


def normalize_image_shape(image_shape, owner, name="image_shape"):
    """``(C, H, W)`` from ``(H, W)`` or ``(C, H, W)`` of positive ints."""
    shape = tuple(image_shape)
    if len(shape) == 2:
        shape = (1,) + shape
    if len(shape) != 3 or not all(isinstance(s, (int, np.integer)) and s > 0 for s in shape):
        raise ValueError(f"{owner}: {name} must be (H, W) or (C, H, W) of positive ints, got {image_shape!r}.")
    return tuple(int(s) for s in shape)


def as_images(X, image_shape, owner, name="X"):
    """``(images, layout)``: ``X`` as ``(n, C, H, W)`` and how to give results back.

    ``image_shape`` (``(C, H, W)`` or None) is what flat rows are reshaped to and
    what image input is checked against.
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
    """Inverse of ``as_images`` for results of another size."""
    if layout == "flat":
        return X4.reshape(X4.shape[0], -1)
    if layout == "grey":
        return X4[:, 0]
    return X4
