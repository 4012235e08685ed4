"""The tutorial's code blocks run, in order, as one script (so the docs cannot rot)."""
import re
import subprocess
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent.parent / "docs"


def test_tutorial_runs(tmp_path):
    text = (DOCS / "tutorial.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert len(blocks) >= 8
    script = tmp_path / "tutorial.py"  # a real file: kernels are read back with inspect
    script.write_text("\n".join(blocks))
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "illegal schedule" in result.stdout
