import gzip

import numpy as np
import pytest

from skdp.datasets import load_mnist_folder, load_orl_faces


def _write_idx(path, header, payload):
    with gzip.open(path, "wb") as f:
        f.write(header + payload.tobytes())


def test_mnist_idx_roundtrip(tmp_path):
    images = np.arange(3 * 28 * 28, dtype=np.uint32).astype(np.uint8).reshape(3, 28, 28)
    labels = np.array([7, 0, 3], np.uint8)
    _write_idx(tmp_path / "t10k-images-idx3-ubyte.gz", b"\x00\x00\x08\x03" + (3).to_bytes(4, "big")
               + (28).to_bytes(4, "big") * 2, images)
    _write_idx(tmp_path / "t10k-labels-idx1-ubyte.gz", b"\x00\x00\x08\x01" + (3).to_bytes(4, "big"), labels)
    X, y = load_mnist_folder(tmp_path)
    assert X.shape == (3, 28, 28) and np.array_equal(X, images) and list(y) == [7, 0, 3]


def test_mnist_size_mismatch_is_reported(tmp_path):
    _write_idx(tmp_path / "t10k-images-idx3-ubyte.gz", b"\x00" * 16, np.zeros(100, np.uint8))
    _write_idx(tmp_path / "t10k-labels-idx1-ubyte.gz", b"\x00" * 8, np.zeros(3, np.uint8))
    with pytest.raises(ValueError, match="expected 3 images"):
        load_mnist_folder(tmp_path)


def test_orl_npz(tmp_path):
    np.savez(tmp_path / "faces.npz", images=np.zeros((4, 112, 92), np.uint8), target=np.array([0, 0, 1, 1]))
    X, y = load_orl_faces(tmp_path / "faces.npz")
    assert X.shape == (4, 112, 92) and list(y) == [0, 0, 1, 1]
