"""MAPPOLoss / IPPOLoss: TorchRL 0.14.1's numbers, defaults, value normalisation and errors."""

from __future__ import annotations

import inspect

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import NormalParamExtractor, TensorDictModule

from tdrl.modules import IndependentNormal, PopArtValueNorm, ProbabilisticActor, RunningValueNorm
from tdrl.objectives import ClipPPOLoss, IPPOLoss, MAPPOLoss, ValueEstimators
from tdrl.objectives.multiagent import IPPOLoss as PackageIPPOLoss
from tdrl.objectives.multiagent import MAPPOLoss as PackageMAPPOLoss
from tdrl.objectives.multiagent.mappo import IPPOLoss as ModuleIPPOLoss
from tdrl.objectives.multiagent.mappo import MAPPOLoss as ModuleMAPPOLoss
from tdrl.objectives.value import GAE, MultiAgentGAE

B, T, N, OBS, ACT = 2, 5, 3, 4, 2
VALUE = ("agents", "state_value")


class TeamCritic(torch.nn.Module):
    """Centralised: one linear map of the whole team's observations to one value per agent;
    decentralised: the same linear map of each agent's own observation."""

    def __init__(self, centralised: bool) -> None:
        super().__init__()
        self.centralised = centralised
        self.lin = torch.nn.Linear(N * OBS, N) if centralised else torch.nn.Linear(OBS, 1)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        if self.centralised:
            return self.lin(obs.flatten(-2)).unsqueeze(-1)
        return self.lin(obs)


def _fill(module: torch.nn.Module, g: torch.Generator) -> None:
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(0.5 * torch.randn(p.shape, generator=g))


def make_nets(centralised: bool) -> tuple[ProbabilisticActor, TensorDictModule]:
    g = torch.Generator().manual_seed(1)
    net = torch.nn.Sequential(torch.nn.Linear(OBS, 2 * ACT), NormalParamExtractor())
    _fill(net, g)
    actor = ProbabilisticActor(
        TensorDictModule(
            net, [("agents", "observation")], [("agents", "loc"), ("agents", "scale")]
        ),
        in_keys=[("agents", "loc"), ("agents", "scale")],
        out_keys=[("agents", "action")],
        distribution_class=IndependentNormal,
        return_log_prob=True,
    )
    critic_net = TeamCritic(centralised)
    _fill(critic_net, g)
    return actor, TensorDictModule(critic_net, [("agents", "observation")], [VALUE])


def make_data(seed: int = 2) -> TensorDict:
    """A ``[2, 5]`` batch of 3 agents: env 0 terminates at t=2, env 1 is truncated at t=4."""
    g = torch.Generator().manual_seed(seed)
    done = torch.zeros(B, T, 1, dtype=torch.bool)
    done[0, 2] = True
    done[1, 4] = True
    terminated = done.clone()
    terminated[1, 4] = False
    return TensorDict(
        {
            "agents": {
                "observation": torch.randn(B, T, N, OBS, generator=g),
                "action": torch.randn(B, T, N, ACT, generator=g),
                "action_log_prob": -3.0 + 0.5 * torch.randn(B, T, N, generator=g),
                "state_value": torch.randn(B, T, N, 1, generator=g),
            },
            "next": {
                "agents": {
                    "observation": torch.randn(B, T, N, OBS, generator=g),
                    "reward": torch.randn(B, T, N, 1, generator=g),
                    "state_value": torch.randn(B, T, N, 1, generator=g),
                },
                "reward": torch.randn(B, T, 1, generator=g),
                "done": done,
                "terminated": terminated,
            },
        },
        batch_size=[B, T],
    )


def make_loss(cls, centralised=True, keys=None, **kwargs):
    actor, critic = make_nets(centralised)
    loss = cls(actor, critic, **kwargs)
    loss.set_keys(value=VALUE, **(keys or {}))
    return loss


