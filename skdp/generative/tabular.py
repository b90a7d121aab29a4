"""Mixed tables for the generators: DataFrame columns to numbers in [-1, 1] and back.

A numeric column is scaled from its public ``(lower, upper)`` to [-1, 1] (clipped
first). A categorical column of ``k`` public categories becomes ``k`` coordinates, its
one-hot code mapped to {-1, 1} (the same scale as the numeric columns, so that one
noise level suits every coordinate). The model learns the joint density of all
coordinates; a sampled block is turned back into one category by a categorical draw
with probabilities proportional to the block's coordinates mapped back to [0, 1]
(``max((z + 1) / 2, 0)``; argmax when all are 0). For a model that has learnt the
one-hot structure the draw is the nearest vertex (argmax would sharpen a blurred block
towards the most frequent category). The diagonal Gaussian model gives its block's
means instead of a sample (each coordinate's mean is ``2 p_k - 1``, so the draw is from
``p``): a draw from its noisy sampled coordinates flattens ``p`` towards uniform
(``PGEGenerator._category_probabilities``).

Which categories are public: those given in ``categories={column: [...]}``, a
pandas ``CategoricalDtype``'s categories (declared by whoever built the dtype:
``pd.CategoricalDtype([...])``; note that ``astype("category")`` reads them from
the data), and ``[False, True]`` for a bool column. A non-numeric column without
them has its categories read from the private data: that warns with
``PrivacyLeakWarning`` and the generator is not certified, as for labels.
Values outside a declared category list are an error (as labels outside ``classes``).
"""
import numpy as np

from ..exceptions import warn_privacy


def needs_codec(X, categories, bounds):
    """Whether ``X`` is fitted through a :class:`TableCodec`: a DataFrame with categories, bounds by
    column, or a non-numeric column. ``categories`` or dict ``bounds`` without a DataFrame is an error."""
    frame = hasattr(X, "columns") and hasattr(X, "dtypes")
    if not frame:
        if categories is not None or isinstance(bounds, dict):
            raise ValueError("categories={column: [...]} and bounds={column: (lower, upper)} name DataFrame "
                             "columns; pass X as a pandas DataFrame (or bounds as a pair (lower, upper)).")
        return False
    return categories is not None or isinstance(bounds, dict) or any(_is_categorical(X[c]) for c in X.columns)


def _is_categorical(column):
    import pandas as pd

    dtype = column.dtype
    return isinstance(dtype, pd.CategoricalDtype) or pd.api.types.is_bool_dtype(dtype) or not \
        pd.api.types.is_numeric_dtype(dtype)


