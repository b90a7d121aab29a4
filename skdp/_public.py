"""The public API, in one home: the modules the API reference documents, in its order.

``doc/conf.py`` writes ``doc/api.rst`` from this list and
``tests/test_docstrings.py`` validates every docstring it names, so a name
added to a module's ``__all__`` is documented and checked without a second edit.
"""
import importlib
import inspect

#: (module, section title, one-line description), grouped as the package is.
PUBLIC_MODULES = {
    "skdp.nn": ("Estimators: DP-SGD with momentum", "Torch models behind skorch, trained with DP-SGD."),
    "skdp.discriminant": ("Estimators: Fisher discriminant", "A differentially private linear discriminant."),
    "skdp.feature_selection": ("Transformers: feature selection", "DFS: class-mean gaps released with DP."),
    "skdp.generative": ("Estimators: generative models", "PGE: sliced score matching and Hamiltonian sampling."),
    "skdp.superres": ("Transformers: super-resolution", "SRGAN, for low-resolution faces."),
    "skdp.preprocessing": ("Transformers: preprocessing", "Resampling, normalisation and scattering features."),
    "skdp.model_selection": ("Model selection", "Private hyperparameter search."),
    "skdp.privacy": ("Privacy core", "Accountants, calibration and the budget ledger."),
    "skdp.mechanisms": ("Mechanisms", "The Gaussian mechanism's calibration and private top-k."),
    "skdp.engine": ("The DP-SGD engine", "Per-example clipping, Poisson lots, layer rules and validators."),
    "skdp.audit": ("Audits", "Empirical lower bounds on epsilon: does a mechanism keep its claim?"),
    "skdp.attacks": ("Attacks", "Membership inference and model inversion (MI-Face)."),
    "skdp.imaging": ("Imaging utilities", "Image layout, resampling and quality metrics."),
    "skdp.datasets": ("Datasets", "Loaders for the real data the benchmarks use; nothing is downloaded."),
    "skdp.exceptions": ("Warnings and errors", "skdp's warnings and exceptions, in one home."),
    "skdp": ("Top level", "Names importable from ``skdp`` only; the estimators above are importable from ``skdp`` too."),
}


def public_objects():
    """Yield ``(module, name, object)`` for each documented class and function, once each.

    A name exported by several modules (``skdp.DPFisherSelector`` and
    ``skdp.feature_selection.DPFisherSelector``) is listed under the first
    module of ``PUBLIC_MODULES`` that exports it.
    """
    seen = set()
    for module in PUBLIC_MODULES:
        mod = importlib.import_module(module)
        for name in getattr(mod, "__all__", ()):
            obj = getattr(mod, name)
            if not (inspect.isclass(obj) or inspect.isfunction(obj)) or id(obj) in seen:
                continue
            seen.add(id(obj))
            yield module, name, obj
