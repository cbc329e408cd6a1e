"""Fail when a Python file under a folder exceeds a line limit (DESIGN.md section 2)."""

from __future__ import annotations

import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    root, limit = Path(argv[1]), int(argv[2])
    too_big = []
    for path in sorted(root.rglob("*.py")):
        n = sum(1 for _ in path.open(encoding="utf-8"))
        if n > limit:
            too_big.append(f"{path} ({n} lines)")
    if too_big:
        print(f"files over the {limit}-line limit (split them by concept, DESIGN.md section 2):")
        print("\n".join("  " + p for p in too_big))
        return 1
    print(f"file sizes ok: every .py file under {root} has at most {limit} lines")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
