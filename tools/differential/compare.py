"""Differences between two encoded results (see :mod:`differential.encode`).

``diff(expected, got)`` returns one line per difference, each naming the path inside the
result, TorchRL's side and tdrl's side. Floats match within ``RTOL``/``ATOL`` (the libraries may
add the same terms in another order); exception messages are not compared (tdrl words its own),
only whether both raised and the built-in kind of the exception.
"""

from __future__ import annotations

import json
import math
from typing import Any

RTOL = 1e-4
ATOL = 1e-5
MAX_LINES = 8  # difference lines shown per scenario in a report


def short(x: Any, limit: int = 160) -> str:
    """A one-line summary of an encoded value."""
    if _tag(x) is not None:
        ((tag, body),) = x.items()
        if tag == "error":
            return f"raises {body['type']}({body['kind']}): {body['msg'][:limit]}"
        if tag == "tensor":
            data = body.get("values", body.get("stats"))
            text = json.dumps(data)
            text = text if len(text) < limit else text[:limit] + "..."
            return f"tensor{body['shape']} {body['dtype']} {text}"
        if tag == "td":
            return f"TensorDict{body['batch_size']} keys {sorted(body['entries'])}"[:limit]
        if tag == "spec":
            return f"{body['cls']}{body['shape']} {body.get('dtype', '')}".strip()
    text = json.dumps(x)
    return text if len(text) < limit else text[:limit] + "..."


def _close(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        if isinstance(a, int) and isinstance(b, int):
            return a == b
        if math.isnan(a) and math.isnan(b):
            return True
        return abs(a - b) <= ATOL + RTOL * abs(a)
    return a == b


TAGS = ("error", "tensor", "td", "spec", "dict", "list", "repr", "nontensor")


def _tag(x: Any) -> str | None:
    if isinstance(x, dict) and len(x) == 1 and next(iter(x)) in TAGS:
        return next(iter(x))
    return None


def diff(expected: Any, got: Any, path: str = "", error_kinds: bool = False) -> list[str]:
    """Lines describing where ``got`` (tdrl) differs from ``expected`` (TorchRL).

    Both raising counts as the same behaviour unless ``error_kinds`` (then the built-in kind of
    the exceptions must match too: tdrl raises ``ValueError`` for bad values where TorchRL
    sometimes raises ``TypeError``/``RuntimeError``, a difference reports list apart).
    """
    where = path or "<result>"
    te, tg = _tag(expected), _tag(got)
    if te == "error" or tg == "error":
        if te == tg == "error" and (
            not error_kinds or expected["error"]["kind"] == got["error"]["kind"]
        ):
            return []
        return [f"{where}: TorchRL {short(expected)} | tdrl {short(got)}"]
    if te != tg:
        return [f"{where}: TorchRL {short(expected)} | tdrl {short(got)}"]
    if te == "tensor":
        return _diff_tensor(expected["tensor"], got["tensor"], where)
    if te in ("td", "spec", "dict", "nontensor"):
        return _diff_mapping(expected[te], got[te], path, error_kinds)
    if te == "list":
        a, b = expected["list"], got["list"]
        if len(a) != len(b):
            if all(isinstance(x, str) for x in a + b):
                only_t = [x for x in a if x not in b]
                only_d = [x for x in b if x not in a]
                return [f"{where}: only in TorchRL {only_t}, only in tdrl {only_d}"]
            return [f"{where}: TorchRL {len(a)} items | tdrl {len(b)} items"]
        return [
            line
            for i, (x, y) in enumerate(zip(a, b))
            for line in diff(x, y, f"{path}[{i}]", error_kinds)
        ]
    if te is None and isinstance(expected, dict) and isinstance(got, dict):
        return _diff_mapping(expected, got, path, error_kinds)
    if te is None and isinstance(expected, list) and isinstance(got, list):
        if len(expected) == len(got) and all(_close(x, y) for x, y in zip(expected, got)):
            return []
        if all(isinstance(x, str) for x in expected + got):
            only_t = [x for x in expected if x not in got]
            only_d = [x for x in got if x not in expected]
            return [f"{where}: only in TorchRL {only_t}, only in tdrl {only_d}"]
    elif _close(expected, got):
        return []
    return [f"{where}: TorchRL {short(expected)} | tdrl {short(got)}"]


def _diff_mapping(a: dict[str, Any], b: dict[str, Any], path: str, error_kinds: bool) -> list[str]:
    lines = []
    missing = [k for k in a if k not in b]
    extra = [k for k in b if k not in a]
    if missing:
        lines.append(f"{path or '<result>'}: keys only in TorchRL {missing}")
    if extra:
        lines.append(f"{path or '<result>'}: keys only in tdrl {extra}")
    for key in a:
        if key in b:
            lines += diff(a[key], b[key], f"{path}.{key}" if path else key, error_kinds)
    return lines


def _diff_tensor(a: dict[str, Any], b: dict[str, Any], where: str) -> list[str]:
    both = f"TorchRL {short({'tensor': a})} | tdrl {short({'tensor': b})}"
    if a["shape"] != b["shape"]:
        return [f"{where}: shape {a['shape']} vs {b['shape']}: {both}"]
    if a["dtype"] != b["dtype"]:
        return [f"{where}: dtype {a['dtype']} vs {b['dtype']}: {both}"]
    if "values" in a:
        same = all(_close(x, y) for x, y in zip(a["values"], b["values"], strict=True))
    else:
        same = all(_close(a["stats"][k], b["stats"][k]) for k in a["stats"])
    return [] if same else [f"{where}: values differ: {both}"]


def report(
    expected: dict[str, Any],
    got: dict[str, Any],
    allow: dict[str, str],
    error_kinds: bool = False,
) -> str:
    """A readable report: per scenario id, its difference lines (allowed ones marked)."""
    lines = []
    for sid in sorted(set(expected) | set(got)):
        if sid not in got:
            lines.append(f"{sid}: not run on tdrl")
            continue
        if sid not in expected:
            lines.append(f"{sid}: not recorded for TorchRL")
            continue
        found = diff(expected[sid], got[sid], error_kinds=error_kinds)
        if found:
            mark = f" (allowed: {allow[sid]})" if sid in allow else ""
            lines.append(f"{sid}{mark}")
            lines += [f"    {line}" for line in found[:MAX_LINES]]
            if len(found) > MAX_LINES:
                lines.append(f"    ... {len(found) - MAX_LINES} more")
    return "\n".join(lines) if lines else "no differences"
