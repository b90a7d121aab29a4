"""Sphinx configuration for skdp's documentation site.

Build (from the repository root)::

    pip install -e '.[doc]'
    sphinx-build -W -b html doc doc/_build/html

The API reference (``api.rst``) is written here, at every build, from
``skdp._public.PUBLIC_MODULES``: the same list ``tests/test_docstrings.py``
validates, so a new public name is documented without a second edit. The
gallery executes ``examples/plot_*.py``; other examples are shown, not run.
"""
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
os.environ.setdefault("MPLBACKEND", "Agg")

import skdp  # noqa: E402
from skdp._public import PUBLIC_MODULES, public_objects  # noqa: E402

project = "skdp"
author = "the skdp developers"
copyright = "2026, the skdp developers"
release = version = skdp.__version__

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "numpydoc",
    "sphinx_gallery.gen_gallery",
    "myst_parser",
    "sphinx_design",
]

source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
exclude_patterns = ["_build", "_templates", "generated/*.examples"]
templates_path = ["_templates"]
default_role = "literal"
autosummary_generate = True
# scikit-learn's metadata-routing setters are generated per class; its own site documents them.
autodoc_default_options = {
    "members": True,
    "inherited-members": False,
    "exclude-members": ",".join(f"set_{m}_request" for m in (
        "fit", "score", "predict", "predict_proba", "transform", "partial_fit", "inverse_transform",
        "decision_function", "split", "sample")),
}
autodoc_typehints = "none"
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
numpydoc_validation_checks = set()  # validated by tests/test_docstrings.py, with scikit-learn's exceptions
myst_heading_anchors = 3
suppress_warnings = ["myst.header"]

html_theme = "pydata_sphinx_theme"
html_title = f"skdp {version}"
html_theme_options = {
    "navbar_end": ["navbar-icon-links"],
    "show_toc_level": 2,
    "navigation_with_keys": False,
}
html_static_path = ["_static"]
# A page without an icon makes the browser ask for /favicon.ico: a 404 in the console.
html_favicon = "_static/favicon.svg"
# Without it the theme script logs "Got invalid theme mode" to the console on every page.
html_context = {"default_mode": "auto"}

sphinx_gallery_conf = {
    "examples_dirs": str(HERE.parent / "examples"),
    "gallery_dirs": str(HERE / "auto_examples"),
    # Executed: plot_*.py, each under a minute on 2 cores. The others are shown, not run, and
    # say in their text how long they take.
    "filename_pattern": r"/plot_",
    "ignore_pattern": r"__init__\.py",
    "within_subsection_order": "FileNameSortKey",
    "download_all_examples": False,
    "remove_config_comments": True,
    "abort_on_example_error": True,
    "plot_gallery": "True",
    "min_reported_time": 0,
    # "Examples in the gallery using X" on each API page.
    "backreferences_dir": "generated",
    "doc_module": ("skdp",),
}


def _write_api_reference():
    """``api.rst``: one autosummary table per public module, in PUBLIC_MODULES order."""
    lines = ["API reference", "=============", "",
             "Every public class and function, grouped as the package is. Each name is listed once, "
             "under the module that is its home; the estimators are importable from ``skdp`` too.", ""]
    by_module = {}
    for module, name, obj in public_objects():
        by_module.setdefault(module, []).append((name, obj))
    for module, (title, blurb) in PUBLIC_MODULES.items():
        if module not in by_module:
            continue
        lines += [title, "-" * len(title), "", blurb, "", f".. currentmodule:: {module}", "",
                  ".. autosummary::", "   :toctree: generated/", "   :nosignatures:", ""]
        for name, obj in by_module[module]:
            lines.append(f"   {name}")
        lines.append("")
    text = "\n".join(lines)
    path = HERE / "api.rst"
    if not path.exists() or path.read_text() != text:
        path.write_text(text)


_write_api_reference()
