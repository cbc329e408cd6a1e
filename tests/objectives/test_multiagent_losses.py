"""MADDPG and ISAC through DDPGLoss and SACLoss on ("agents", ...) keys with MultiAgentMLP
networks: numerics against plain references, and a tiny cooperative task they learn."""

from __future__ import annotations

import copy

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule
from torch import nn
from torch.func import functional_call

from tdrl.modules import (
    ExplorationType,
    MultiAgentMLP,
    NormalParamExtractor,
    ProbabilisticActor,
    TanhNormal,
    set_exploration_type,
)
from tdrl.objectives import DDPGLoss, SACLoss, SoftUpdate
from tdrl.testing import agents_keys, bind_stacked, make_transition_batch, perturb_

N, OBS, ACT, B = 3, 4, 2, 6
AGENTS = ("agents",)


def maddpg_actor() -> TensorDictModule:
    """Decentralised, one network per agent: own observation -> own action in [-1, 1]."""
    net = MultiAgentMLP(OBS, ACT, N, centralized=False, share_params=False, num_cells=[16])
    return TensorDictModule(
        nn.Sequential(net, nn.Tanh()), [("agents", "observation")], [("agents", "action")]
    )


def central_critic(share_params: bool) -> TensorDictModule:
    """Centralised: every agent's critic reads all agents' observations and actions."""
    net = MultiAgentMLP(
        OBS + ACT, 1, N, centralized=True, share_params=share_params, num_cells=[16]
    )
    keys = [("agents", "observation"), ("agents", "action")]
    return TensorDictModule(net, keys, [("agents", "state_action_value")])


def isac_actor() -> ProbabilisticActor:
    """Decentralised TanhNormal policy with parameters shared by the agents."""
    net = MultiAgentMLP(OBS, 2 * ACT, N, centralized=False, share_params=True, num_cells=[16])
    params = [("agents", "loc"), ("agents", "scale")]
    module = TensorDictModule(
        nn.Sequential(net, NormalParamExtractor()), [("agents", "observation")], params
    )
    return ProbabilisticActor(
        module,
        dict(zip(["loc", "scale"], params)),
        [("agents", "action")],
        distribution_class=TanhNormal,
    )


def independent_critic(centralized: bool = False) -> TensorDictModule:
    """Decentralised (ISAC): each agent's critic reads its own observation and action
    (``centralized=True``: all of them, MASAC)."""
    net = MultiAgentMLP(
        OBS + ACT, 1, N, centralized=centralized, share_params=False, num_cells=[16]
    )
    keys = [("agents", "observation"), ("agents", "action")]
    return TensorDictModule(net, keys, [("agents", "state_action_value")])


AGENT_KEYS = agents_keys("state_action_value", "reward", "done", "terminated")


def make_batch(batch=(B,), root_done=False) -> TensorDict:
    td = make_transition_batch(True, batch, obs=OBS, act=ACT, agents=N)
    if root_done:  # one done/terminated per world, shared by the agents
        nxt = td["next"]
        for name in ("done", "terminated"):
            nxt[name] = nxt["agents", name].any(-2)
            del nxt["agents", name]
    return td


def not_terminated(batch: TensorDict, root_done: bool) -> torch.Tensor:
    if root_done:
        return (~batch["next", "terminated"]).float().unsqueeze(-2)  # [*B, 1, 1]
    return (~batch["next", "agents", "terminated"]).float()


# ------------------------------------------------------------------ MADDPG
def plain_maddpg(actor, critic, t_actor, t_critic, batch, gamma, root_done):
    """Textbook MADDPG on tensors: returns (loss_actor, loss_value, td_error)."""
    obs, action = batch["agents", "observation"], batch["agents", "action"]
    next_obs = batch["next", "agents", "observation"]
    with torch.no_grad():
        next_q = t_critic(torch.cat([next_obs, t_actor(next_obs)], -1))
        y = batch["next", "agents", "reward"] + gamma * not_terminated(batch, root_done) * next_q
    q = critic(torch.cat([obs, action], -1))  # [*B, N, 1]
    loss_value = (q - y).pow(2).mean()
    td_error = (q - y).detach().pow(2).mean((-2, -1))  # one per joint transition
    frozen = {k: v.detach() for k, v in critic.named_parameters()}
    q_pi = functional_call(critic, frozen, (torch.cat([obs, actor(obs)], -1),))
    return -q_pi.mean(), loss_value, td_error


