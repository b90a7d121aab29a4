"""Data larger than memory for the DP-SGD estimators: rows read by index, never all at once.

``DPMomentumClassifier`` and ``DPMomentumRegressor`` take, besides in-memory
arrays, a numpy memmap (or another array-like that indexes without loading:
an h5py or zarr array, a dask array) or a torch ``Dataset`` whose items are
``(x, y)`` pairs. Such input is wrapped in a :class:`RowSource` and is never
copied whole:

- validation streams it once, in chunks of ``chunk_rows`` rows, before any
  privacy charge: numeric dtype, one row shape, finite values. A Dataset's
  labels are collected in that pass (n labels are small; the features are
  not) and then checked and encoded exactly as an array's ``y`` is, so the
  label set and its privacy warning are what they are for arrays;
- each Poisson lot reads only its rows: the sampler yields each lot's
  indices in increasing order (good locality; the lot is still exactly a
  Poisson sample), and fancy indexing of a memmap reads only those rows;
- prediction reads sequential chunks.

Every read checks that its rows are finite. During training that can fail
only if the data changed after validation (a Dataset whose ``__getitem__`` is
random, a file rewritten): training then stops with
:class:`StreamedDataError`; the ledger charge of the fit stands (it was made
for the whole fit before the first lot, as for arrays).

Memory: a memmap's rows are read from its file with ``os.preadv`` (one call
per run of consecutive rows) rather than through the mapping. Through the
mapping, every page fault maps a whole page-cache folio (up to 2 MB on recent
Linux kernels, measured: about 450 KB per random 3 KB row), so one lot of
2,000 random rows of a 3 GB file mapped most of the file and the resident set
reached the file's size. ``pread`` copies only the rows; the page cache holds
the file and is not counted in the process. This needs a C-contiguous memmap
with a shared mapping (modes "r", "r+", "w+": its writes are in the page cache,
so ``pread`` sees them). Other memmaps (mode "c", whose changes are private,
or strided views) are read through the mapping, whose pages are dropped after
each read (``madvise(MADV_DONTNEED)``, shared mappings only: for mode "c" it
would discard the caller's changes).
"""
import math
import mmap
import numbers
import os

import numpy as np
import scipy.sparse as sp
import torch

from ..exceptions import StreamedDataError

# Rows per chunk when streaming (validation, prediction) unless iterator_valid__batch_size says otherwise.
DEFAULT_CHUNK_ROWS = 1024


def is_streamed(X):
    """Whether ``X`` is read on demand (memmap, lazy array-like, torch Dataset) rather than copied by ``check_array``."""
    if isinstance(X, torch.utils.data.Dataset) or isinstance(X, np.memmap):
        return True
    if isinstance(X, (np.ndarray, torch.Tensor, list, tuple)) or sp.issparse(X) or hasattr(X, "iloc"):
        return False  # in memory already, or a table: check_array's path
    shape = getattr(X, "shape", None)
    # h5py / zarr / dask arrays: a shape, a dtype and row indexing, and check_array would load them whole.
    return (isinstance(shape, tuple) and len(shape) >= 2 and hasattr(X, "dtype") and hasattr(X, "__getitem__"))


def chunk_rows(value):
    """Rows per streamed chunk: ``iterator_valid__batch_size`` if a positive int, else the default."""
    return int(value) if isinstance(value, numbers.Integral) and value > 0 else DEFAULT_CHUNK_ROWS


def as_rows(X, owner, *, labelled=True):
    """Wrap a streamed ``X`` in a :class:`RowSource`, checking what is known without reading rows.

    ``labelled``: a Dataset's items must be ``(x, y)`` (fit, score); else a bare
    ``x`` is accepted too (prediction).
    """
    if isinstance(X, RowSource):
        return X
    if isinstance(X, torch.utils.data.Dataset):
        return DatasetRows(X, owner, labelled=labelled)
    return ArrayRows(X, owner)


