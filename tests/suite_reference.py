"""Run a compiled suite kernel on fresh inputs and compare every array with the suite's numpy
reference (the check the scheduler and code-generation tests share)."""
from __future__ import annotations

from typing import Mapping

import numpy as np

import polyopt as po


def check_against_reference(entry, compiled, sizes: str | Mapping[str, int] = "MINI") -> None:
    """``entry`` (a suite entry or its name) run through ``compiled`` matches its reference at
    ``sizes`` (a preset name or the parameter values), array by array."""
    entry = po.suite.get(entry) if isinstance(entry, str) else entry
    args = entry.inputs(entry.sizes(sizes) if isinstance(sizes, str) else dict(sizes))
    expected = {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in args.items()}
    entry.reference(**expected)
    compiled(**args)
    for key, value in expected.items():
        if isinstance(value, np.ndarray):
            np.testing.assert_allclose(args[key], value, rtol=1e-9, atol=1e-12, err_msg=f"{entry.name}: {key}")
