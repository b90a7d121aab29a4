"""Loaders for the real data sets our benchmarks use. They take a path; nothing is downloaded."""
import gzip
from pathlib import Path

import numpy as np


def _read_idx(path, offset):
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as f:
        return np.frombuffer(f.read(), np.uint8, offset=offset)


def load_mnist_idx(images_path, labels_path):
    """MNIST in the original IDX format (optionally gzipped): ``(X, y)`` with X of shape (n, 28, 28) uint8."""
    X = _read_idx(images_path, 16)
    y = _read_idx(labels_path, 8).astype(np.int64)
    if X.size != len(y) * 28 * 28:
        raise ValueError(f"{images_path} holds {X.size} pixels, expected {len(y)} images of 28x28.")
    return X.reshape(-1, 28, 28), y


def load_mnist_folder(folder, split="t10k"):
    """``load_mnist_idx`` on ``folder/{split}-images-idx3-ubyte.gz`` and its labels."""
    folder = Path(folder)
    return load_mnist_idx(folder / f"{split}-images-idx3-ubyte.gz", folder / f"{split}-labels-idx1-ubyte.gz")


def load_orl_faces(path):
    """ORL / AT&T faces from an ``.npz`` with ``images`` (n, 112, 92) and ``target``."""
    with np.load(path) as data:
        return data["images"], data["target"].astype(np.int64)
