"""tdrl behaves as TorchRL 0.14.1 on the scenarios of ``tools/differential``.

``tools/differential/torchrl_results.json`` holds what each scenario returned on TorchRL (made by
``tools/differential/run.py record`` in a throwaway venv; this test never imports TorchRL). Each
test runs one scenario on tdrl, in this process, and compares keys, shapes, dtypes and values.

- The JSON's ``"allow"`` list holds the differences that are on purpose (README, "Coming from
  TorchRL"), each with its reason and the result paths it covers.
- ``OPEN`` below lists the differences known today and not fixed yet: those tests are strict
  xfails, so a fix turns them into failures until the entry is removed here.

``tools/differential/torchrl_kwargs.json`` records where TorchRL forwards each of its opaque
``**kwargs`` and which keys it accepts there; ``test_kwargs`` checks that tdrl's counterpart
accepts the same keys.

Print every difference with ``.venv/bin/python tools/differential/run.py report``.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest

TOOLS = Path(__file__).resolve().parents[2] / "tools"
if str(TOOLS) not in sys.path:
    sys.path.insert(0, str(TOOLS))

from differential import scenarios  # noqa: E402,F401 - registers every scenario
from differential.compare import diff  # noqa: E402
from differential.encode import encode  # noqa: E402
from differential.lib import load  # noqa: E402
from differential.registry import SCENARIOS, SLOW, run_one  # noqa: E402

RECORDED = json.loads((TOOLS / "differential" / "torchrl_results.json").read_text())
RESULTS: dict[str, Any] = RECORDED["results"]
ALLOW: dict[str, dict[str, Any]] = RECORDED["allow"]
KWARGS = json.loads((TOOLS / "differential" / "torchrl_kwargs.json").read_text())
API = json.loads((TOOLS / "torchrl_api.json").read_text())
# the API list's deliberate omissions (deprecated keys TorchRL only accepts to raise, ...)
API_ALLOW = {(a["name"], a["param"]) for a in API["allow"]}

# Known open differences (scenario id -> what differs). Each is a strict xfail: when the
# difference is fixed the test fails until its line is removed here.
OPEN: dict[str, str] = {
    "actors/ProbabilisticActor/OneHotCategorical/return_log_prob=False": "OneHotCategorical under MEAN: TorchRL writes [B] NaN actions (the distribution mean), tdrl the mode",
    "actors/ProbabilisticActor/OneHotCategorical/return_log_prob=True": "as above, and MEAN's log-prob differs (TorchRL evaluates its NaN mean, tdrl the mode)",
    "actors/ProbabilisticActor/TanhNormal/return_log_prob=False": "ExplorationType.MEAN with TanhNormal: TorchRL's action (its MC/transformed mean) differs from tdrl's",
    "actors/ProbabilisticActor/TanhNormal/return_log_prob=True": "MEAN's action differs (TorchRL estimates the mean from random draws), hence its log-prob; the other modes' log-probs are equal",
    "envs/CountEnv/partial_reset_mask_only": "reset(TensorDict(_reset=...)) without the other entries: TorchRL's non-reset rows read 0 (taken from the input), tdrl's keep the env's values",
    "envs/CountEnv/step_and_maybe_reset": "step_and_maybe_reset: TorchRL's next root keeps 'action', tdrl drops it",
    "storages/TensorStorage/ndim=1": "TensorStorage over preallocated data: TorchRL's rb[:] shows the stored 'index' (0 where never written), tdrl fills 0..7",
    "storages/TensorStorage/ndim=2": "TensorStorage(ndim=2): TorchRL builds it (its extend then fails on a mismatched second dim), tdrl raises NotImplementedError at construction",
    "transforms/DTypeCastTransform/float16": "cast spec bounds: TorchRL keeps -inf/inf, tdrl finfo min/max; TorchRL leaves the float32 action spec alone, tdrl casts it to float16 too",
    "transforms/DoubleToFloat/default": "spec bounds after the cast: TorchRL -inf/inf, tdrl float32 finfo min/max",
    "transforms/DoubleToFloat/in_keys": "spec bounds after the cast: TorchRL -inf/inf, tdrl float32 finfo min/max",
    "transforms/ObservationNorm/loc_scale": "spec bounds of the normalised entry: TorchRL -inf/inf, tdrl float32 finfo min/max",
    "transforms/ObservationNorm/out_keys": "out_keys spec bounds: TorchRL -inf/inf, tdrl finfo min/max",
    "transforms/ObservationNorm/standard_normal": "spec bounds of the normalised entry: TorchRL +-1.7e38 (the transformed finfo bound), tdrl finfo min/max",
}

# Known open gaps in what tdrl accepts through TorchRL's **kwargs (entry name -> what is missing).
OPEN_KWARGS: dict[str, str] = {
    "torchrl.envs.EnvBase.reset": "reset(options=...) is refused; TorchRL forwards it to the env's _reset (gym's reset options)",
    "torchrl.modules.MultiAgentMLP": "MLP options norm_class/norm_kwargs/single_bias_last_layer/layer_class/layer_kwargs not accepted",
}


def _allowed(sid: str, line: str) -> bool:
    paths = ALLOW.get(sid, {}).get("paths", [])
    return any(line == p or re.match(rf"{re.escape(p)}[.\[:]", line) for p in paths)


def _marks(sid: str, table: dict[str, str]) -> list[Any]:
    if sid in table:
        return [pytest.mark.xfail(strict=True, reason=table[sid])]
    return []


@pytest.fixture(scope="module")
def tdrl_lib() -> Any:
    return load("tdrl")


def test_every_scenario_is_recorded() -> None:
    assert sorted(SCENARIOS) == sorted(RESULTS), (
        "tools/differential/torchrl_results.json is out of date: run "
        "`.venv/bin/python tools/differential/run.py record`"
    )


def test_lists_name_real_entries() -> None:
    assert set(OPEN) <= set(SCENARIOS) - SLOW, sorted(set(OPEN) - (set(SCENARIOS) - SLOW))
    for sid, entry in ALLOW.items():
        assert sid in SCENARIOS, sid
        assert entry.get("reason") and entry.get("paths"), sid
    names = {e["name"] for e in KWARGS["entries"]}
    assert set(OPEN_KWARGS) <= names, sorted(set(OPEN_KWARGS) - names)
    for name, entry in KWARGS["allow"].items():
        assert name in names and entry.get("reason") and entry.get("keys"), name


# Scenarios that start worker processes take seconds each on 2 cores: `run.py report --slow`
# checks them, this test does not (registry.SLOW; their differences are listed in the report).
@pytest.mark.parametrize(
    "sid",
    [pytest.param(s, marks=_marks(s, OPEN), id=s) for s in sorted(RESULTS) if s not in SLOW],
)
def test_scenario(sid: str, tdrl_lib: Any) -> None:
    got = encode(run_one(sid, tdrl_lib))
    lines = [line for line in diff(RESULTS[sid], got) if not _allowed(sid, line)]
    assert not lines, f"{sid} differs from TorchRL:\n" + "\n".join(lines)


# ---------------------------------------------------------------- **kwargs


def _kwargs_entries_in_api() -> list[tuple[str, str]]:
    found = []
    for entry in API["names"]:
        found += [
            (entry["name"], p["name"])
            for p in entry.get("params", [])
            if p["kind"] == "var-keyword"
        ]
        for member, info in (entry.get("members") or {}).items():
            found += [
                (f"{entry['name']}.{member}", p["name"])
                for p in info.get("params", [])
                if p["kind"] == "var-keyword"
            ]
    return found


def test_kwargs_cover_the_api_list() -> None:
    recorded = [(e["name"], e["param"]) for e in KWARGS["entries"]]
    assert sorted(recorded) == sorted(_kwargs_entries_in_api())


def _tdrl_object(name: str) -> Any:
    """tdrl's counterpart of a TorchRL name (``torchrl.a.B`` or ``torchrl.a.B.method``)."""
    mapping = {e["name"]: e["tdrl"] for e in API["names"]}
    owner, _, member = name.rpartition(".")
    if name in mapping:
        owner, member = name, ""
    path = mapping[owner]
    module, _, attr = path.rpartition(".")
    obj = getattr(importlib.import_module(module), attr)
    return getattr(obj, member) if member else obj


