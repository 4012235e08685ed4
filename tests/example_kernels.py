"""The kernels the examples/ scripts define, for tests that check them without running the script."""
import importlib.util
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def example_kernel(name: str):
    """The kernel ``name`` defined by examples/<name>.py (the script is imported, not run)."""
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, name)
