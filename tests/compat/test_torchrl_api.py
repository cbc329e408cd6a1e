"""tdrl accepts the TorchRL 0.14.1 API recorded in ``tools/torchrl_api.json``.

The JSON is generated from TorchRL by ``tools/gen_torchrl_api.py`` (in a throwaway venv); this test
never imports TorchRL. For every recorded name it checks that tdrl exports it at the mapped module,
that every recorded member exists, and that every TorchRL parameter is accepted the same way:
positional parameters by the same name at the same index, keyword-only parameters by name (or by a
``**kwargs`` whose docstring names them), with the same default where the default is a plain value.
Entries of the JSON's ``"allow"`` list are deliberate deviations and are skipped.
``tools/torchrl_api_report.py`` reuses ``check_entry`` to print the gaps per area.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

API_PATH = Path(__file__).resolve().parents[2] / "tools" / "torchrl_api.json"
API: dict[str, Any] = json.loads(API_PATH.read_text())
ALLOW: set[tuple[str, str | None]] = {(a["name"], a["param"]) for a in API["allow"]}

P = inspect.Parameter
POSITIONAL = (P.POSITIONAL_ONLY, P.POSITIONAL_OR_KEYWORD)
BY_NAME = (P.POSITIONAL_OR_KEYWORD, P.KEYWORD_ONLY)


@dataclass
class Result:
    """Outcome of one checked name: problems (one line each) and the counts behind coverage."""

    name: str
    present: bool = True
    skipped: bool = False  # the whole name is on the allow-list
    problems: list[str] = field(default_factory=list)
    members: int = 0
    members_ok: int = 0
    params: int = 0
    params_ok: int = 0
    allowed: int = 0


def _generator() -> Any:
    """``tools/gen_torchrl_api.py`` as a module: it imports TorchRL only when run, so its default
    encoding can be shared (one definition of what the JSON holds)."""
    path = API_PATH.with_name("gen_torchrl_api.py")
    spec = importlib.util.spec_from_file_location("gen_torchrl_api", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


encode_default = _generator().encode_default


def _show(default: dict[str, Any]) -> str:
    key = next(k for k in ("value", "float", "enum", "dtype", "class", "repr") if k in default)
    return repr(default[key]) if key == "value" else str(default.get("repr", default[key]))


def _same_plain(a: Any, b: Any) -> bool:
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same_plain(x, y) for x, y in zip(a, b, strict=True))
    return isinstance(a, bool) == isinstance(b, bool) and a == b


def default_error(expected: dict[str, Any], param: inspect.Parameter) -> str | None:
    """Why tdrl's default differs from TorchRL's ``expected`` (None when it matches)."""
    if param.default is P.empty:
        return f"TorchRL defaults it to {_show(expected)}; tdrl requires it"
    got = encode_default(param.default)
    for key in ("value", "float", "enum", "dtype"):
        if key in expected:
            same = key in got and (
                _same_plain(got[key], expected[key])
                if key == "value"
                else got[key] == expected[key]
            )
            return None if same else f"default {_show(got)} (TorchRL: {_show(expected)})"
    if "class" in expected and not expected["class"].startswith("torchrl."):
        same = got.get("class") == expected["class"]
        return None if same else f"default {_show(got)} (TorchRL: {expected['class']})"
    return None  # a TorchRL object: any tdrl default keeps the argument optional


def documents(doc: str, name: str) -> bool:
    """Whether a docstring names ``name`` as an argument (how a ``**kwargs`` documents it)."""
    return re.search(rf"\b{re.escape(name)}\b", doc) is not None


def _named(name: str, error: str | None) -> str | None:
    return None if error is None else f"{name!r}: {error}"


def param_error(
    exp: dict[str, Any], params: list[inspect.Parameter], doc: str, dunder: bool
) -> str | None:
    """Why tdrl's parameter list does not accept TorchRL's parameter ``exp`` (None when it does)."""
    name, kind = exp["name"], exp["kind"]
    kinds = {p.kind for p in params}
    by_name = {p.name: p for p in params if p.kind in (*POSITIONAL, P.KEYWORD_ONLY)}
    if kind in ("var-positional", "var-keyword"):
        # TorchRL's catch-alls forward or swallow extra arguments; tdrl refuses unknown arguments
        # loudly instead. Each argument TorchRL documents is a separate, checked entry.
        return None
    if kind in ("positional-only", "positional-or-keyword"):
        positional = [p for p in params if p.kind in POSITIONAL]
        index = exp["position"]
        if index >= len(positional):
            if P.VAR_POSITIONAL in kinds:
                return None
            if name in by_name:
                return f"{name!r} is keyword-only in tdrl; TorchRL accepts it positionally at index {index}"
            return f"{name!r} (TorchRL positional index {index}) is not accepted"
        got = positional[index]
        if got.name != name and kind == "positional-or-keyword" and not dunder:
            return f"index {index} is {got.name!r} in tdrl, {name!r} in TorchRL"
        if got.kind == P.POSITIONAL_ONLY and kind == "positional-or-keyword" and not dunder:
            return f"{name!r} is positional-only in tdrl; TorchRL also accepts it by name"
        return _named(name, default_error(exp["default"], got)) if "default" in exp else None
    got = by_name.get(name)
    if got is not None and got.kind in BY_NAME:
        return _named(name, default_error(exp["default"], got)) if "default" in exp else None
    if P.VAR_KEYWORD in kinds and documents(doc, name):
        return None
    if P.VAR_KEYWORD in kinds:
        return f"keyword {name!r} is not a parameter and tdrl's **kwargs does not document it"
    return f"keyword {name!r} is not accepted"


def check_params(
    expected: list[dict[str, Any]],
    func: Any,
    drop_first: bool,
    label: str,
    result: Result,
    doc: str,
) -> None:
    """Compare TorchRL's ``expected`` parameters with the signature of tdrl's ``func``."""
    try:
        params = list(inspect.signature(func).parameters.values())
    except (TypeError, ValueError) as err:
        result.problems.append(f"{label}: tdrl signature unreadable ({err})")
        return
    params = params[1:] if drop_first and params else params
    dunder = label.rsplit(".", 1)[-1].startswith("__")
    for exp in expected:
        if (label, exp["name"]) in ALLOW:
            result.allowed += 1
            continue
        result.params += 1
        error = param_error(exp, params, doc, dunder)
        if error is None:
            result.params_ok += 1
        else:
            result.problems.append(f"{label}: {error}")
    known = {e["name"] for e in expected}
    covered = sum(e["kind"] in ("positional-only", "positional-or-keyword") for e in expected)
    positional = [p for p in params if p.kind in POSITIONAL]
    for p in params:
        index = positional.index(p) if p in positional else None
        if (
            p.default is not P.empty
            or p.kind in (P.VAR_POSITIONAL, P.VAR_KEYWORD)
            or p.name in known
        ):
            continue
        if index is None or index >= covered:
            result.problems.append(
                f"{label}: tdrl requires {p.name!r}, which TorchRL does not take"
            )


def _assigned_in_source(klass: type, name: str) -> bool:
    try:
        source = inspect.getsource(klass)
    except (OSError, TypeError):
        return False
    return re.search(rf"self\.{re.escape(name)}\s*(:[^=]+)?=[^=]", source) is not None


def static_member(cls: Any, name: str) -> tuple[bool, Any]:
    """``(found, raw attribute)``: from the class dicts, else an instance attribute its code sets."""
    mro = getattr(cls, "__mro__", (cls,))
    for klass in mro:
        if name in vars(klass):
            return True, vars(klass)[name]
    if hasattr(cls, name):
        return True, getattr(cls, name)
    tdrl_classes = [k for k in mro if k.__module__.startswith("tdrl.")]
    return any(_assigned_in_source(k, name) for k in tdrl_classes), None


def check_member(obj: Any, label: str, name: str, spec: dict[str, Any], result: Result) -> None:
    """One member: exists on tdrl's object, and for methods accepts TorchRL's parameters."""
    member = f"{label}.{name}"
    if (member, None) in ALLOW:
        result.allowed += 1
        return
    result.members += 1
    found, raw = static_member(obj, name)
    if not found:
        result.problems.append(f"{member}: missing ({spec['kind']} in TorchRL)")
        result.params += sum((member, e["name"]) not in ALLOW for e in spec.get("params", ()))
        return
    result.members_ok += 1
    if "params" not in spec:
        return
    if isinstance(raw, property) or not callable(getattr(obj, name, None)):
        result.problems.append(f"{member}: not callable in tdrl (a TorchRL {spec['kind']})")
        result.params += len(spec["params"])
        return
    func, drop = (
        (raw.__func__, False) if isinstance(raw, staticmethod) else (getattr(obj, name), True)
    )
    if isinstance(raw, classmethod):
        func, drop = raw.__func__, True
    check_params(spec["params"], func, drop, member, result, inspect.getdoc(func) or "")


def resolve(path: str) -> Any:
    """The object at dotted ``path`` (module prefix imported, the rest read as attributes)."""
    module, _, attr = path.rpartition(".")
    return getattr(importlib.import_module(module), attr)


def check_entry(entry: dict[str, Any]) -> Result:
    """Check one recorded TorchRL name against tdrl."""
    label = entry["name"]
    result = Result(label)
    if (label, None) in ALLOW:
        result.allowed += 1
        result.skipped = True
        return result
    try:
        obj = resolve(entry["tdrl"])
    except (ImportError, AttributeError):
        result.present = False
        result.problems.append(f"{label}: missing (expected at {entry['tdrl']})")
        result.params += len(entry.get("params", ()))
        for spec in entry.get("members", {}).values():
            result.members += 1
            result.params += len(spec.get("params", ()))
        return result
    if "params" in entry:
        doc = inspect.getdoc(obj) or ""
        if isinstance(obj, type):  # a **kwargs forwarded to a tdrl base class is documented there
            tdrl_bases = [k for k in obj.__mro__ if k.__module__.startswith("tdrl.")]
            doc = (
                "\n".join(filter(None, (k.__doc__ for k in tdrl_bases)))
                + "\n"
                + (inspect.getdoc(obj.__init__) or "")
            )
        check_params(entry["params"], obj, False, label, result, doc)
    for name, spec in entry.get("members", {}).items():
        check_member(obj, label, name, spec, result)
    return result


@pytest.mark.parametrize("entry", API["names"], ids=[e["name"] for e in API["names"]])
def test_torchrl_name(entry: dict[str, Any]) -> None:
    result = check_entry(entry)
    assert not result.problems, f"{len(result.problems)} gap(s):\n" + "\n".join(result.problems)


def test_allow_entries_name_recorded_parameters() -> None:
    params: dict[str, set[str]] = {}
    for e in API["names"]:
        params[e["name"]] = {p["name"] for p in e.get("params", ())}
        for m, spec in e.get("members", {}).items():
            params[f"{e['name']}.{m}"] = {p["name"] for p in spec.get("params", ())}
    for a in API["allow"]:
        assert a["reason"].strip(), a
        assert a["name"] in params, f"allow entry names nothing recorded: {a}"
        assert a["param"] is None or a["param"] in params[a["name"]], (
            f"allow entry names no parameter: {a}"
        )


def _torchrl_like(x, y=1.5, *, flag=False, **kwargs):  # type: ignore[no-untyped-def]
    """Takes ``extra`` through kwargs."""


def test_checker_flags_each_kind_of_difference() -> None:
    def expect(**kw: Any) -> dict[str, Any]:
        return {"position": 0, **kw}

    params = list(inspect.signature(_torchrl_like).parameters.values())
    doc = inspect.getdoc(_torchrl_like) or ""
    ok = [
        expect(name="x", kind="positional-or-keyword"),
        expect(name="y", kind="positional-or-keyword", position=1, default={"value": 1.5}),
        expect(name="flag", kind="keyword-only", default={"value": False}),
        expect(name="extra", kind="keyword-only"),
        # TorchRL's catch-alls need no counterpart: tdrl refuses unknown arguments loudly.
        expect(name="args", kind="var-positional"),
        expect(name="kwargs", kind="var-keyword"),
    ]
    assert [param_error(e, params, doc, False) for e in ok] == [None] * 6
    bad = [
        expect(name="z", kind="positional-or-keyword"),
        expect(name="y", kind="positional-or-keyword", position=1, default={"value": 2.0}),
        expect(name="flag", kind="keyword-only", default={"value": 0}),
        expect(name="other", kind="keyword-only"),
        expect(name="flag", kind="positional-or-keyword", position=2),
    ]
    errors = [param_error(e, params, doc, False) for e in bad]
    assert all(errors), errors
    assert "keyword-only in tdrl" in errors[-1]
