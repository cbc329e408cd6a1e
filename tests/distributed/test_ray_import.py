"""Ray is optional: tdrl imports without it, and tdrl.distributed names the extra to install."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

_CODE = textwrap.dedent(
    """
    import sys
    import tdrl, tdrl.specs, tdrl.envs, tdrl.data, tdrl.modules, tdrl.objectives
    import tdrl.collectors, tdrl.train, tdrl.train.cli, tdrl.testing
    assert "ray" not in sys.modules, "a package other than tdrl.distributed imported ray"
    sys.modules["ray"] = None  # as if Ray were not installed
    try:
        import tdrl.distributed
    except ImportError as err:
        print(err)
    else:
        raise SystemExit("tdrl.distributed imported without ray")
    """
)


@pytest.mark.timeout(120)
def test_tdrl_imports_without_ray_and_distributed_names_the_extra():
    out = subprocess.run(
        [sys.executable, "-c", _CODE], capture_output=True, text=True, timeout=110, check=False
    )
    assert out.returncode == 0, out.stderr
    assert "Ray is not installed" in out.stdout and "pip install tdrl[ray]" in out.stdout
