"""On-policy loss benchmarks: PPO, A2C and REINFORCE beside plain PyTorch doing the same work.

One round is a full training step on a batch of 1024 transitions (observation dim 17, a 6-dim
continuous action from an ``IndependentNormal`` policy, MLPs 2 x 64, advantages and value
targets already in the batch): loss forward, backward and an Adam step. Each group holds the
tdrl loss and a hand-written plain version ("raw": the same networks as plain ``nn.Module``
objects, the same math and the diagnostics tdrl returns: TorchRL's), so the ratio raw / tdrl is
visible in one run::

    .venv/bin/python -m pytest benchmarks/test_losses.py --benchmark-enable -p no:cacheprovider

``benchmarks/conftest.py`` pins one intra-op thread. ``test_raw_matches_tdrl`` checks that
both versions compute the same loss and gradients, so the baselines stay honest.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule
from torch import nn
from torch.distributions import Normal
from torch.nn.functional import softplus

from tdrl.modules import (
    MLP,
    IndependentNormal,
    NormalParamExtractor,
    ProbabilisticActor,
    ValueOperator,
)
from tdrl.objectives import A2CLoss, ClipPPOLoss, ReinforceLoss

BATCH, OBS, ACT, HIDDEN = 1024, 17, 6, 64
CLIP, ENTROPY_COEF, LR = 0.2, 0.01, 3e-4
# NormalParamExtractor's default "biased_softplus_1.0" (TorchRL's): softplus(x + shift) + 0.01,
# the shift chosen so that a zero input gives a scale of 1.
SCALE_MIN = 0.01
SCALE_SHIFT = float(torch.log(torch.expm1(torch.tensor(1.0 - SCALE_MIN))))
SCALE_LB = 1e-4

Step = Callable[[], torch.Tensor]


def _batch() -> TensorDict:
    gen = torch.Generator().manual_seed(0)
    return TensorDict(
        observation=torch.randn(BATCH, OBS, generator=gen),
        action=torch.randn(BATCH, ACT, generator=gen),
        action_log_prob=-8.0 + torch.randn(BATCH, generator=gen),
        advantage=torch.randn(BATCH, 1, generator=gen),
        value_target=torch.randn(BATCH, 1, generator=gen),
        batch_size=[BATCH],
    )


def _mlps() -> tuple[MLP, MLP]:
    torch.manual_seed(0)
    policy = MLP(OBS, 2 * ACT, num_cells=[HIDDEN, HIDDEN], activation=nn.Tanh)
    value = MLP(OBS, 1, num_cells=[HIDDEN, HIDDEN], activation=nn.Tanh)
    return policy, value


def _plain_copy(mlp: MLP) -> nn.Sequential:
    """The same layers as a plain ``nn.Sequential`` holding a copy of the weights."""
    sizes = [m.in_features for m in mlp if isinstance(m, nn.Linear)] + [mlp[-1].out_features]
    layers: list[nn.Module] = []
    for i in range(len(sizes) - 1):
        layers += [nn.Linear(sizes[i], sizes[i + 1]), nn.Tanh()]
    plain = nn.Sequential(*layers[:-1])
    plain.load_state_dict(mlp.state_dict())
    return plain


# ----------------------------------------------------------------- tdrl
def _tdrl_loss(kind: str) -> nn.Module:
    policy, value = _mlps()
    actor = ProbabilisticActor(
        TensorDictModule(
            nn.Sequential(policy, NormalParamExtractor()), ["observation"], ["loc", "scale"]
        ),
        ["loc", "scale"],
        distribution_class=IndependentNormal,
        return_log_prob=True,
    )
    critic = ValueOperator(value)
    if kind == "ppo":
        return ClipPPOLoss(
            actor,
            critic,
            clip_epsilon=CLIP,
            entropy_coeff=ENTROPY_COEF,
            loss_critic_type="l2",
            normalize_advantage=True,
        )
    if kind == "a2c":
        return A2CLoss(actor, critic, entropy_coeff=ENTROPY_COEF, loss_critic_type="l2")
    return ReinforceLoss(actor)  # no critic, no entropy bonus: the classic estimator


def _tdrl_step(kind: str) -> tuple[Step, nn.Module]:
    loss, batch = _tdrl_loss(kind), _batch()
    keys = [key for key in loss(batch).keys() if key.startswith("loss_")]
    optim = torch.optim.Adam(loss.parameters(), lr=LR)

    def step() -> torch.Tensor:
        out = loss(batch)
        # Summed without a leading 0 (Python's sum would add one more autograd node).
        total = functools.reduce(operator.add, [out[key] for key in keys])
        optim.zero_grad()
        total.backward()
        optim.step()
        return total

    return step, loss


# ----------------------------------------------------------------- plain PyTorch
def _raw_terms(
    kind: str, policy: nn.Module, value: nn.Module, data: dict[str, torch.Tensor]
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The tdrl losses written out: the summed loss and the diagnostics tdrl returns too."""
    loc, raw_scale = policy(data["observation"]).chunk(2, -1)
    scale = (softplus(raw_scale + SCALE_SHIFT) + SCALE_MIN).clamp_min(SCALE_LB)
    dist = Normal(loc, scale, validate_args=False)
    log_prob = dist.log_prob(data["action"]).sum(-1, keepdim=True)
    advantage = data["advantage"]
    logs: dict[str, torch.Tensor] = {}
    if kind == "ppo":
        advantage = (advantage - advantage.mean()) / advantage.std().clamp_min(1e-6)
        diff = log_prob - data["action_log_prob"].unsqueeze(-1)
        ratio = diff.exp()
        gain = torch.minimum(ratio * advantage, ratio.clamp(1 - CLIP, 1 + CLIP) * advantage)
        total = -gain.mean()
        with torch.no_grad():  # TorchRL's (and tdrl's) ClipPPOLoss diagnostics
            logs["kl_approx"] = (-diff).mean()
            logs["clip_fraction"] = ((ratio - 1).abs() > CLIP).float().mean()
            lw = diff.squeeze(-1)  # effective sample size of the ratios, over the batch
            logs["ESS"] = (2 * lw.logsumexp(0) - (2 * lw).logsumexp(0)).exp() / lw.shape[0]
            logs["max_ratio"] = ratio.max()
            logs["mean_ratio"] = ratio.mean()
    else:
        total = -(log_prob * advantage).mean()
    if kind == "reinforce":
        return total, logs
    entropy = dist.entropy().sum(-1).mean()
    total = total - ENTROPY_COEF * entropy
    v, target = value(data["observation"]), data["value_target"]
    total = total + (v - target).pow(2).mean()  # "l2": the full squared error
    logs["entropy"] = entropy.detach()
    if kind == "ppo":  # TorchRL's PPO logs it (A2C not): population variances over the batch
        with torch.no_grad():
            eps = torch.finfo(target.dtype).eps
            resid = (target - v).var(0, correction=0)
            logs["explained_variance"] = 1 - resid / (target.var(0, correction=0) + eps)
    return total, logs


