"""Every script in examples/ runs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = sorted((Path(__file__).resolve().parents[1] / "examples").glob("*.py"))


@pytest.mark.parametrize("script", EXAMPLES, ids=lambda p: p.name)
def test_example_runs(script: Path) -> None:
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip()


def test_quickstart_hands_over_the_task() -> None:
    script = next(p for p in EXAMPLES if p.name == "quickstart.py")
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, check=True).stdout
    assert "previous status: working" in out
    assert "Add pagination to the /orders endpoint" in out
    assert "Write the test for an empty last page" in out
