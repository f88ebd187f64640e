"""Sphinx configuration: Markdown pages (MyST), numpydoc docstrings, the PyData theme.

``make docs`` builds the HTML into ``docs/_build/html`` with warnings as errors.
"""

from __future__ import annotations

import dpgm

project = "dpgm"
author = "the dpgm developers"
copyright = "the dpgm developers"
release = version = "0.1.0"

extensions = [
    "myst_parser",
    "numpydoc",
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.intersphinx",
]
source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
root_doc = "index"
exclude_patterns = ["_build", "Thumbs.db", ".DS_Store"]

# MyST: anchors for the pages' headings (links such as integrity.md#data-integrity) and the
# README included as the front page
myst_heading_anchors = 3
myst_enable_extensions = ["colon_fence"]
suppress_warnings = ["myst.header"]

# the API reference: one page per public name (dpgm.__all__), numpydoc sections
autosummary_generate = True
autosummary_imported_members = True
autodoc_typehints = "none"
autodoc_default_options = {"inherited-members": False}
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
numpydoc_xref_param_type = False
numpydoc_validation_checks: set[str] = set()

intersphinx_mapping: dict[str, tuple[str, None]] = {}

html_theme = "pydata_sphinx_theme"
html_title = f"dpgm {dpgm.__version__}" if hasattr(dpgm, "__version__") else "dpgm"
html_theme_options = {
    "navigation_with_keys": False,
    "show_toc_level": 2,
}
html_static_path: list[str] = []
