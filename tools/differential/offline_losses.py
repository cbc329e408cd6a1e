"""BCLoss and TD3BCLoss on the same weights and data in TorchRL and tdrl: loss values and gradients.

Each case in ``CASES`` builds a loss and a batch against ``lib`` (see ``lib.py``): plain torch
networks with seeded weights (identical in both libraries), and after the loss is built every
parameter set it holds is made the same in both (ensembles filled with seeded values, target
copies moved off the live weights by an element-wise map). :func:`evaluate` runs the loss after
``torch.manual_seed(1)`` (TD3+BC's target noise is then the same draw) and returns every output
entry, the ``"td_error"`` written into the batch and the gradient of each ``loss_*`` term with
respect to every parameter of the actor and the critics (in leaf order).

``record`` runs every case on TorchRL 0.14.1 (in the throwaway venv, never a tdrl dependency)
and writes ``torchrl_offline_losses.json`` beside this file; ``tests/objectives/test_bc.py`` and
``test_td3_bc.py`` run the cases on tdrl and compare with it to 1e-6::

    /tmp/trl-venv/bin/python tools/differential/offline_losses.py record
"""

from __future__ import annotations

import json
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule
from torch import nn

HERE = Path(__file__).resolve().parent
if __name__ == "__main__":  # run as a script: make ``differential`` importable
    sys.path.insert(0, str(HERE.parent))

from differential.scenarios._common import fill_, mlp, rand  # noqa: E402
from differential.scenarios.losses import ACT, OBS, QNet, data  # noqa: E402

RESULTS = HERE / "torchrl_offline_losses.json"
TORCHRL_VERSION = "0.14.1"
B, N = 6, 4
Case = Callable[[Any], tuple[Any, TensorDict]]
CASES: dict[str, Case] = {}


def case(name: str) -> Callable[[Case], Case]:
    def register(f: Case) -> Case:
        CASES[name] = f
        return f

    return register


# ------------------------------------------------------------------------------ pieces
def batch(**extra: Any) -> TensorDict:
    """The loss scenarios' transitions, with ``extra`` entries."""
    td = data()
    for key, value in extra.items():
        td.set(key, value)
    return td


def det_actor(lib: Any, out_key: Any = "action") -> Any:
    return lib.modules.Actor(
        mlp([OBS, 8, ACT], seed=3), in_keys=["observation"], out_keys=[out_key]
    )


def prob_actor(lib: Any) -> Any:
    net = nn.Sequential(mlp([OBS, 8, 2 * ACT], seed=5), lib.modules.NormalParamExtractor())
    module = TensorDictModule(net, in_keys=["observation"], out_keys=["loc", "scale"])
    return lib.modules.ProbabilisticActor(
        module,
        in_keys=["loc", "scale"],
        distribution_class=lib.modules.TanhNormal,
        spec=lib.data.Bounded(-1.0, 1.0, (ACT,)),
    )


def spec(lib: Any) -> Any:
    return lib.data.Bounded(-torch.ones(ACT), torch.ones(ACT), (ACT,))


def critics(lib: Any) -> list[Any]:
    return [
        lib.modules.ValueOperator(QNet(seed), in_keys=["observation", "action"]) for seed in (7, 8)
    ]


def move_targets(loss: Any) -> None:
    """Target copies off the live weights, the same element-wise map in both libraries."""
    for name in ("actor_network", "qvalue_network"):
        target = getattr(loss, f"target_{name}_params", None)
        live = getattr(loss, f"{name}_params")
        if target is None or _shares(live, target):
            continue
        with torch.no_grad():
            for key in target.keys(True, True):
                target.get(key).mul_(0.9).add_(0.05)


def _shares(a: Any, b: Any) -> bool:
    x = [a.get(k) for k in a.keys(True, True)]
    y = [b.get(k) for k in b.keys(True, True)]
    return all(p.data_ptr() == q.data_ptr() for p, q in zip(x, y, strict=True))


# ------------------------------------------------------------------------------ BC cases
def _bc(loss_kwargs: dict[str, Any], actor: str = "det") -> Case:
    def build(lib: Any) -> tuple[Any, TensorDict]:
        net = det_actor(lib) if actor == "det" else prob_actor(lib)
        return lib.objectives.BCLoss(net, **loss_kwargs), batch()

    return build


for _name, _kwargs, _actor in [
    ("default", {}, "det"),
    ("l1", {"loss_function": "l1"}, "det"),
    ("l2", {"loss_function": "l2"}, "det"),
    ("mse", {"loss_function": "mse"}, "det"),
    ("smooth_l1", {"loss_function": "smooth_l1"}, "det"),
    ("sum", {"reduction": "sum"}, "det"),
    ("none", {"reduction": "none"}, "det"),
    ("prob_nll", {}, "prob"),
    ("prob_nll_none", {"reduction": "none"}, "prob"),
    ("prob_nll_sum", {"reduction": "sum"}, "prob"),
    ("prob_l2", {"loss_function": "l2"}, "prob"),
]:
    case(f"bc/{_name}")(_bc(_kwargs, _actor))