def _raw_step(kind: str) -> tuple[Step, nn.Module]:
    mlp_policy, mlp_value = _mlps()
    policy, value = _plain_copy(mlp_policy), _plain_copy(mlp_value)
    nets = nn.ModuleList([policy] if kind == "reinforce" else [policy, value])
    data = {key: t for key, t in _batch().items()}
    optim = torch.optim.Adam(nets.parameters(), lr=LR)

    def step() -> torch.Tensor:
        total, _ = _raw_terms(kind, policy, value, data)
        optim.zero_grad()
        total.backward()
        optim.step()
        return total

    return step, nets


# ----------------------------------------------------------------- benchmarks
KINDS = ["ppo", "a2c", "reinforce"]


@pytest.mark.parametrize("kind", KINDS)
def test_raw_matches_tdrl(kind: str) -> None:
    """Both versions give the same loss and move the weights the same way."""
    tdrl_step, tdrl_mod = _tdrl_step(kind)
    raw_step, raw_mod = _raw_step(kind)
    for _ in range(3):
        torch.testing.assert_close(tdrl_step(), raw_step())
    tdrl_params = [p for p in tdrl_mod.parameters() if p.requires_grad]
    torch.testing.assert_close(tdrl_params, list(raw_mod.parameters()))
    # the raw version also computes every diagnostic tdrl returns, with the same values
    batch = _batch()
    out = tdrl_mod(batch)
    policy, value = [*raw_mod, None][:2]
    _, logs = _raw_terms(kind, policy, value, dict(batch.items()))
    diagnostics = sorted(k for k in out.keys() if not k.startswith("loss_"))
    assert sorted(logs) == diagnostics
    for key in diagnostics:
        torch.testing.assert_close(out[key].detach(), logs[key], msg=key)


@pytest.mark.parametrize("impl", ["tdrl", "raw"])
@pytest.mark.benchmark(group="loss_ppo_clip_1024")
def test_ppo(benchmark, impl: str) -> None:
    step, _ = (_tdrl_step if impl == "tdrl" else _raw_step)("ppo")
    benchmark(step)


@pytest.mark.parametrize("impl", ["tdrl", "raw"])
@pytest.mark.benchmark(group="loss_a2c_1024")
def test_a2c(benchmark, impl: str) -> None:
    step, _ = (_tdrl_step if impl == "tdrl" else _raw_step)("a2c")
    benchmark(step)


@pytest.mark.parametrize("impl", ["tdrl", "raw"])
@pytest.mark.benchmark(group="loss_reinforce_1024")
def test_reinforce(benchmark, impl: str) -> None:
    step, _ = (_tdrl_step if impl == "tdrl" else _raw_step)("reinforce")
    benchmark(step)