def _float32(block):
    """A float32 copy of ``block`` (values too large for float32 become inf, found by the finite check)."""
    if isinstance(block, torch.Tensor):
        block = block.detach().cpu().numpy()
    with np.errstate(over="ignore", invalid="ignore"):
        return np.array(block, dtype=np.float32)


class RowSource(torch.utils.data.Dataset):
    """Rows of a large input read by index (what ``DPNet``'s lot loader reads from); see the module.

    ``take(idx)`` returns ``(X, y)`` of those rows: X float32 of shape
    ``(len(idx), *out_shape)``, y the attached targets (training) or zeros.
    """

    name = "X"

    def __init__(self, data, owner, n_samples, row_shape):
        self.data, self.owner = data, owner
        self.n_samples, self.row_shape = int(n_samples), tuple(int(s) for s in row_shape)
        self.out_shape = self.row_shape
        self.targets = None
        self.label_log = None  # a list: the labels of the rows read are appended (score on a Dataset)
        self.checked = False  # True once validation has read every row
        if self.n_samples == 0:
            raise ValueError(f"Found array with 0 sample(s) (shape={self.shape}) while a minimum of 1 is required "
                             f"by {owner}; {self.name} must hold at least one record.")
        if not self.row_shape:
            raise ValueError(f"Expected 2D array, got 1D array instead: {self.name} has shape {self.shape}. Rows "
                             "must be feature vectors (n_samples, n_features) or images (n_samples, [C,] H, W).")
        if int(np.prod(self.row_shape)) == 0:
            raise ValueError(f"Found array with 0 feature(s) (shape={self.shape}) while a minimum of 1 is "
                             f"required by {owner}.")

    # -- the array-like face the estimators use (shape, len) ------------------------------------
    @property
    def shape(self):
        return (self.n_samples, *self.row_shape)

    @property
    def ndim(self):
        return 1 + len(self.row_shape)

    def __len__(self):
        return self.n_samples

    def __getitem__(self, i):
        X, y = self.take(np.array([i]))
        return X[0], y[0]

    def _copy(self, **changes):
        new = object.__new__(type(self))
        new.__dict__.update(self.__dict__, **changes)
        return new

    def with_targets(self, targets):
        """The same rows with encoded ``targets`` (an in-memory array of n rows) attached for training."""
        return self._copy(targets=np.asarray(targets))

    def logging_labels(self):
        """The same rows, appending the labels of every row read to ``label_log`` (scoring a Dataset)."""
        return self._copy(label_log=[])

    def with_channel(self):
        """Images ``(H, W)`` read as ``(1, H, W)`` (one channel), as arrays are with ``X[:, None]``."""
        return self._copy(out_shape=(1, *self.row_shape))

    # -- reading ---------------------------------------------------------------------------------
    def _read(self, idx):
        """``(float32 rows, labels or None)`` at increasing ``idx``; subclasses read their storage."""
        raise NotImplementedError

    def take(self, idx):
        """``(X, y)`` of rows ``idx``, read in increasing index order and checked finite."""
        idx = np.asarray(idx, dtype=np.int64)
        if len(idx) == 0:
            # An empty Poisson lot is still a step (noise only, as the accountant counts it): nothing to read.
            y = torch.zeros(0) if self.targets is None else self.targets[idx]
            return np.zeros((0, *self.out_shape), np.float32), y
        if len(idx) > 1 and np.any(idx[1:] < idx[:-1]):
            idx = np.sort(idx)  # locality; a lot is a set, its order does not matter
        X, labels = self._read(idx)
        self._check_finite(X, idx)
        if self.label_log is not None and labels is not None:
            self.label_log.extend(labels)
        X = X.reshape((len(idx), *self.out_shape))
        y = torch.zeros(len(idx)) if self.targets is None else self.targets[idx]
        return X, y

    def _check_finite(self, X, idx):
        finite = np.isfinite(X.reshape(len(X), -1)).all(axis=1)
        if finite.all():
            return
        bad = int(np.argmin(finite))
        row = int(idx[bad])
        what = ("NaN" if np.isnan(X[bad]).any()
                else "infinity or a value too large for dtype('float32')")
        message = f"Input {self.name} contains {what} (row {row})"
        if self.checked:
            raise StreamedDataError(
                f"{message}, read during training or prediction by {self.owner}, though every row was finite "
                f"when it was validated: {self.name} changed since, or its __getitem__ is random (e.g. an "
                "augmentation). Training stopped; the privacy charge of this fit stands (it is made before "
                "the first lot). Make the rows deterministic and finite, then fit again.")
        raise StreamedDataError(f"{message}. {self.owner} does not repair data: drop or impute the non-finite "
                                "rows (in the file or the Dataset), then call again.")

    def chunks(self, rows):
        """Index arrays of consecutive chunks of ``rows`` rows (a sized iterable, built lazily)."""
        return _Chunks(self.n_samples, rows)

    def scan(self, rows):
        """Read every row once, in chunks, checking it; returns the labels a Dataset holds (else None).

        Called before any privacy charge, so that bad input is refused before
        it costs budget.
        """
        labels = []
        for idx in self.chunks(rows):
            X, y = self._read(idx)
            self._check_finite(X, idx)
            if y is not None:
                labels.extend(y)
        self.checked = True
        return np.asarray(labels) if labels else None


