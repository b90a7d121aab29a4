"""Every public name's docstring passes numpydoc's validator, as scikit-learn's ``test_docstrings.py``.

The public names are the ``__all__`` of the modules the API reference documents
(``doc/api.rst`` is generated from the same list, ``PUBLIC_MODULES``), and
each public class's own public methods and properties. The codes ignored are
scikit-learn's: RT02 (a Returns line may name the value), GL01/GL02 (where
the summary starts) and, for methods, EX01/SA01/ES01 (examples, See Also and
an extended summary are asked of the top-level objects only). The Examples
sections run as doctests in the default set (``--doctest-modules``); here they
are also checked to import every name they use.
"""
import importlib
import inspect

import pytest

numpydoc_validation = pytest.importorskip("numpydoc.validate")

from skdp._public import PUBLIC_MODULES, public_objects  # noqa: E402

IGNORED = {"RT02", "GL01", "GL02"}
TOP_LEVEL_ONLY = {"EX01", "SA01", "ES01"}


def _targets():
    for module, name, obj in public_objects():
        yield f"{module}.{name}", None, obj
        if inspect.isclass(obj) and not issubclass(obj, BaseException):
            for attr, value in vars(obj).items():
                if attr.startswith("_") or not (inspect.isfunction(value) or isinstance(value, property)):
                    continue
                yield f"{module}.{name}.{attr}", attr, None


TARGETS = sorted(_targets(), key=lambda t: t[0])


def _errors(path, method, obj=None):
    res = numpydoc_validation.validate(path)
    # Exceptions and warnings are raised, not called: no examples or See Also asked of them.
    exempt = TOP_LEVEL_ONLY if method is not None or (inspect.isclass(obj) and issubclass(obj, Warning | Exception)) \
        else set()
    return [f"{code}: {msg}" for code, msg in res["errors"] if code not in IGNORED and code not in exempt]


def test_public_modules_import():
    for module in PUBLIC_MODULES:
        importlib.import_module(module)


@pytest.mark.parametrize("path, method, obj", TARGETS, ids=[t[0] for t in TARGETS])
def test_docstring(path, method, obj):
    errors = _errors(path, method, obj)
    assert not errors, f"{path}:\n  " + "\n  ".join(errors)


def _examples():
    for module, name, obj in public_objects():
        doc = inspect.getdoc(obj) or ""
        if ">>>" in doc:
            yield f"{module}.{name}", doc


EXAMPLES = list(_examples())


@pytest.mark.parametrize("path, doc", EXAMPLES, ids=[e[0] for e in EXAMPLES])
def test_docstring_examples_are_self_contained(path, doc):
    """An Examples section imports every name it uses: the API reference shows it as a whole script.

    The examples themselves run in the default test set (``--doctest-modules``), where the module's
    globals are visible; this static check catches an example that works only thanks to them.
    """
    import ast
    import builtins
    import doctest

    source = "\n".join(ex.source for ex in doctest.DocTestParser().get_examples(doc))
    tree = ast.parse(source)
    bound, used = set(dir(builtins)), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (bound if isinstance(node.ctx, (ast.Store, ast.Del)) else used).add(node.id)
        elif isinstance(node, ast.alias):
            bound.add((node.asname or node.name).split(".")[0])
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.add(node.name)
    assert not used - bound, f"{path}: its Examples use {sorted(used - bound)} without importing them"
