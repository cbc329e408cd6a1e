"""Losses on batches with validity masks, in TorchRL and tdrl: loss values and gradients.

TorchRL 0.14.1's losses reduce every ``loss_*`` term over the positions its validity masks
mark valid (``("collector", "mask")``, ``"shifted_valid"``, ANDed; ``loss_mask_key`` picks
them). Each case in ``CASES`` builds a loss and a masked batch against ``lib`` with the loss
scenarios' seeded networks and weights (``scenarios/losses.py``); :func:`evaluate` returns
every ``loss_*`` term and its gradient with respect to every network's parameters.

``record`` runs every case on TorchRL (in the throwaway venv, never a tdrl dependency) and
writes ``torchrl_masked_losses.json`` beside this file; ``tests/objectives/test_loss_masks.py``
runs the cases on tdrl and compares with it::

    /tmp/trl-venv/bin/python tools/differential/masked_losses.py record
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

HERE = Path(__file__).resolve().parent
if __name__ == "__main__":  # run as a script: make ``differential`` importable
    sys.path.insert(0, str(HERE.parent))

from differential.offline_losses import _diff, _leaves, _tensor  # noqa: E402
from differential.scenarios._common import mlp, rand  # noqa: E402
from differential.scenarios.losses import (  # noqa: E402
    ACT,
    NETWORKS,
    OBS,
    N,
    data,
    det_actor,
    discrete_actor,
    pg_data,
    prob_actor,
    qnet,
    qvalue_actor,
    set_weights,
    vnet,
)

RESULTS = HERE / "torchrl_masked_losses.json"
TORCHRL_VERSION = "0.14.1"
B = 6
COLLECTOR = [True, False, True, True, False, True]
SHIFTED = [True, True, True, True, False, True]
Case = Callable[[Any], tuple[Any, TensorDict]]
CASES: dict[str, Case] = {}
# Terms left out per loss: SAC's temperature loss reads log-probs of near-deterministic
# actions (scale 1e-6), whose values depend on each library's sampling code.
SKIP: dict[str, tuple[str, ...]] = {"SACLoss": ("loss_alpha",)}


def _masked(td: TensorDict, mask: str) -> TensorDict:
    """``td`` with the masks ``mask`` names (``collector``, ``shifted``, ``both``, ``custom``)."""
    if mask in ("collector", "both"):
        td.set(("collector", "mask"), torch.tensor(COLLECTOR))
    if mask in ("shifted", "both"):
        td.set("shifted_valid", torch.tensor(SHIFTED).unsqueeze(-1))
    if mask == "custom":
        td.set(("my", "valid"), torch.tensor(SHIFTED))
        td.set(("collector", "mask"), torch.tensor(COLLECTOR))
    return td


def _register(name: str, build: Callable[[Any], Any], batch: Callable[[Any, Any], TensorDict]):
    for mask in ("collector", "shifted", "both"):

        def make(lib: Any, mask: str = mask) -> tuple[Any, TensorDict]:
            loss = build(lib)
            return loss, _masked(batch(lib, loss), mask)

        CASES[f"{name}/{mask}"] = make


def _offpolicy(discrete: bool) -> Callable[[Any, Any], TensorDict]:
    return lambda lib, loss: data(discrete=discrete)


def _pg(lib: Any, loss: Any) -> TensorDict:
    return pg_data(lib, loss.actor_network, True)


def _action_values(seed: int, out_key: str) -> TensorDictModule:
    return TensorDictModule(
        mlp([OBS, 8, N], seed=seed), in_keys=["observation"], out_keys=[out_key]
    )


_BOUNDS = {"low": -1.0, "high": 1.0, "shape": (ACT,)}
_register(
    "DQNLoss",
    lambda lib: lib.objectives.DQNLoss(qvalue_actor(lib), action_space="one_hot"),
    _offpolicy(True),
)
_register(
    "DiscreteCQLLoss",
    lambda lib: lib.objectives.DiscreteCQLLoss(qvalue_actor(lib), action_space="one_hot"),
    _offpolicy(True),
)
_register(
    "DDPGLoss",
    lambda lib: lib.objectives.DDPGLoss(det_actor(lib), qnet(lib, 7)),
    _offpolicy(False),
)
_register(
    "TD3Loss",
    lambda lib: lib.objectives.TD3Loss(
        det_actor(lib), qnet(lib, 7), action_spec=lib.data.Bounded(**_BOUNDS), policy_noise=0.0
    ),
    _offpolicy(False),
)
_register(
    "TD3BCLoss",
    lambda lib: lib.objectives.TD3BCLoss(
        det_actor(lib), qnet(lib, 7), action_spec=lib.data.Bounded(**_BOUNDS), policy_noise=0.0
    ),
    _offpolicy(False),
)
_register(
    "SACLoss",
    # Tiny fixed scale: the sampled actions are tanh(loc) up to 1e-6 in both libraries.
    lambda lib: lib.objectives.SACLoss(
        prob_actor(lib, fixed_scale=1e-6), qnet(lib, 7), alpha_init=1e-9, fixed_alpha=True
    ),
    _offpolicy(False),
)
_register(
    "DiscreteSACLoss",
    lambda lib: lib.objectives.DiscreteSACLoss(
        discrete_actor(lib),
        _action_values(8, "action_value"),
        num_actions=N,
        action_space="one-hot",
    ),
    _offpolicy(True),
)
_register(
    "IQLLoss",
    lambda lib: lib.objectives.IQLLoss(prob_actor(lib), qnet(lib, 7), vnet(lib, 9)),
    _offpolicy(False),
)
_register(
    "DiscreteIQLLoss",
    lambda lib: lib.objectives.DiscreteIQLLoss(
        discrete_actor(lib),
        _action_values(8, "state_action_value"),
        vnet(lib, 9),
        action_space="one-hot",
    ),
    _offpolicy(True),
)
for _cls in ("ClipPPOLoss", "PPOLoss", "A2CLoss"):
    _register(
        _cls,
        lambda lib, cls=_cls: getattr(lib.objectives, cls)(
            prob_actor(lib, "IndependentNormal"), vnet(lib, 9), entropy_coeff=0.05
        ),
        _pg,
    )
_register(
    "ReinforceLoss",
    lambda lib: lib.objectives.ReinforceLoss(
        prob_actor(lib, "IndependentNormal"), critic_network=vnet(lib, 9)
    ),
    _pg,
)


def _case(name: str) -> Callable[[Case], Case]:
    def register(f: Case) -> Case:
        CASES[name] = f
        return f

    return register


@_case("DQNLoss/collector_priority_weight")
def _dqn_weighted(lib: Any) -> tuple[Any, TensorDict]:
    loss = lib.objectives.DQNLoss(qvalue_actor(lib), action_space="one_hot")
    td = _masked(data(discrete=True), "collector")
    td.set("priority_weight", torch.linspace(0.2, 1.0, B))
    return loss, td


@_case("SACLoss/collector_priority_weight")
def _sac_weighted(lib: Any) -> tuple[Any, TensorDict]:
    loss, td = CASES["SACLoss/collector"](lib)
    td.set("priority_weight", torch.linspace(0.2, 1.0, B))
    return loss, td


@_case("DQNLoss/custom_key")
def _dqn_custom(lib: Any) -> tuple[Any, TensorDict]:
    loss = lib.objectives.DQNLoss(qvalue_actor(lib), action_space="one_hot")
    loss.loss_mask_key = ("my", "valid")
    return loss, _masked(data(discrete=True), "custom")


@_case("DQNLoss/mask_key_none")
def _dqn_none(lib: Any) -> tuple[Any, TensorDict]:
    loss = lib.objectives.DQNLoss(qvalue_actor(lib), action_space="one_hot")
    loss.loss_mask_key = None
    return loss, _masked(data(discrete=True), "both")


@_case("ClipPPOLoss/normalize_advantage_shifted")
def _ppo_norm(lib: Any) -> tuple[Any, TensorDict]:
    actor = prob_actor(lib, "IndependentNormal")
    loss = lib.objectives.ClipPPOLoss(actor, vnet(lib, 9), normalize_advantage=True)
    td = pg_data(lib, actor, True)
    td.set("advantage", rand(B, 1, seed=14) * 3 + 1)
    return loss, _masked(td, "shifted")


@_case("ClipPPOLoss/time_batch_collector")
def _ppo_time(lib: Any) -> tuple[Any, TensorDict]:
    actor = prob_actor(lib, "IndependentNormal")
    loss = lib.objectives.ClipPPOLoss(actor, vnet(lib, 9))
    td = pg_data(lib, actor, True).reshape(2, 3)
    td.set(("collector", "mask"), torch.tensor([[True, True, True], [True, False, False]]))
    return loss, td


# ------------------------------------------------------------------------------ running
def evaluate(loss: Any, td: TensorDict, skip: tuple[str, ...] = ()) -> dict[str, Any]:
    """Every ``loss_*`` term but ``skip`` and its gradients w.r.t. every network's parameters."""
    set_weights(loss)
    params: dict[str, list[torch.Tensor]] = {}
    for name in NETWORKS:
        try:
            found = getattr(loss, f"{name}_params", None)
        except (AttributeError, RuntimeError):
            found = None
        if found is not None:
            params[name] = _leaves(found)
    torch.manual_seed(1)
    out = loss(td)
    terms = sorted(
        k for k in out.keys() if (k == "loss" or k.startswith("loss_")) and k not in skip
    )
    result: dict[str, Any] = {"outputs": {k: _tensor(out.get(k)) for k in terms}, "grads": {}}
    for term in terms:
        value = out.get(term)
        if not value.requires_grad:
            continue
        for name, leaves in params.items():
            grads = torch.autograd.grad(value, leaves, retain_graph=True, allow_unused=True)
            result["grads"][f"{term}/{name}"] = [None if g is None else _tensor(g) for g in grads]
    return result


def recorded() -> dict[str, Any]:
    """TorchRL's results of every case (``torchrl_masked_losses.json``)."""
    return json.loads(RESULTS.read_text())["results"]


def differences(name: str, tol: float = 1e-5) -> list[str]:
    """What differs between tdrl's result of case ``name`` and TorchRL's recorded one."""
    from differential.lib import load

    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        loss, td = CASES[name](load("tdrl"))
    got = evaluate(loss, td, SKIP.get(name.split("/")[0], ()))
    return _diff(recorded()[name], got, name, tol)


def main() -> None:
    if sys.argv[1:] != ["record"]:
        raise SystemExit(f"usage: {sys.argv[0]} record (with TorchRL's python)")
    from differential.lib import load

    lib = load("torchrl")
    torch.set_num_threads(1)
    results = {}
    for name in sorted(CASES):
        torch.manual_seed(0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            loss, td = CASES[name](lib)
            results[name] = evaluate(loss, td, SKIP.get(name.split("/")[0], ()))
    head = {"generator": "tools/differential/masked_losses.py record", "torchrl": TORCHRL_VERSION}
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
