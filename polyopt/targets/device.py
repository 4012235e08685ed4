"""Attributes of the current GPU, read from the driver once per device (CUDA's device
attributes, as CuPy spells them: ``MultiProcessorCount``, ``MaxSharedMemoryPerBlockOptin``...).
The launch paths ask for them on every launch; a driver query costs more than the launch's own
Python work."""
from __future__ import annotations

from importlib import import_module

_ATTRIBUTES: dict[tuple[int, str], int] = {}


def device_attribute(name: str) -> int:
    """Attribute ``name`` of the current CuPy device."""
    cupy = import_module("cupy")
    key = (cupy.cuda.Device().id, name)
    if key not in _ATTRIBUTES:
        _ATTRIBUTES[key] = int(cupy.cuda.Device(key[0]).attributes[name])
    return _ATTRIBUTES[key]


def compute_capability() -> int:
    """The current CuPy device's compute capability as one number (90 for 9.0)."""
    cupy = import_module("cupy")
    key = (cupy.cuda.Device().id, "compute_capability")
    if key not in _ATTRIBUTES:
        _ATTRIBUTES[key] = int(cupy.cuda.Device(key[0]).compute_capability)
    return _ATTRIBUTES[key]


__all__ = ["compute_capability", "device_attribute"]