@pytest.mark.parametrize("share_params", [False, True])
@pytest.mark.parametrize("root_done", [False, True])
@pytest.mark.parametrize("batch", [(B,), (2, 3)])
def test_maddpg_matches_plain(share_params, root_done, batch):
    torch.manual_seed(0)
    actor, critic = maddpg_actor(), central_critic(share_params)
    loss = DDPGLoss(actor, critic, delay_actor=True, delay_value=True)
    keys = dict(AGENT_KEYS)
    if root_done:
        keys.update(done="done", terminated="terminated")
    loss.set_keys(**keys).make_value_estimator(gamma=0.9)
    perturb_(loss.actor_network_target_params, 0.3)
    perturb_(loss.value_network_target_params, 0.3)
    t_actor, t_critic = copy.deepcopy(actor), copy.deepcopy(critic)
    loss.actor_network_target_params.to_module(t_actor)
    loss.value_network_target_params.to_module(t_critic)
    data = make_batch(batch, root_done)
    out = loss(data)
    refs = plain_maddpg(
        actor.module, critic.module, t_actor.module, t_critic.module, data, 0.9, root_done
    )
    for name, ref in zip(("loss_actor", "loss_value", "td_error"), refs):
        torch.testing.assert_close(out[name], ref)
    for total, ref in zip((out["loss_actor"], out["loss_value"]), refs):
        params = [*actor.parameters(), *critic.parameters()]
        got = torch.autograd.grad(total, params, allow_unused=True)
        want = torch.autograd.grad(ref, params, allow_unused=True)
        for g, w in zip(got, want):
            assert (g is None) == (w is None)
            if g is not None:
                torch.testing.assert_close(g, w)


# A one-step cooperative task: agent i observes its one-hot id; the team earns
# -sum_i |a_i - GOAL_i|^2 / N, shared by every agent (a critic must see all actions).
GOAL = torch.tensor([[-0.5, 0.3], [0.0, -0.4], [0.5, 0.1]])
IDS = torch.eye(N, OBS)


def team_reward(actions: torch.Tensor) -> torch.Tensor:
    reward = -(actions - GOAL).pow(2).sum((-2, -1)) / N
    return reward[..., None, None].expand(*actions.shape[:-1], 1)


def one_step_batch(actions: torch.Tensor) -> TensorDict:
    batch = actions.shape[0]
    obs = IDS.expand(batch, N, OBS)
    done = torch.ones(batch, N, 1, dtype=torch.bool)
    return TensorDict(
        {
            "agents": {"observation": obs, "action": actions},
            "next": {
                "agents": {
                    "observation": obs,
                    "reward": team_reward(actions),
                    "done": done,
                    "terminated": done,
                }
            },
        },
        [batch],
    )


def policy_actions(actor, batch: int) -> torch.Tensor:
    td = TensorDict({"agents": {"observation": IDS.expand(batch, N, OBS)}}, [batch])
    return actor(td)["agents", "action"]


def greedy_reward(actor) -> float:
    with torch.no_grad(), set_exploration_type(ExplorationType.DETERMINISTIC):
        return float(team_reward(policy_actions(actor, 1)).mean())


def train(loss, actor, explore, steps: int = 100) -> tuple[float, float]:
    """Trains on fresh one-step batches; returns the greedy team reward before and after."""
    before = greedy_reward(actor)
    mine = {id(p) for p in actor.parameters()}
    others = [p for p in loss.parameters() if id(p) not in mine]
    optim = torch.optim.Adam([{"params": actor.parameters(), "lr": 1e-3}, {"params": others}], 1e-2)
    updater = SoftUpdate(loss, tau=0.05)
    for _ in range(steps):
        with torch.no_grad():
            actions = explore(64)
        out = loss(one_step_batch(actions))
        optim.zero_grad()
        sum(v for k, v in out.items() if k.startswith("loss_")).backward()
        optim.step()
        updater.step()
    return before, greedy_reward(actor)