def _logits_actor(lib: Any) -> Any:
    return TensorDictModule(mlp([OBS, 8, N], seed=4), in_keys=["observation"], out_keys=["action"])


@case("bc/discrete_index")
def _bc_discrete(lib: Any) -> tuple[Any, TensorDict]:
    data = batch(action=torch.tensor([0, 1, 2, 3, 1, 0]))
    return lib.objectives.BCLoss(_logits_actor(lib)), data


@case("bc/cross_entropy_trailing_dim")
def _bc_cross_entropy(lib: Any) -> tuple[Any, TensorDict]:
    data = batch(action=torch.tensor([[3], [1], [2], [0], [1], [2]]))
    return lib.objectives.BCLoss(_logits_actor(lib), loss_function="cross_entropy"), data


def _chunk(reduction: str) -> Case:
    def build(lib: Any) -> tuple[Any, TensorDict]:
        net = nn.Sequential(mlp([OBS, 8, 2 * ACT], seed=6), nn.Unflatten(-1, (2, ACT)))
        actor = TensorDictModule(net, in_keys=["observation"], out_keys=[("vla_action", "chunk")])
        loss = lib.objectives.BCLoss(actor, loss_function="l1", reduction=reduction)
        loss.set_keys(action=("vla_action", "chunk"), pad_mask="action_is_pad")
        pad = torch.tensor([[False, False], [False, True]] * 3)
        data = batch(action_is_pad=pad)
        data.set(("vla_action", "chunk"), rand(B, 2, ACT, seed=14))
        return loss, data

    return build


case("bc/pad_mask_mean")(_chunk("mean"))
case("bc/pad_mask_none")(_chunk("none"))
case("bc/pad_mask_sum")(_chunk("sum"))


def _collector_mask(reduction: str) -> Case:
    def build(lib: Any) -> tuple[Any, TensorDict]:
        mask = torch.tensor([True, False, True, True, False, True])
        data = batch()
        data.set(("collector", "mask"), mask)
        return lib.objectives.BCLoss(det_actor(lib), reduction=reduction), data

    return build


case("bc/collector_mask_mean")(_collector_mask("mean"))
case("bc/collector_mask_none")(_collector_mask("none"))


@case("bc/actor_writes_action_legacy")
def _bc_legacy(lib: Any) -> tuple[Any, TensorDict]:
    loss = lib.objectives.BCLoss(det_actor(lib), loss_function="l2")
    loss.set_keys(action="expert_action")
    data = batch()
    data.rename_key_("action", "expert_action")
    return loss, data


# ------------------------------------------------------------------------------ TD3+BC cases
def _td3bc(
    loss_kwargs: dict[str, Any],
    estimator: dict[str, Any] | None = None,
    kind: str = "TD0",
    **extra: Any,
) -> Case:
    def build(lib: Any) -> tuple[Any, TensorDict]:
        kwargs = {"action_spec": spec(lib), **loss_kwargs}
        loss = lib.objectives.TD3BCLoss(det_actor(lib), critics(lib), **kwargs)
        if estimator is not None:
            loss.make_value_estimator(getattr(lib.objectives.ValueEstimators, kind), **estimator)
        move_targets(loss)
        return loss, batch(**extra)

    return build


case("td3bc/default")(_td3bc({}))
case("td3bc/l2_alpha1")(_td3bc({"loss_function": "l2", "alpha": 1.0}))
case("td3bc/l1_no_targets")(
    _td3bc({"loss_function": "l1", "delay_actor": False, "delay_qvalue": False})
)
case("td3bc/bounds_noise")(
    _td3bc({"action_spec": None, "bounds": (-0.5, 0.5), "policy_noise": 0.4, "noise_clip": 0.3})
)
case("td3bc/priority_weight")(_td3bc({}, priority_weight=torch.linspace(0.2, 1.0, B)))
case("td3bc/gamma0.9")(_td3bc({"alpha": 5.0}, estimator={"gamma": 0.9}))
case("td3bc/td_lambda")(_td3bc({}, estimator={"gamma": 0.9, "lmbda": 0.8}, kind="TDLambda"))
case("td3bc/td1")(_td3bc({}, estimator={"gamma": 0.8}, kind="TD1"))


@case("td3bc/mlp_critic_copies")
def _td3bc_mlp(lib: Any) -> tuple[Any, TensorDict]:
    critic = lib.modules.ValueOperator(
        lib.modules.MLP(in_features=OBS + ACT, out_features=1, num_cells=[8]),
        in_keys=["observation", "action"],
    )
    loss = lib.objectives.TD3BCLoss(det_actor(lib), critic, bounds=(-1.0, 1.0), num_qvalue_nets=3)
    fill_(loss.qvalue_network_params, 21)
    target = loss.target_qvalue_network_params
    fill_(target, 22)
    return loss, batch()