# Reference numbers: TorchRL 0.14.1 (torchrl.objectives.MAPPOLoss/IPPOLoss,
# torchrl.modules.ProbabilisticActor/IndependentNormal/PopArtValueNorm/RunningValueNorm) on the
# same networks and batches as above (built by the same code in a TorchRL venv, with
# set_keys(value=..., action=("agents", "action"), sample_log_prob=("agents", "action_log_prob"))),
# rounded to 4-5 decimals. advantage: loss.value_estimator(make_data())["advantage"][1, ..., 0].
TORCHRL_ADVANTAGE_ENV1 = {
    "mappo_team": [
        [3.0727, 11.4146, -8.6864],
        [9.2715, 10.1999, -8.4928],
        [8.4569, 7.8138, -5.8585],
        [7.5351, 4.4574, -2.9059],
        [5.0674, 4.5898, -2.891],
    ],
    "ippo_per_agent": [
        [-2.9532, -0.8818, 0.7809],
        [-2.307, 1.1285, 0.1694],
        [-0.9073, 1.0541, -0.9612],
        [-0.2984, 0.614, -0.2339],
        [-1.2086, 0.7981, -0.5843],
    ],
}
# (loss_objective, loss_critic, loss_entropy) of loss(make_data(2 + i)) for call i.
TORCHRL_LOSSES = {
    "mappo_team": [(0.20748, 4.32812, -0.0265)],
    "ippo_per_agent": [(0.24299, 0.69327, -0.0265)],
    "mappo_no_norm_adv": [(-0.09068, 4.32812, -0.0265)],
    "mappo_popart": [
        (0.20748, 0.6368, -0.0265),
        (0.22277, 0.4574, -0.02435),
        (0.21137, 0.5796, -0.02499),
    ],
}
CASES = {
    "mappo_team": (MAPPOLoss, True, None, {}),
    "ippo_per_agent": (IPPOLoss, False, {"reward": ("agents", "reward")}, {}),
    "mappo_no_norm_adv": (MAPPOLoss, True, None, {"normalize_advantage": False}),
    "mappo_popart": (MAPPOLoss, True, None, {"value_norm": PopArtValueNorm}),
}
TORCHRL_KEYS = [
    "ESS",
    "clip_fraction",
    "entropy",
    "explained_variance",
    "kl_approx",
    "loss_critic",
    "loss_entropy",
    "loss_objective",
    "max_ratio",
    "mean_ratio",
]


def _build(case):
    cls, centralised, keys, kwargs = CASES[case]
    kwargs = {k: (v(shape=1) if k == "value_norm" else v) for k, v in kwargs.items()}
    return make_loss(cls, centralised, keys, **kwargs)


@pytest.mark.parametrize("case", sorted(TORCHRL_ADVANTAGE_ENV1))
def test_advantage_matches_torchrl(case):
    loss = _build(case)
    with torch.no_grad():
        td = loss.value_estimator(make_data())
    assert isinstance(loss.value_estimator, MultiAgentGAE)
    assert td["advantage"].shape == (B, T, N, 1)
    expected = torch.tensor(TORCHRL_ADVANTAGE_ENV1[case])
    torch.testing.assert_close(td["advantage"][1, ..., 0], expected, atol=1e-3, rtol=0)


@pytest.mark.parametrize("case", sorted(TORCHRL_LOSSES))
def test_losses_match_torchrl(case):
    loss = _build(case)
    for i, (objective, critic, entropy) in enumerate(TORCHRL_LOSSES[case]):
        out = loss(make_data(2 + i))
        assert sorted(out.keys()) == TORCHRL_KEYS
        assert out["explained_variance"].shape == (T, N, 1)  # TorchRL's: over the first dim
        got = torch.stack([out["loss_objective"], out["loss_critic"], out["loss_entropy"]])
        want = torch.tensor([objective, critic, entropy])
        torch.testing.assert_close(got, want, atol=1e-4, rtol=0)