class _Chunks:
    """``[arange(0, k), arange(k, 2k), ...]`` over n rows, without building the list."""

    def __init__(self, n, rows):
        self.n, self.rows = int(n), max(1, int(rows))

    def __len__(self):
        return -(-self.n // self.rows)

    def __iter__(self):
        for start in range(0, self.n, self.rows):
            yield np.arange(start, min(start + self.rows, self.n))


class ArrayRows(RowSource):
    """Rows of a memmap or another lazy array-like, read by (sorted) fancy indexing."""

    def __init__(self, X, owner):
        dtype = np.dtype(X.dtype) if not isinstance(X.dtype, torch.dtype) else None
        if dtype is None or dtype.kind not in "biuf":
            raise ValueError(f"Input X has dtype {X.dtype}, which could not convert to float32: {owner} needs "
                             "numeric features. Store X as float32 (or another real number type).")
        super().__init__(X, owner, X.shape[0], X.shape[1:])
        self.file = _file_layout(X)

    def _read(self, idx):
        if self.file is not None:
            with np.errstate(over="ignore", invalid="ignore"):
                return self._pread(idx).astype(np.float32, copy=False), None
        if len(idx) and idx[-1] - idx[0] + 1 == len(idx):
            block = self.data[int(idx[0]):int(idx[-1]) + 1]  # consecutive rows: one slice
        else:
            block = self.data[idx]
        rows = _float32(block)
        self._release_pages()
        return rows, None

    def _pread(self, idx):
        """Rows ``idx`` (increasing) read from the memmap's file: one ``preadv`` per run of consecutive rows."""
        path, first, row_bytes = self.file
        out = np.empty((len(idx), *self.row_shape), dtype=self.data.dtype)
        if not len(idx):
            return out
        buffer = memoryview(out.reshape(-1).view(np.uint8))
        runs = np.flatnonzero(np.diff(idx) != 1) + 1
        with open(path, "rb", buffering=0) as f:
            for a, b in zip(np.r_[0, runs], np.r_[runs, len(idx)]):
                want = (b - a) * row_bytes
                got = os.preadv(f.fileno(), [buffer[a * row_bytes:b * row_bytes]], first + int(idx[a]) * row_bytes)
                if got != want:
                    raise OSError(f"{path}: read {got} of {want} bytes at row {int(idx[a])}; the file is shorter "
                                  "than the memmap's shape (truncated since it was opened?).")
        return out

    def _release_pages(self):
        # See the module: keeps the resident set to the rows just read. Shared mappings only.
        mapping = getattr(self.data, "_mmap", None)
        if (isinstance(self.data, np.memmap) and getattr(self.data, "mode", None) in ("r", "r+", "w+")
                and isinstance(mapping, mmap.mmap) and hasattr(mmap, "MADV_DONTNEED")):
            try:
                mapping.madvise(mmap.MADV_DONTNEED)
            except (ValueError, OSError):  # closed or unsupported: only memory use is at stake
                pass


def _file_layout(X):
    """``(path, byte position of row 0, bytes per row)`` if ``X``'s rows can be read from its file, else None."""
    mapping = getattr(X, "_mmap", None)
    if not (isinstance(X, np.memmap) and getattr(X, "mode", None) in ("r", "r+", "w+") and X.flags.c_contiguous
            and getattr(X, "filename", None) and isinstance(mapping, mmap.mmap) and hasattr(os, "preadv")):
        return None
    try:
        mapped_at = np.frombuffer(mapping, dtype=np.uint8).ctypes.data  # the mapping's first byte in memory
    except (ValueError, TypeError):  # closed
        return None
    # The mapping starts at ``offset`` rounded down to the allocation granularity (numpy.memmap's rule);
    # a view (X[a:b]) keeps its parent's offset and mapping, and starts further in by its data pointer.
    mapped_from = X.offset - X.offset % mmap.ALLOCATIONGRANULARITY
    row_bytes = X.itemsize * math.prod(X.shape[1:])
    return X.filename, mapped_from + (X.ctypes.data - mapped_at), row_bytes


class DatasetRows(RowSource):
    """Rows of a torch ``Dataset`` whose items are ``(x, y)``, read item by item."""

    name = "X (a torch Dataset)"

    def __init__(self, dataset, owner, *, labelled=True):
        self.labelled = labelled
        try:
            n_samples = len(dataset)
        except TypeError as exc:
            raise TypeError(f"X is a torch Dataset without __len__ ({type(dataset).__name__}); {owner} needs "
                            "the number of records to plan the privacy of the fit. Use a map-style Dataset "
                            "(with __len__ and __getitem__), e.g. TensorDataset(X, y).") from exc
        if n_samples == 0:
            raise ValueError(f"X is an empty Dataset (0 sample(s)); {owner} needs at least one record.")
        self.data, self.owner = dataset, owner  # _split reads them before RowSource.__init__
        x0, _ = self._split(dataset[0], 0)
        super().__init__(dataset, owner, n_samples, np.shape(x0))

    def _split(self, item, i):
        """``(x, y)`` of one item (``y`` None for a bare ``x`` when unlabelled items are accepted)."""
        if isinstance(item, (tuple, list)) and len(item) == 2:
            return item
        if not self.labelled and isinstance(item, (torch.Tensor, np.ndarray)):
            return item, None
        if not self.labelled and isinstance(item, (tuple, list)) and len(item) == 1:
            return item[0], None
        kind = f"a {type(item).__name__} of length {len(item)}" if isinstance(item, (tuple, list)) else \
            f"a {type(item).__name__}"
        raise TypeError(
            f"X is a torch Dataset whose item {i} is {kind}; {self.owner} needs items (x, y): a feature tensor "
            "and its target, e.g. TensorDataset(X, y), and fit(dataset, y=None). Wrap the Dataset so that "
            "__getitem__ returns (x, y).")

    def _read(self, idx):
        xs, labels = [], []
        for i in idx:
            x, y = self._split(self.data[int(i)], int(i))
            x = _float32(x)
            if x.shape != self.row_shape:
                raise StreamedDataError(
                    f"X (a torch Dataset) item {int(i)} has x of shape {x.shape}, but item 0 has "
                    f"{self.row_shape}; {self.owner} needs every x in one shape. Resize or pad in __getitem__.")
            xs.append(x)
            if y is not None:
                labels.append(np.asarray(y.detach().cpu() if isinstance(y, torch.Tensor) else y).tolist())
        X = np.stack(xs) if xs else np.empty((0, *self.row_shape), dtype=np.float32)
        return X, (labels if labels else None)