# ------------------------------------------------------------------------------ running
def _leaves(params: Any) -> list[torch.Tensor]:
    return [params.get(k) for k in params.keys(True, True)]


def evaluate(loss: Any, td: TensorDict) -> dict[str, Any]:
    """Outputs, the written TD error and the gradients of each loss term (JSON-ready)."""
    params: dict[str, list[torch.Tensor]] = {}
    for name in ("actor_network", "qvalue_network"):
        try:
            params[name] = _leaves(getattr(loss, f"{name}_params"))
        except AttributeError:
            pass
    torch.manual_seed(1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = loss(td)
    result: dict[str, Any] = {
        "outputs": {k: _tensor(out.get(k)) for k in sorted(out.keys())},
        "td_error": _tensor(td.get("td_error")) if "td_error" in td.keys() else None,
        "future_warning": any(issubclass(w.category, FutureWarning) for w in caught),
        "grads": {},
    }
    for term in sorted(k for k in out.keys() if k.startswith("loss_")):
        value = out.get(term)
        if not value.requires_grad:
            continue
        if value.ndim:  # reduction="none": the gradient of the sum
            value = value.sum()
        for name, leaves in params.items():
            grads = torch.autograd.grad(value, leaves, retain_graph=True, allow_unused=True)
            result["grads"][f"{term}/{name}"] = [None if g is None else _tensor(g) for g in grads]
    return result


def _tensor(t: torch.Tensor) -> dict[str, Any]:
    t = t.detach()
    return {"shape": list(t.shape), "dtype": str(t.dtype), "values": t.double().flatten().tolist()}


def recorded() -> dict[str, Any]:
    """TorchRL's results of every case (``torchrl_offline_losses.json``)."""
    return json.loads(RESULTS.read_text())["results"]


def differences(name: str, tol: float = 1e-6) -> list[str]:
    """What differs between tdrl's result of case ``name`` and TorchRL's recorded one."""
    from differential.lib import load

    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        loss, td = CASES[name](load("tdrl"))
    return _diff(recorded()[name], evaluate(loss, td), name, tol)


def _diff(expected: Any, got: Any, path: str, tol: float) -> list[str]:
    if isinstance(expected, dict) and "values" in expected:
        if not isinstance(got, dict) or "values" not in got:
            return [f"{path}: expected a tensor, got {got!r}"]
        if (expected["shape"], expected["dtype"]) != (got["shape"], got["dtype"]):
            return [
                f"{path}: {got['shape']} {got['dtype']} != {expected['shape']} {expected['dtype']}"
            ]
        a, b = torch.tensor(got["values"]), torch.tensor(expected["values"])
        if a.shape != b.shape or not torch.allclose(a, b, rtol=tol, atol=tol):
            return [f"{path}: values differ by {(a - b).abs().max().item():.3g}"]
        return []
    if isinstance(expected, dict):
        if not isinstance(got, dict) or set(expected) != set(got):
            keys = sorted(got) if isinstance(got, dict) else got
            return [f"{path}: keys {keys} != {sorted(expected)}"]
        return [d for k in expected for d in _diff(expected[k], got[k], f"{path}/{k}", tol)]
    if isinstance(expected, list):
        if not isinstance(got, list) or len(got) != len(expected):
            return [f"{path}: {got!r} != {expected!r}"]
        return [d for i, e in enumerate(expected) for d in _diff(e, got[i], f"{path}[{i}]", tol)]
    return [] if expected == got else [f"{path}: {got!r} != {expected!r}"]


def run(lib_name: str) -> dict[str, Any]:
    from differential.lib import load

    lib = load(lib_name)
    torch.set_num_threads(1)
    results = {}
    for name in sorted(CASES):
        torch.manual_seed(0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            loss, td = CASES[name](lib)
        results[name] = evaluate(loss, td)
    return results


def main() -> None:
    if sys.argv[1:] != ["record"]:
        raise SystemExit(f"usage: {sys.argv[0]} record (with TorchRL's python)")
    results = run("torchrl")
    head = {"generator": "tools/differential/offline_losses.py record", "torchrl": TORCHRL_VERSION}
    lines = ["{", *(f" {json.dumps(k)}: {json.dumps(v)}," for k, v in head.items())]
    lines.append(' "results": {')
    items = list(results.items())
    for i, (name, value) in enumerate(items):
        comma = "," if i < len(items) - 1 else ""
        lines.append(f"  {json.dumps(name)}: {json.dumps(value, separators=(',', ':'))}{comma}")
    lines += [" }", "}"]
    RESULTS.write_text("\n".join(lines) + "\n")
    print(f"wrote {len(results)} cases to {RESULTS}")


if __name__ == "__main__":
    main()
