"""Sphinx configuration of the airflow-kafka-retry documentation (built by ``scripts/docs``)."""

from __future__ import annotations

import sys
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

project = "airflow-kafka-retry"
author = "airflow-kafka-retry contributors"
copyright = "2026, airflow-kafka-retry contributors"
release = metadata.version("airflow-kafka-retry")  # pyproject.toml's, as installed (not `version`: a setting)

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.napoleon",
    "sphinx.ext.viewcode",
]

source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
# faults-notes.md is an input of the fault suite's generator: its text is already in faults.md.
exclude_patterns = ["_build", "faults-notes.md", "README.md"]

# Markdown: GitHub-style heading anchors, so README-style links `page.md#a-heading` resolve.
myst_heading_anchors = 3
myst_enable_extensions = ["colon_fence", "deflist"]

# The API reference, generated from the docstrings (Airflow's `:param x:` style; napoleon reads Google style).
autosummary_generate = True
autosummary_imported_members = False
autodoc_default_options = {"members": True, "show-inheritance": True}
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_typehints_description_target = "documented"
autodoc_class_signature = "separated"
napoleon_google_docstring = True
napoleon_numpy_docstring = False

html_theme = "furo"
html_title = "airflow-kafka-retry"
