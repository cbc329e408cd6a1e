"""Runs one SOTA-style script (a case of :mod:`_cases`) and summarises what it logged.

Library-agnostic: it imports neither tdrl nor torchrl itself, so the same file drives the
scripts in this folder (tdrl) and the import-swapped copies ``tools/sota_swap.py`` makes (torchrl).

Command line (used by ``tools/sota_swap.py`` in each library's venv)::

    python _run.py CASE --out result.json [--workdir DIR]
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import os
import sys
import time
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
import tqdm

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))

from _cases import CASES  # noqa: E402
from _config import load_config  # noqa: E402


def _number(value: Any) -> float | list[float]:
    """A logged value as a float (a tensor of several values becomes a list)."""
    if hasattr(value, "detach"):
        value = value.detach().cpu().reshape(-1).tolist()
        return value[0] if len(value) == 1 else value
    return float(value)


def summarise(history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per iteration, every logged number except timings (which differ from run to run)."""
    return [{k: _number(v) for k, v in sorted(row.items()) if "time" not in k} for row in history]


class _EveryUpdateBar(tqdm.tqdm):
    """tqdm refreshing at every update, so that its rate exists from the first one."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("mininterval", 0)
        super().__init__(*args, **kwargs)


@contextmanager
def _rate_from_first_update() -> Iterator[None]:
    """The scripts log ``pbar.format_dict["rate"]`` as ``"time/speed"``. tqdm leaves the rate
    None until its first refresh (0.1 s after the start by default), which a fast first
    iteration does not reach, and None is no number to log on either library (TorchRL's
    CSVLogger calls ``float(None)``). The scripts' ``tqdm.tqdm`` refreshes at every update
    while they run here."""
    original = tqdm.tqdm
    tqdm.tqdm = _EveryUpdateBar
    try:
        yield
    finally:
        tqdm.tqdm = original


@contextmanager
def _one_thread() -> Iterator[None]:
    """One intra-op thread while a script runs: on the shared 2-core machine two threads
    made every small matmul ~18x slower (SAC updates took 0.5 s instead of 5 ms), and the
    recorded TorchRL numbers were produced with one thread too."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def run_case(name: str, overrides: list[str] | None = None) -> dict[str, Any]:
    """Imports the case's script from its folder and runs it; returns its output and config.

    The caller chooses the working directory (the logger writes below it).
    """
    case = CASES[name]
    folder = ROOT / case.folder
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))
    module = importlib.import_module(case.script)
    cfg = load_config(folder / case.config, case.overrides if overrides is None else overrides)
    start = time.perf_counter()
    with _rate_from_first_update(), _one_thread():
        out = getattr(module, case.entry)(cfg)
    out["wall_s"] = time.perf_counter() - start
    out["cfg"] = cfg
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("case", choices=sorted(CASES))
    parser.add_argument("--out", required=True)
    parser.add_argument("--workdir", default=None)
    args = parser.parse_args()
    if args.workdir:
        os.makedirs(args.workdir, exist_ok=True)
        os.chdir(args.workdir)
    try:
        out = run_case(args.case)
    except BaseException:
        # A failed script may leave env worker processes that the interpreter's exit would
        # wait for (TorchRL's are not daemons): report and leave at once.
        traceback.print_exc()
        sys.stderr.flush()
        os._exit(1)
    result = {
        "overrides": list(CASES[args.case].overrides),
        "history": summarise(out["history"]),
        "wall_s": round(out["wall_s"], 2),
    }
    for row in result["history"]:
        for key, value in row.items():
            if isinstance(value, float) and not math.isfinite(value):
                row[key] = repr(value)
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main()
