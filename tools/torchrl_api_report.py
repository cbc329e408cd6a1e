"""Print where tdrl differs from the TorchRL API recorded in ``tools/torchrl_api.json``.

Run with tdrl's venv (TorchRL is not needed)::

    .venv/bin/python tools/torchrl_api_report.py            # gaps per area, then coverage
    .venv/bin/python tools/torchrl_api_report.py --summary  # coverage only

The checks are those of ``tests/compat/test_torchrl_api.py`` (loaded from its file, so the report
and the test never disagree). Coverage counts top-level names, their recorded members, and every
TorchRL parameter of both; allow-list entries are left out of the counts and reported apart.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from collections import defaultdict
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]
TEST_FILE = ROOT / "tests" / "compat" / "test_torchrl_api.py"


def load_checks() -> ModuleType:
    """The test module, imported from its path (tests are not a package)."""
    spec = importlib.util.spec_from_file_location("_torchrl_api_checks", TEST_FILE)
    if spec is None or spec.loader is None:
        raise SystemExit(f"torchrl_api_report: cannot load {TEST_FILE}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def area_of(name: str) -> str:
    """``torchrl.objectives.value.GAE`` -> ``torchrl.objectives.value``."""
    return name.rpartition(".")[0]


def pct(ok: int, total: int) -> str:
    return f"{ok}/{total} ({100.0 * ok / total:.1f}%)" if total else "0/0"


def main(argv: list[str] | None = None) -> int:
    """Print the report; the exit code is 1 when any gap remains."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--summary", action="store_true", help="print only the coverage table")
    args = parser.parse_args(argv)
    checks = load_checks()
    results = [checks.check_entry(e) for e in checks.API["names"]]
    by_area: dict[str, list] = defaultdict(list)
    for r in results:
        by_area[area_of(r.name)].append(r)
    if not args.summary:
        for area, rs in by_area.items():
            missing = [r.name for r in rs if not r.present]
            others = [p for r in rs if r.present for p in r.problems]
            print(f"== {area}: {len(missing)} missing names, {len(others)} other gaps")
            for name in missing:
                print(f"  missing  {name}")
            for line in others:
                print(f"  differs  {line}")
            print()
    rows = [("area", "names", "members", "params", "failing tests", "allowed")]
    total = [0] * 8
    for area, rs in by_area.items():
        counts = [
            sum(r.present for r in rs if not r.skipped),
            sum(not r.skipped for r in rs),
            sum(r.members_ok for r in rs),
            sum(r.members for r in rs),
            sum(r.params_ok for r in rs),
            sum(r.params for r in rs),
            sum(bool(r.problems) for r in rs),
            sum(r.allowed for r in rs),
        ]
        total = [t + c for t, c in zip(total, counts, strict=True)]
        rows.append(
            (
                area,
                pct(*counts[0:2]),
                pct(*counts[2:4]),
                pct(*counts[4:6]),
                str(counts[6]),
                str(counts[7]),
            )
        )
    rows.append(
        ("all", pct(*total[0:2]), pct(*total[2:4]), pct(*total[4:6]), str(total[6]), str(total[7]))
    )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)))
    print(
        f"\nTorchRL {checks.API['torchrl_version']}; {len(checks.API['allow'])} allow-list entries."
    )
    return 1 if total[6] else 0


if __name__ == "__main__":
    raise SystemExit(main())
