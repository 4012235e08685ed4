"""The current GPU's attributes (:mod:`polyopt.targets.device`) without a GPU: CuPy stood in
for, each attribute read from the driver once per device."""
import sys
from types import ModuleType, SimpleNamespace

from polyopt.targets import device


def test_an_attribute_is_read_once_per_device(monkeypatch):
    reads, current = [], [0]

    class Device:
        def __init__(self, index=None):
            self.id = current[0] if index is None else index

        @property
        def attributes(self):
            reads.append(self.id)
            return {"MultiProcessorCount": 132 + self.id, "MaxSharedMemoryPerBlockOptin": 232448}

    fake = ModuleType("cupy")
    fake.cuda = SimpleNamespace(Device=Device)
    monkeypatch.setitem(sys.modules, "cupy", fake)
    monkeypatch.setattr(device, "_ATTRIBUTES", {})
    assert [device.device_attribute("MultiProcessorCount") for _ in range(3)] == [132] * 3
    assert device.device_attribute("MaxSharedMemoryPerBlockOptin") == 232448
    current[0] = 1
    assert device.device_attribute("MultiProcessorCount") == 133  # another device: its own value
    assert reads == [0, 0, 1]
