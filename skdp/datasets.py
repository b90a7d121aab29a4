"""Loaders for the real data sets our benchmarks use. They take a path; nothing is downloaded."""
import gzip
from pathlib import Path

import numpy as np

__all__ = ["load_mnist_idx", "load_mnist_folder", "load_orl_faces"]


def _read_idx(path, offset):
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as f:
        return np.frombuffer(f.read(), np.uint8, offset=offset)


def load_mnist_idx(images_path, labels_path):
    """Load MNIST from the original IDX files (optionally gzipped).

    Reads the image file past its 16-byte header and the label file past its
    8-byte header, as LeCun et al. distribute them; a path ending in ``.gz``
    is decompressed. The pixels are returned as stored (uint8, 0 to 255):
    scale them by the public range, ``X / 255``, not by the data's own
    minimum and maximum, which would read a statistic of private data.

    Parameters
    ----------
    images_path : str or path-like
        The ``*-images-idx3-ubyte`` file (or ``.gz``).
    labels_path : str or path-like
        The matching ``*-labels-idx1-ubyte`` file (or ``.gz``).

    Returns
    -------
    X : ndarray of shape (n_samples, 28, 28), uint8
        The images.
    y : ndarray of shape (n_samples,), int64
        The digits, 0 to 9.

    Raises
    ------
    ValueError
        If the image file does not hold exactly one 28x28 image per label.

    See Also
    --------
    load_mnist_folder : The same, given the folder and the split.
    load_orl_faces : The faces data set.

    Examples
    --------
    >>> import gzip, os, tempfile
    >>> import numpy as np
    >>> from skdp.datasets import load_mnist_idx
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     images, labels = os.path.join(folder, "images.gz"), os.path.join(folder, "labels.gz")
    ...     with gzip.open(images, "wb") as f:
    ...         _ = f.write(bytes(16) + bytes(2 * 28 * 28))  # header, then two blank images
    ...     with gzip.open(labels, "wb") as f:
    ...         _ = f.write(bytes(8) + bytes([3, 7]))  # header, then two labels
    ...     X, y = load_mnist_idx(images, labels)
    >>> X.shape, X.dtype, y.tolist()
    ((2, 28, 28), dtype('uint8'), [3, 7])
    """
    X = _read_idx(images_path, 16)
    y = _read_idx(labels_path, 8).astype(np.int64)
    if X.size != len(y) * 28 * 28:
        raise ValueError(f"{images_path} holds {X.size} pixels, expected {len(y)} images of 28x28.")
    return X.reshape(-1, 28, 28), y


def load_mnist_folder(folder, split="t10k"):
    """Load one split of MNIST from a folder of the original gzipped IDX files.

    Calls :func:`load_mnist_idx` on ``folder/{split}-images-idx3-ubyte.gz``
    and ``folder/{split}-labels-idx1-ubyte.gz``. Nothing is downloaded: the
    files must be there (the benchmarks read ``shared/data/mnist-t10k``).

    Parameters
    ----------
    folder : str or path-like
        The folder holding the files.
    split : {"t10k", "train"}, default="t10k"
        The file prefix: "t10k" is the 10,000 test images, "train" the
        60,000 training images.

    Returns
    -------
    X : ndarray of shape (n_samples, 28, 28), uint8
        The images.
    y : ndarray of shape (n_samples,), int64
        The digits, 0 to 9.

    See Also
    --------
    load_mnist_idx : The same, given the two file paths.
    load_orl_faces : The faces data set.

    Examples
    --------
    The files are not shipped with skdp; the line that reads them is skipped here.

    >>> from skdp.datasets import load_mnist_folder
    >>> X, y = load_mnist_folder("shared/data/mnist-t10k")  # doctest: +SKIP
    >>> X.shape, y.shape  # doctest: +SKIP
    ((10000, 28, 28), (10000,))
    """
    folder = Path(folder)
    return load_mnist_idx(folder / f"{split}-images-idx3-ubyte.gz", folder / f"{split}-labels-idx1-ubyte.gz")


def load_orl_faces(path):
    """Load the ORL (AT&T) faces from an ``.npz`` file.

    The file holds ``images``, 400 grey faces of 112x92 pixels (ten of each
    of 40 people), and ``target``, the person of each image. The images are
    returned as stored, the labels as int64. Nothing is downloaded.

    Parameters
    ----------
    path : str or path-like
        The ``.npz`` file, with arrays ``images`` of shape (n, 112, 92) and
        ``target`` of shape (n,).

    Returns
    -------
    images : ndarray of shape (n_samples, 112, 92)
        The faces, in the file's dtype.
    target : ndarray of shape (n_samples,), int64
        The person in each image.

    See Also
    --------
    load_mnist_folder : The MNIST data set.
    skdp.attacks.MIFace : The model-inversion attack benchmarked on these faces.

    Examples
    --------
    >>> import os, tempfile
    >>> import numpy as np
    >>> from skdp.datasets import load_orl_faces
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     path = os.path.join(folder, "faces.npz")
    ...     np.savez(path, images=np.zeros((2, 112, 92), np.uint8), target=np.array([0, 1]))
    ...     images, target = load_orl_faces(path)
    >>> images.shape, target.dtype
    ((2, 112, 92), dtype('int64'))
    """
    with np.load(path) as data:
        return data["images"], data["target"].astype(np.int64)
