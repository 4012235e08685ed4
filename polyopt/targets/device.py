"""Attributes of the current GPU, read from the driver once per device (CUDA's device
attributes, as CuPy spells them: ``MultiProcessorCount``, ``MaxSharedMemoryPerBlockOptin``...).
The launch paths ask for them on every launch; a driver query costs more than the launch's own
Python work."""
from __future__ import annotations

from importlib import import_module

_ATTRIBUTES: dict[tuple[int, str], int] = {}


def device_attribute(name: str) -> int:
    """Attribute ``name`` of the current CuPy device."""
    return _read_once(name, lambda device: device.attributes[name])


def compute_capability() -> int:
    """The current CuPy device's compute capability as one number (90 for 9.0)."""
    return _read_once("compute_capability", lambda device: device.compute_capability)


def _read_once(name: str, read) -> int:
    """``read(device)`` of the current CuPy device as an int, read once per device."""
    cupy = import_module("cupy")
    key = (cupy.cuda.Device().id, name)
    if key not in _ATTRIBUTES:
        _ATTRIBUTES[key] = int(read(cupy.cuda.Device(key[0])))
    return _ATTRIBUTES[key]


__all__ = ["compute_capability", "device_attribute"]
