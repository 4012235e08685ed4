"""The scripts in examples/ run (small sizes) and check their own results."""
import runpy
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


@pytest.mark.parametrize("script, argv", [("gemm.py", ["60"]), ("stencil.py", ["24", "4"]),
                                          ("einsum.py", []), ("explore_schedules.py", ["gemm", "jacobi-1d"]),
                                          ("steer_gemm.py", ["60", "--no-autotune"])])
def test_example_runs(script, argv, monkeypatch, capsys):
    monkeypatch.setattr("sys.argv", [script, *argv])
    runpy.run_path(str(EXAMPLES / script), run_name="__main__")
    out = capsys.readouterr().out
    assert out.strip()
    if script != "explore_schedules.py":
        assert "match" in out  # each script checked its result against a reference
