"""Make the top-level ``frontends/`` and ``codegen/`` folders importable as ``polyopt.*``.

An installed wheel carries them inside the ``polyopt`` package (setuptools ``package-dir``), so
nothing happens there. In a source checkout (pytest from the repository root, editable installs)
they sit beside ``polyopt/``: register them under their ``polyopt.`` names once, at import time.
"""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

SUBPACKAGES = ("frontends", "codegen")


def mount(package_name: str, package_dir: Path) -> None:
    """Register each sibling sub-package folder as ``package_name.<folder>`` if not inside."""
    for name in SUBPACKAGES:
        qualified = f"{package_name}.{name}"
        if qualified in sys.modules or (package_dir / name / "__init__.py").is_file():
            continue
        source = package_dir.parent / name
        spec = importlib.util.spec_from_file_location(
            qualified, source / "__init__.py", submodule_search_locations=[str(source)])
        if spec is None or spec.loader is None:
            raise ImportError(f"polyopt is installed without its {name} package ({source})")
        module = importlib.util.module_from_spec(spec)
        sys.modules[qualified] = module
        spec.loader.exec_module(module)