def test_maddpg_learns_a_cooperative_task():
    torch.manual_seed(0)
    actor = maddpg_actor()
    loss = DDPGLoss(actor, central_critic(False), delay_actor=True).set_keys(**AGENT_KEYS)

    def explore(batch):
        action = policy_actions(actor, batch)
        return (action + 0.5 * torch.randn_like(action)).clamp(-1, 1)

    before, after = train(loss, actor, explore)
    assert after > -0.12 and after > before + 0.15, (before, after)  # the optimum is 0


# ------------------------------------------------------------------ ISAC
def plain_isac(actor, critics, t_critics, log_alpha, batch, gamma, target_entropy):
    """Textbook SAC per agent (independent critics); next actions drawn first."""
    obs, action = batch["agents", "observation"], batch["agents", "action"]
    nxt = batch["next", "agents"]
    alpha = log_alpha.detach().exp()
    with torch.no_grad():
        next_action, next_lp = TanhNormal(*actor(nxt["observation"])).rsample_and_log_prob()
        sa = torch.cat([nxt["observation"], next_action], -1)
        soft = torch.min(t_critics[0](sa), t_critics[1](sa)) - alpha * next_lp.unsqueeze(-1)
        y = nxt["reward"] + gamma * (~nxt["terminated"]).float() * soft
    sa = torch.cat([obs, action], -1)
    q_loss = sum((c(sa) - y).pow(2).mean() for c in critics)
    new_action, lp = TanhNormal(*actor(obs)).rsample_and_log_prob()  # lp: [*B, N]
    sa = torch.cat([obs, new_action], -1)
    frozen = [{k: v.detach() for k, v in c.named_parameters()} for c in critics]
    q_pi = torch.min(*(functional_call(c, p, (sa,)) for c, p in zip(critics, frozen)))
    actor_loss = (alpha * lp.unsqueeze(-1) - q_pi).mean()
    alpha_loss = -(log_alpha * (lp + target_entropy).detach()).mean()
    return actor_loss, q_loss, alpha_loss


ISAC_KEYS = agents_keys("action", "state_action_value", "reward", "done", "terminated")


@pytest.mark.parametrize("centralized", [False, True])
def test_isac_matches_plain(centralized):
    torch.manual_seed(0)
    actor = isac_actor()
    critics = [independent_critic(centralized), independent_critic(centralized)]
    loss = SACLoss(actor, critics, alpha_init=0.3, loss_function="l2").set_keys(**ISAC_KEYS)
    loss.make_value_estimator(gamma=0.9)
    perturb_(loss.qvalue_network_target_params, 0.2)
    stacked = loss.qvalue_network_target_params["params", "module"]
    t_critics = bind_stacked(stacked, [copy.deepcopy(c.module) for c in critics])
    data = make_batch()
    torch.manual_seed(1)
    out = loss(data)
    torch.manual_seed(1)
    modules = [c.module for c in critics]
    net = actor.module[0].module  # MultiAgentMLP + NormalParamExtractor
    refs = plain_isac(net, modules, t_critics, loss.log_alpha, data, 0.9, -ACT)
    for name, ref in zip(("loss_actor", "loss_qvalue", "loss_alpha"), refs):
        torch.testing.assert_close(out[name], ref)
    assert data["td_error"].shape == (B,)
    total = out["loss_actor"] + out["loss_qvalue"] + out["loss_alpha"]
    params = [*actor.parameters(), loss.log_alpha]
    got = torch.autograd.grad(total, params, retain_graph=True)
    want = torch.autograd.grad(sum(refs), params, retain_graph=True)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w)
    weight = loss.qvalue_network.params["module", "params", "0", "weight"]  # [2, N, 16, in]
    (grad,) = torch.autograd.grad(total, [weight])
    ref = torch.autograd.grad(refs[1], [m.get_parameter("params.0.weight") for m in modules])
    torch.testing.assert_close(grad, torch.stack(ref))


def test_isac_learns_a_cooperative_task():
    torch.manual_seed(0)
    actor = isac_actor()
    loss = SACLoss(actor, independent_critic(), alpha_init=0.05).set_keys(**ISAC_KEYS)

    def explore(batch):
        # The policy samples under RANDOM (as a collector runs it); outside a block it acts
        # deterministically, as TorchRL's ProbabilisticActor.
        with set_exploration_type(ExplorationType.RANDOM):
            return policy_actions(actor, batch)

    before, after = train(loss, actor, explore)
    assert after > -0.12 and after > before + 0.15, (before, after)  # the optimum is 0