def test_running_value_norm_with_value_clipping_matches_torchrl():
    # The batch holds its advantage/value target and the collection-time values (so the stored
    # values, not the estimator's fresh ones, are clipped around). TorchRL 0.14.1 on the same
    # set-up (RunningValueNorm(shape=1), clip_value=0.1, loss_critic_type="l2"):
    # (loss_critic, value_clip_fraction) per call.
    expected = [(1.78883, 0.8), (1.10243, 0.86667)]
    loss = make_loss(
        MAPPOLoss, value_norm=RunningValueNorm(shape=1), clip_value=0.1, loss_critic_type="l2"
    )
    for i, (critic, clipped) in enumerate(expected):
        td = make_data(2 + i)
        stored = td["agents", "state_value"].clone()
        with torch.no_grad():
            loss.value_estimator(td)
        td["agents", "state_value"] = stored
        out = loss(td)
        got = torch.stack([out["loss_critic"], out["value_clip_fraction"]])
        torch.testing.assert_close(got, torch.tensor([critic, clipped]), atol=1e-4, rtol=0)


def test_value_norm_is_updated_with_raw_targets_and_is_a_submodule():
    norm = RunningValueNorm(shape=1)
    loss = make_loss(MAPPOLoss, value_norm=norm)
    td = make_data()
    with torch.no_grad():
        loss.value_estimator(td)
    loss(td)
    # After one update the normaliser maps the raw targets to zero mean (the targets of the
    # batch are what it saw).
    normalised = norm.normalize(td["value_target"])
    assert abs(float(normalised.mean())) < 1e-4
    assert any(name.startswith("value_norm.") for name in loss.state_dict())
    assert loss.value_norm is norm


def test_value_norm_critic_gradient_flows():
    loss = make_loss(MAPPOLoss, value_norm=PopArtValueNorm(shape=1))
    out = loss(make_data())
    out["loss_critic"].backward()
    grad = loss.critic_network.module.lin.weight.grad
    assert grad is not None and bool(grad.abs().sum() > 0)


def test_defaults_are_torchrl_s():
    for cls in (MAPPOLoss, IPPOLoss):
        params = inspect.signature(cls).parameters
        assert list(params)[:2] == ["actor_network", "critic_network"]
        assert params["value_norm"].default is None
        assert params["entropy_coeff"].default == 0.01
        assert params["normalize_advantage"].default is True
        assert params["normalize_advantage_exclude_dims"].default == (-2,)
    loss = make_loss(IPPOLoss, centralised=False)
    assert loss.default_value_estimator is ValueEstimators.MAGAE
    assert loss.normalize_advantage and loss.normalize_advantage_exclude_dims == (-2,)
    assert loss.entropy_coeff == 0.01 and loss.clip_epsilon == 0.2 and loss.value_norm is None
    assert isinstance(loss, ClipPPOLoss) and issubclass(IPPOLoss, MAPPOLoss)


def test_import_paths():
    assert PackageMAPPOLoss is ModuleMAPPOLoss is MAPPOLoss
    assert PackageIPPOLoss is ModuleIPPOLoss is IPPOLoss


def test_make_value_estimator_kinds_and_keys():
    loss = make_loss(MAPPOLoss)
    loss.make_value_estimator("MAGAE", gamma=0.5, agent_dim=-2)
    est = loss.value_estimator
    assert isinstance(est, MultiAgentGAE) and est.gamma == 0.5 and est.lmbda == 0.95
    assert est.tensor_keys.value == VALUE
    loss.make_value_estimator(ValueEstimators.GAE)
    assert type(loss.value_estimator) is GAE


def test_every_ppo_loss_builds_the_multi_agent_gae():
    # TorchRL's PPO losses (not only MAPPO/IPPO) accept ValueEstimators.MAGAE
    loss = make_loss(ClipPPOLoss)
    loss.make_value_estimator("MAGAE", gamma=0.5)
    est = loss.value_estimator
    assert type(est) is MultiAgentGAE and est.gamma == 0.5 and est.lmbda == 0.95


def test_bad_value_norm_raises():
    actor, critic = make_nets(True)
    with pytest.raises(TypeError, match=r"MAPPOLoss.__init__: value_norm is not a value normal"):
        MAPPOLoss(actor, critic, value_norm=torch.nn.Identity())