class TableCodec:
    """A DataFrame's columns to coordinates in [-1, 1] (``transform``), and sampled ones back (``inverse_transform``).

    Parameters
    ----------
    categories : dict or None
        ``{column: [public categories]}``.
    bounds : dict, pair or None
        ``{column: (lower, upper)}`` for numeric columns, or one pair for all of them.
    owner : str
        Named in errors and warnings.
    """

    def __init__(self, categories, bounds, owner):
        self.categories = categories or {}
        self.bounds = bounds
        self.owner = owner

    def fit(self, X, warn=True):
        """Learn the layout of ``X``: column kinds, public categories and bounds; returns ``self``.

        Sets ``read_from_data_``: the privacy-relevant values read from ``X`` (warned about).
        """
        import pandas as pd

        unknown = [c for c in self.categories if c not in X.columns]
        if unknown:
            raise ValueError(f"{self.owner}: categories names columns {unknown[:5]} that X does not have "
                             f"(its columns: {list(X.columns)[:10]}).")
        self.columns_ = list(X.columns)
        # Dtypes as plain values (pandas dtype objects carry caches): a name, or a category list and its order.
        self.dtypes_ = {c: ("category", list(t.categories), bool(t.ordered)) if isinstance(t, pd.CategoricalDtype)
                        else str(t) for c, t in X.dtypes.items()}
        self.kinds_, self.levels_, self.slices_ = {}, {}, {}
        read, start = [], 0
        for column in self.columns_:
            series = X[column]
            if column in self.categories or _is_categorical(series):
                levels = self._categories(column, series, read, warn)
                self.kinds_[column], self.levels_[column] = "category", levels
                width = len(levels)
            else:
                self.kinds_[column] = "number"
                self.levels_[column] = self._bounds(column, series, read, warn)
                width = 1
            self.slices_[column] = slice(start, start + width)
            start += width
        self.n_coordinates_ = start
        self.read_from_data_ = sorted(set(read))
        return self

    def _categories(self, column, series, read, warn):
        import pandas as pd

        if column in self.categories:
            levels = list(self.categories[column])
        elif isinstance(series.dtype, pd.CategoricalDtype):
            levels = list(series.dtype.categories)  # declared with the dtype: public
        elif pd.api.types.is_bool_dtype(series.dtype):
            levels = [False, True]
        else:
            levels = sorted(series.dropna().unique().tolist(), key=repr)
            read.append("categories")
            if warn:
                warn_privacy(f"{self.owner}: column {column!r} has no public categories, so they are read from the "
                             f"private data; the guarantee is NOT certified. Pass categories={{{column!r}: [...]}} "
                             "or give the column a pd.CategoricalDtype([...]) from public knowledge.")
        if len(levels) < 1 or len(set(map(repr, levels))) != len(levels):
            raise ValueError(f"{self.owner}: categories of column {column!r} must be a non-empty list of distinct "
                             f"values, got {levels!r}.")
        return levels

    def _bounds(self, column, series, read, warn):
        bounds = self.bounds.get(column) if isinstance(self.bounds, dict) else self.bounds
        if bounds is None:
            values = series.to_numpy(dtype=float)
            read.append("bounds")
            if warn:
                warn_privacy(f"{self.owner}: numeric column {column!r} has no public bounds, so its range is read "
                             f"from the private data; the guarantee is NOT certified. Pass bounds={{{column!r}: "
                             "(lower, upper)}.")
            bounds = (np.nanmin(values), np.nanmax(values))
        try:
            lower, upper = (float(b) for b in bounds)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{self.owner}: bounds of column {column!r} must be a pair (lower, upper), "
                             f"got {bounds!r}.") from exc
        if not (np.isfinite(lower) and np.isfinite(upper) and lower <= upper):
            raise ValueError(f"{self.owner}: bounds of column {column!r} must be finite with lower <= upper, "
                             f"got {bounds!r}.")
        return lower, upper

    def transform(self, X):
        """Coordinates of the rows of ``X``: float32 of shape (n, ``n_coordinates_``), in [-1, 1]."""
        missing = [c for c in self.columns_ if c not in X.columns]
        if missing:
            raise ValueError(f"{self.owner}: X lacks the columns {missing[:5]} seen in fit.")
        Z = np.full((len(X), self.n_coordinates_), -1.0, dtype=np.float32)
        for column in self.columns_:
            part = self.slices_[column]
            if self.kinds_[column] == "number":
                lower, upper = self.levels_[column]
                values = X[column].to_numpy(dtype=float)
                if np.isnan(values).any():
                    raise ValueError(f"{self.owner}: numeric column {column!r} holds NaN; fill it first (e.g. "
                                     "SimpleImputer(strategy='constant') or skdp.preprocessing.DPMedianImputer).")
                width = upper - lower if upper > lower else 1.0
                Z[:, part.start] = 2 * (np.clip(values, lower, upper) - lower) / width - 1
            else:
                codes = _codes(X[column], self.levels_[column])
                unknown = codes < 0
                if unknown.any():  # counts, never the private values (as for labels)
                    raise ValueError(f"{self.owner}: column {column!r} holds {int(unknown.sum())} value(s) not "
                                     f"among its categories {self.levels_[column][:10]}; add them to the public "
                                     "list, or map them to a public category first.")
                Z[np.arange(len(X)), part.start + codes] = 1.0
        return Z

    def inverse_transform(self, Z, rng):
        """A DataFrame with the fitted columns and dtypes from coordinates ``Z`` (categories drawn with ``rng``)."""
        import pandas as pd

        columns = {}
        for column in self.columns_:
            part, dtype = self.slices_[column], self.dtypes_[column]
            if isinstance(dtype, tuple):
                dtype = pd.CategoricalDtype(dtype[1], ordered=dtype[2])
            else:
                dtype = pd.api.types.pandas_dtype(dtype)
            if self.kinds_[column] == "number":
                lower, upper = self.levels_[column]
                values = np.clip((Z[:, part.start] + 1) / 2 * (upper - lower) + lower, lower, upper)
                if pd.api.types.is_integer_dtype(dtype):
                    values = np.round(values)
                columns[column] = pd.Series(values).astype(dtype)
                continue
            codes = _draw(Z[:, part], rng)
            levels = self.levels_[column]
            values = np.empty(len(codes), dtype=object)
            values[:] = [levels[c] for c in codes]
            if isinstance(dtype, pd.CategoricalDtype):
                columns[column] = pd.Series(pd.Categorical(values, dtype=dtype))
            else:
                columns[column] = pd.Series(values).astype(dtype)
        return pd.DataFrame(columns, columns=self.columns_)


def _codes(series, levels):
    """Index of each value of ``series`` in ``levels`` (-1 when absent)."""
    lookup = {repr(level): k for k, level in enumerate(levels)}
    values = series.astype(object).to_numpy()
    return np.array([lookup.get(repr(_plain(v)), -1) for v in values], dtype=np.int64)


def _plain(value):
    """numpy scalars as Python values, so that ``repr`` matches a public list of Python values."""
    return value.item() if isinstance(value, np.generic) else value


def _draw(block, rng):
    """One category per row: a draw with probabilities proportional to ``max((z + 1) / 2, 0)`` (argmax if all 0)."""
    weights = np.maximum((np.asarray(block, dtype=np.float64) + 1) / 2, 0.0)
    total = weights.sum(axis=1, keepdims=True)
    argmax = np.argmax(block, axis=1)
    safe = np.where(total > 0, weights / np.where(total > 0, total, 1.0), 0.0)
    u = rng.random((len(block), 1))
    drawn = np.minimum((np.cumsum(safe, axis=1) < u).sum(axis=1), block.shape[1] - 1)
    return np.where(total[:, 0] > 0, drawn, argmax)