def _accepts(target: Any, key: str) -> bool:
    """Whether ``target`` takes keyword ``key`` (a parameter, or a ``**kwargs`` documenting it)."""
    func = target.__init__ if inspect.isclass(target) else target
    params = inspect.signature(func).parameters
    if key in params and params[key].kind in (
        inspect.Parameter.POSITIONAL_OR_KEYWORD,
        inspect.Parameter.KEYWORD_ONLY,
    ):
        return True
    var_kw = any(p.kind == inspect.Parameter.VAR_KEYWORD for p in params.values())
    doc = inspect.getdoc(target) or ""
    if inspect.isclass(target):
        doc += "\n" + (inspect.getdoc(func) or "")
    return var_kw and re.search(rf"\b{re.escape(key)}\b", doc) is not None


def _accepted_by(target: Any, key: str, entry: dict[str, Any]) -> bool:
    if _accepts(target, key):
        return True
    via = entry.get("via")
    if via is None or (via, key) in API_ALLOW:
        return via is not None
    base = _tdrl_object(via)
    func = target.__init__ if inspect.isclass(target) else target
    var_kw = any(
        p.kind == inspect.Parameter.VAR_KEYWORD for p in inspect.signature(func).parameters.values()
    )
    forwards = inspect.isclass(target) and issubclass(target, base) and target is not base
    return var_kw and forwards and _accepts(base, key)


def _key_fields(owner: Any) -> set[str]:
    keys = getattr(owner, "Keys", None)
    if keys is not None:
        return {f.name for f in dataclasses.fields(keys)}
    from tdrl.objectives.value import TD0Estimator

    estimator = TD0Estimator(gamma=0.9, value_network=None)  # estimators share ValueKeys
    return {f.name for f in dataclasses.fields(estimator.tensor_keys)}


