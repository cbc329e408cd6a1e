"""Run the differential scenarios and record or report the results.

Usage (from the repository root)::

    python tools/differential/run.py run --lib tdrl --out /tmp/tdrl.json [--only PREFIX ...]
    .venv/bin/python tools/differential/run.py record   # TorchRL's side -> torchrl_results.json
    .venv/bin/python tools/differential/run.py report [--only PREFIX ...] [--fresh] [--slow]

``run`` executes the scenarios in this process with one library. ``record`` runs them on TorchRL
in ``/tmp/trl-venv`` (a subprocess) and rewrites ``torchrl_results.json``, keeping its ``"allow"``
list. ``report`` runs them on tdrl in a subprocess and prints the differences with the recorded
TorchRL results (``--fresh``: with a new TorchRL run instead). ``--slow`` adds the scenarios that
start worker processes (multi-process collectors), which the test leaves out for time.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

RESULTS = HERE / "torchrl_results.json"
TORCHRL_PYTHON = "/tmp/trl-venv/bin/python"
TDRL_PYTHON = str(HERE.parents[1] / ".venv" / "bin" / "python")
TORCHRL_VERSION = "0.14.1"


def selected(only: list[str] | None, slow: bool = False) -> list[str]:
    from differential import scenarios  # noqa: F401 - registers every scenario
    from differential.registry import SCENARIOS, SLOW

    ids = sorted(s for s in SCENARIOS if slow or s not in SLOW)
    return [s for s in ids if not only or any(s.startswith(p) for p in only)]


def run_here(
    lib_name: str, only: list[str] | None, verbose: bool = False, slow: bool = False
) -> dict[str, Any]:
    import torch

    from differential.encode import encode
    from differential.lib import load
    from differential.registry import run_one

    torch.set_num_threads(1)
    lib = load(lib_name)
    out = {}
    for sid in selected(only, slow):
        start = time.perf_counter()
        out[sid] = encode(run_one(sid, lib))
        if verbose:
            print(f"{time.perf_counter() - start:6.2f}s {sid}", file=sys.stderr)
    return out


def run_sub(
    python: str, lib_name: str, only: list[str] | None, slow: bool = False
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "out.json"
        cmd = [python, __file__, "run", "--lib", lib_name, "--out", str(path)]
        cmd += ["--only", *only] if only else []
        cmd += ["--slow"] if slow else []
        subprocess.run(cmd, check=True)
        return json.loads(path.read_text())


def load_recorded() -> dict[str, Any]:
    return json.loads(RESULTS.read_text()) if RESULTS.exists() else {"allow": {}, "results": {}}


def write_recorded(results: dict[str, Any], only: list[str] | None, slow: bool) -> None:
    from differential import scenarios  # noqa: F401 - registers every scenario (fills SLOW)
    from differential.registry import SLOW

    old = load_recorded()
    if not slow:  # keep the slow scenarios' last record
        results = {**{k: v for k, v in old["results"].items() if k in SLOW}, **results}
    if only:  # a partial record updates only the selected scenarios
        merged = {k: v for k, v in old["results"].items() if not any(k.startswith(p) for p in only)}
        merged.update(results)
        results = merged
    RESULTS.write_text(dump(old.get("allow", {}), results))


def dump(allow: dict[str, Any], results: dict[str, Any]) -> str:
    """The recorded JSON: one line per scenario result (readable diffs, a small file)."""
    head = {"generator": "tools/differential/run.py record", "torchrl_version": TORCHRL_VERSION}
    lines = ["{"]
    lines += [f" {json.dumps(k)}: {json.dumps(v)}," for k, v in head.items()]
    lines.append(' "allow": {')
    items = sorted(allow.items())
    lines += [
        f"  {json.dumps(k)}: {json.dumps(v)}{',' if i < len(items) - 1 else ''}"
        for i, (k, v) in enumerate(items)
    ]
    lines.append(" },")
    lines.append(' "results": {')
    items = sorted(results.items())
    lines += [
        f"  {json.dumps(k)}: {json.dumps(v, separators=(',', ':'))}"
        f"{',' if i < len(items) - 1 else ''}"
        for i, (k, v) in enumerate(items)
    ]
    lines += [" }", "}"]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["run", "record", "report"])
    parser.add_argument("--lib", choices=["torchrl", "tdrl"], default="tdrl")
    parser.add_argument("--out")
    parser.add_argument("--only", nargs="*")
    parser.add_argument("--fresh", action="store_true")
    parser.add_argument("-v", "--verbose", action="store_true")
    parser.add_argument("--error-kinds", action="store_true", help="also compare exception kinds")
    parser.add_argument("--slow", action="store_true", help="also run the process scenarios")
    args = parser.parse_args()
    if args.command == "run":
        results = run_here(args.lib, args.only, args.verbose, args.slow)
        text = json.dumps(results, indent=1)
        Path(args.out).write_text(text) if args.out else print(text)
    elif args.command == "record":
        write_recorded(
            run_sub(TORCHRL_PYTHON, "torchrl", args.only, args.slow), args.only, args.slow
        )
    else:
        from differential.compare import report

        recorded = load_recorded()
        expected = (
            run_sub(TORCHRL_PYTHON, "torchrl", args.only, args.slow)
            if args.fresh
            else recorded["results"]
        )
        got = run_sub(TDRL_PYTHON, "tdrl", args.only, args.slow)
        expected = {k: v for k, v in expected.items() if k in got}
        if args.only:
            expected = {
                k: v for k, v in expected.items() if any(k.startswith(p) for p in args.only)
            }
        print(report(expected, got, recorded.get("allow", {}), args.error_kinds))


if __name__ == "__main__":
    main()
