"""LiteLLM's own venv holds the pinned release, and the runtime's venv has no LiteLLM. (A real
LiteLLM proxy from that venv, in front of a vLLM-shaped simulator, is driven by
`test_endpoint_keys.py`: the master key opens it, no key is 401, nothing leaves loopback.)"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests import litellm

ROOT = Path(__file__).resolve().parents[1]


def test_the_runtime_venv_has_no_litellm() -> None:
    ran = subprocess.run(
        [str(ROOT / ".venv" / "bin" / "python"), "-c", "import litellm"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert ran.returncode == 1
    assert ran.stderr.rstrip().endswith("ModuleNotFoundError: No module named 'litellm'")


def test_its_own_venv_holds_the_pinned_release() -> None:
    if reason := litellm.unavailable():
        pytest.skip(reason)
    version = "import importlib.metadata as m; print(m.version('litellm'))"
    ran = subprocess.run(
        [str(litellm.VENV / "bin" / "python"), "-c", version],
        capture_output=True,
        text=True,
        check=True,
    )
    assert ran.stdout == f"{litellm.RELEASE}\n"
    assert f"litellm=={litellm.RELEASE} \\\n" in litellm.REQUIREMENTS.read_text()