ESTIMATORS = {"TD0": "TD0Estimator", "TD1": "TD1Estimator", "TDLambda": "TDLambdaEstimator"}
ESTIMATORS["GAE"] = "GAE"


def _missing(entry: dict[str, Any]) -> list[str]:
    name = entry["name"]
    owner = name.rpartition(".")[0]
    if (name, None) in API_ALLOW or (owner, None) in API_ALLOW:
        return []  # a name tdrl leaves out on purpose (the API list's reason)
    target = _tdrl_object(name)
    allowed = KWARGS["allow"].get(name, {}).get("keys", [])
    check = entry["check"]
    if check == "params":
        return [
            k
            for k in entry["accepted"]
            if k not in allowed
            and (owner, k) not in API_ALLOW
            and not _accepted_by(target, k, entry)
        ]
    if check == "keys":
        fields = _key_fields(_tdrl_object(owner))
        return [k for k in entry["accepted"] if k not in allowed and k not in fields]
    if check == "estimators":
        value = importlib.import_module("tdrl.objectives.value")
        return [
            f"{kind}.{k}"
            for kind, keys in entry["accepted"].items()
            for k in keys
            if f"{kind}.{k}" not in allowed
            and (f"torchrl.objectives.value.{ESTIMATORS[kind]}", k) not in API_ALLOW
            and not _accepts(getattr(value, ESTIMATORS[kind]), k)
        ]
    return CALL_CHECKS[name]()


def _call_composite() -> list[str]:
    from tdrl.specs import Composite, Unbounded

    spec = Composite(obs=Unbounded(shape=(2, 3)), batch_size=(2,))
    return [] if spec.shape == (2,) and "obs" in spec.keys() else ["entries by key / batch_size"]


def _call_primer() -> list[str]:
    from tdrl.envs import TensorDictPrimer
    from tdrl.specs import Unbounded

    primer = TensorDictPrimer(hidden=Unbounded(shape=(4,)), device="cpu")
    return [] if "hidden" in primer.primers.keys() else ["entries by key"]


def _call_env_creator() -> list[str]:
    from tdrl.envs import EnvCreator

    seen = {}

    def make(scale: float = 1.0) -> Any:
        from tdrl.testing import CountingEnv

        seen["scale"] = scale
        return CountingEnv()

    creator = EnvCreator(make, scale=3.0)
    creator()
    return [] if seen.get("scale") == 3.0 else ["create_env_fn keywords"]


def _call_gym_env() -> list[str]:
    from tdrl.envs import GymEnv

    env = GymEnv("Pendulum-v1", max_episode_steps=3)  # a keyword of gym.make
    try:
        rollout = env.rollout(3, break_when_any_done=False)
    finally:
        env.close()
    truncated = rollout["next", "truncated"].reshape(-1).tolist()
    return [] if truncated == [False, False, True] else ["gym.make keywords (max_episode_steps)"]


def _call_vmas() -> list[str]:
    pytest.importorskip("vmas")
    from tdrl.envs import VmasEnv

    env = VmasEnv("balance", num_envs=2, n_agents=3)
    try:
        agents = env.full_action_spec["agents", "action"].shape[-2]
    finally:
        env.close()
    return [] if agents == 3 else ["scenario keywords (n_agents)"]


def _call_reset() -> list[str]:
    from tdrl.envs import GymEnv

    env = GymEnv("Pendulum-v1")
    try:
        # gymnasium's Pendulum starts within +-x_init of upright when given the option
        cos = [env.reset(options={"x_init": 0.01, "y_init": 0.01})["observation"][0] for _ in "ab"]
    finally:
        env.close()
    return [] if min(cos) > 0.99 else ["reset keywords (options)"]


def _call_value_estimate() -> list[str]:
    """TorchRL passes the extra keywords to the value network: tdrl must take a ``**kwargs``."""
    from tdrl.objectives.value import GAE

    params = inspect.signature(GAE.value_estimate).parameters.values()
    if any(p.kind == inspect.Parameter.VAR_KEYWORD for p in params):
        return []
    return ["**kwargs for the value network"]


CALL_CHECKS = {
    "torchrl.data.Composite": _call_composite,
    "torchrl.envs.TensorDictPrimer": _call_primer,
    "torchrl.envs.EnvCreator": _call_env_creator,
    "torchrl.envs.GymEnv": _call_gym_env,
    "torchrl.envs.VmasEnv": _call_vmas,
    "torchrl.envs.EnvBase.reset": _call_reset,
}
for _entry in KWARGS["entries"]:
    if _entry["name"].endswith(".value_estimate"):
        CALL_CHECKS[_entry["name"]] = _call_value_estimate


@pytest.mark.parametrize(
    "name",
    [
        pytest.param(e["name"], marks=_marks(e["name"], OPEN_KWARGS), id=e["name"])
        for e in KWARGS["entries"]
    ],
)
def test_kwargs(name: str) -> None:
    entry = next(e for e in KWARGS["entries"] if e["name"] == name)
    missing = _missing(entry)
    assert not missing, (
        f"{name}: TorchRL forwards **{entry['param']} to {entry['forwarded_to']}; "
        f"tdrl does not accept {missing}"
    )
