"""Runs the SOTA-style scripts on TorchRL: the import swap, the runs, the recorded results.

Kept in ``tools/`` beside the other TorchRL-side tooling (``tools/differential/``): it drives a
TorchRL venv, and nothing in ``tdrl/``, ``tests/`` or ``benchmarks/`` refers to torchrl's
modules. The scripts in ``tests/compat/sota/`` import tdrl. :func:`swap_tree` copies that
folder to a temporary one and
rewrites ``tdrl`` to ``torchrl`` on import lines only (nothing else changes), so the copy is
the TorchRL script a user would start from. The commands run each case in a separate process
with the given Python::

    python tools/sota_swap.py record [CASE ...]     # torchrl -> sota/torchrl_results.json
    python tools/sota_swap.py compare [CASE ...]    # both libraries, side by side

``record`` uses ``TORCHRL_PYTHON`` (default ``/tmp/trl-venv/bin/python``, a venv with torchrl
0.14.1); ``compare`` also runs the tdrl scripts with ``TDRL_PYTHON`` (default this
interpreter). This file imports neither library.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1] / "tests" / "compat" / "sota"
RESULTS = ROOT / "torchrl_results.json"
_IMPORT = re.compile(r"^(\s*(?:from|import)\s+)tdrl(?=[.\s])", re.MULTILINE)
sys.path.insert(0, str(ROOT))

from _cases import CASES  # noqa: E402


def swap_imports(source: str) -> str:
    """``source`` with ``tdrl`` replaced by ``torchrl`` at the start of import lines only.

    Examples:
        >>> swap_imports("from tdrl.envs import GymEnv\\nx = 'tdrl'").split("\\n")
        ['from torchrl.envs import GymEnv', "x = 'tdrl'"]
    """
    return _IMPORT.sub(r"\1torchrl", source)


def swap_tree(dest: Path) -> Path:
    """Copies the SOTA folder's scripts and configs to ``dest`` with the imports swapped."""
    for path in ROOT.rglob("*"):
        if "__pycache__" in path.parts or path.suffix not in (".py", ".yaml"):
            continue
        target = dest / path.relative_to(ROOT)
        target.parent.mkdir(parents=True, exist_ok=True)
        if path.suffix == ".py":
            target.write_text(swap_imports(path.read_text(encoding="utf-8")), encoding="utf-8")
        else:
            shutil.copyfile(path, target)
    return dest


def run(python: str, root: Path, case: str, workdir: Path) -> dict[str, Any]:
    """Runs ``case`` from the scripts under ``root`` with ``python``; returns its summary."""
    out = workdir / f"{case}.json"
    proc = subprocess.run(
        [python, str(root / "_run.py"), case, "--out", str(out), "--workdir", str(workdir / case)],
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    if proc.returncode != 0:
        return {"error": proc.stderr[-4000:]}
    return json.loads(out.read_text(encoding="utf-8"))


def _torchrl_python() -> str:
    return os.environ.get("TORCHRL_PYTHON", "/tmp/trl-venv/bin/python")


def record(cases: list[str]) -> None:
    """Runs ``cases`` on torchrl and stores their summaries in ``torchrl_results.json``."""
    results = json.loads(RESULTS.read_text(encoding="utf-8")) if RESULTS.exists() else {}
    version = subprocess.run(
        [_torchrl_python(), "-c", "import torchrl; print(torchrl.__version__)"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    with tempfile.TemporaryDirectory() as tmp:
        root = swap_tree(Path(tmp) / "scripts")
        for case in cases:
            summary = run(_torchrl_python(), root, case, Path(tmp))
            if "error" in summary:
                print(f"{case}: failed on torchrl\n{summary['error']}")
                continue
            summary["torchrl"] = version
            results[case] = summary
            print(f"{case}: recorded ({summary['wall_s']} s)")
    RESULTS.write_text(json.dumps(results, indent=1, sort_keys=True) + "\n", encoding="utf-8")


def compare(cases: list[str]) -> None:
    """Runs ``cases`` on both libraries and prints the logged numbers side by side."""
    tdrl_python = os.environ.get("TDRL_PYTHON", sys.executable)
    with tempfile.TemporaryDirectory() as tmp:
        root = swap_tree(Path(tmp) / "scripts")
        for case in cases:
            trl = run(_torchrl_python(), root, case, Path(tmp) / "trl")
            ours = run(tdrl_python, ROOT, case, Path(tmp) / "tdrl")
            print(f"=== {case}: wall torchrl {trl.get('wall_s')} s, tdrl {ours.get('wall_s')} s")
            for side, res in (("torchrl", trl), ("tdrl", ours)):
                if "error" in res:
                    print(f"--- {side} failed:\n{res['error']}")
            for i, (a, b) in enumerate(zip(trl.get("history", []), ours.get("history", []))):
                for key in sorted(set(a) | set(b)):
                    same = "==" if a.get(key) == b.get(key) else "!="
                    print(f"  it {i} {key}: {a.get(key)} {same} {b.get(key)}")


if __name__ == "__main__":
    command, *names = sys.argv[1:] or ["compare"]
    {"record": record, "compare": compare}[command](names or sorted(CASES))
