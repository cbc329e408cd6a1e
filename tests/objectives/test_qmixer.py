"""QMixerLoss: contract, numerics against a plain QMIX computation, masks, weights, targets,
errors, and a cooperative game it learns."""

from __future__ import annotations

import copy

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule, TensorDictSequential
from torch import nn

from tdrl.modules import MultiAgentMLP, QMixer, QValueActor, VDNMixer
from tdrl.objectives import HardUpdate, QMixerLoss, SoftUpdate
from tdrl.testing import LossContract

N, OBS, ACT, STATE, B = 3, 4, 3, 5, 6


def key(prefix: tuple[str, ...], *names: str) -> tuple[str, ...]:
    return (*prefix, *names)


def make_local(prefix=(), kind="qvalue_actor", mask_key=None):
    """The agents' Q-network under ``(*prefix, "agents")``: a QValueActor around a
    MultiAgentMLP, or a plain shared nn.Sequential writing only the action values."""
    group = (*prefix, "agents")
    if kind == "plain":
        net = nn.Sequential(nn.Linear(OBS, 16), nn.Tanh(), nn.Linear(16, ACT))
    else:
        net = MultiAgentMLP(OBS, ACT, N, centralized=False, share_params=True, num_cells=[16])
    module = TensorDictModule(net, [key(group, "observation")], [key(group, "action_value")])
    if kind == "plain":
        return module
    return QValueActor(
        module,
        action_space="categorical",
        action_value_key=key(group, "action_value"),
        action_key=key(group, "action"),
        chosen_action_value_key=key(group, "chosen_action_value"),
        action_mask_key=mask_key,
    )


def make_mixer(prefix=(), mixer="qmix"):
    local_value = key(prefix, "agents", "chosen_action_value")
    out = [key(prefix, "chosen_action_value")]
    if mixer == "vdn":
        return TensorDictModule(VDNMixer(N), [local_value], out)
    return TensorDictModule(QMixer(STATE, 8, N), [local_value, key(prefix, "state")], out)


def make_batch(prefix=(), batch=(B,), one_hot=False):
    group = (*prefix, "agents")
    td = TensorDict({}, batch)
    action = torch.randint(ACT, (*batch, N))
    td.set(key(group, "observation"), torch.randn(*batch, N, OBS))
    td.set(key(group, "action"), nn.functional.one_hot(action, ACT) if one_hot else action)
    td.set(key(prefix, "state"), torch.randn(*batch, STATE))
    nxt = TensorDict({}, batch)
    nxt.set(key(group, "observation"), torch.randn(*batch, N, OBS))
    nxt.set(key(prefix, "state"), torch.randn(*batch, STATE))
    nxt.set(key(prefix, "reward"), torch.randn(*batch, 1))
    done = torch.rand(*batch, 1) < 0.5
    nxt.set(key(prefix, "done"), done)
    nxt.set(key(prefix, "terminated"), done & (torch.rand(*batch, 1) < 0.5))
    td.set("next", nxt)
    return td


TEAM = ("team",)
TEAM_KEYS = {
    "action_value": key(TEAM, "agents", "action_value"),
    "local_value": key(TEAM, "agents", "chosen_action_value"),
    "action": key(TEAM, "agents", "action"),
    "global_value": key(TEAM, "chosen_action_value"),
    "reward": key(TEAM, "reward"),
    "done": key(TEAM, "done"),
    "terminated": key(TEAM, "terminated"),
}


class TestQMixerContract(LossContract):
    # nested=False: TorchRL's default layout (the group under "agents", team entries at the
    # root); nested=True: the whole team one level deeper, under "team", through set_keys.
    loss_terms = {"loss"}

    def make_loss(self, nested):
        prefix = TEAM if nested else ()
        return QMixerLoss(make_local(prefix), make_mixer(prefix))

    def make_batch(self, nested):
        return make_batch(TEAM if nested else ())

    def nested_keys(self):
        return TEAM_KEYS

    def trained_params(self, loss):
        return {n for n, _ in loss.named_parameters()}


# ------------------------------------------------------------------ plain reference
def plain_qmix(local, target_local, mix, target_mix, batch, gamma, loss_fn, weights=None):
    """Textbook QMIX on index actions: returns (loss, squared error per transition)."""
    q = local(batch["agents", "observation"])  # [*B, N, ACT]
    chosen = q.gather(-1, batch["agents", "action"].unsqueeze(-1))  # [*B, N, 1]
    pred = call_mixer(mix, chosen, batch["state"])  # [*B, 1]
    with torch.no_grad():
        next_q = target_local(batch["next", "agents", "observation"]).max(-1, keepdim=True).values
        next_v = call_mixer(target_mix, next_q, batch["next", "state"])
        not_term = 1.0 - batch["next", "terminated"].float()
        y = batch["next", "reward"] + gamma * not_term * next_v
    if loss_fn == "l2":
        per = (pred - y).pow(2).squeeze(-1)
    else:
        per = nn.functional.smooth_l1_loss(pred, y, reduction="none").squeeze(-1)
    loss = per.mean() if weights is None else (weights * per).sum() / weights.sum()
    return loss, (pred - y).pow(2).detach()  # TorchRL's [*B, 1]


def call_mixer(mixer, chosen, state):
    return mixer(chosen, state) if mixer.needs_state else mixer(chosen)


def target_copy(module, params):
    clone = copy.deepcopy(module)
    params.to_module(clone)
    return clone


def inner(module):
    """The nn.Module inside a TensorDictModule or a QValueActor."""
    return module[0].module if isinstance(module, TensorDictSequential) else module.module


@pytest.mark.parametrize("local_kind", ["plain", "qvalue_actor"])
@pytest.mark.parametrize("mixer", ["qmix", "vdn"])
@pytest.mark.parametrize("loss_fn", ["l2", "smooth_l1"])
@pytest.mark.parametrize("batch", [(B,), (2, 3)])
def test_matches_plain_qmix(local_kind, mixer, loss_fn, batch):
    torch.manual_seed(0)
    local, mix = make_local(kind=local_kind), make_mixer(mixer=mixer)
    loss = QMixerLoss(local, mix, loss_function=loss_fn, action_space="categorical")
    loss.make_value_estimator(gamma=0.9)
    with torch.no_grad():  # targets that differ from the live networks
        for params in (loss.local_value_network_target_params, loss.mixer_network_target_params):
            params.apply_(lambda t: t.add_(0.3 * torch.randn_like(t)))
    t_local = target_copy(local, loss.target_local_value_network_params)
    t_mix = target_copy(mix, loss.target_mixer_network_params)
    data = make_batch(batch=batch)
    out = loss(data)
    ref, ref_err = plain_qmix(
        inner(local), inner(t_local), mix.module, t_mix.module, data, 0.9, loss_fn
    )
    torch.testing.assert_close(out["loss"], ref)
    assert list(out.keys()) == ["loss"]  # TorchRL's output; the TD error goes to the batch
    torch.testing.assert_close(data["td_error"], ref_err)
    params = list(loss.parameters())
    grads = torch.autograd.grad(out["loss"], params)
    ref_grads = torch.autograd.grad(ref, params, allow_unused=True)
    for g, r in zip(grads, ref_grads):
        torch.testing.assert_close(g, torch.zeros_like(g) if r is None else r)


def test_one_hot_and_index_actions_and_defaults():
    torch.manual_seed(0)
    loss = QMixerLoss(make_local(), make_mixer())
    assert loss.action_space == "categorical"  # from the QValueActor
    assert type(loss.value_estimator).__name__ == "TD0Estimator"
    assert float(loss.value_estimator.gamma) == pytest.approx(0.99)  # TorchRL's default
    assert (loss.delay_value, loss.loss_function) == (True, "l2")
    keys = loss.tensor_keys
    assert (keys.local_value, keys.global_value, keys.action_value, keys.action) == (
        ("agents", "chosen_action_value"),
        "chosen_action_value",
        ("agents", "action_value"),
        ("agents", "action"),
    )
    data = make_batch(one_hot=True)
    index = data.clone()
    index["agents", "action"] = data["agents", "action"].argmax(-1)
    one_hot_loss = QMixerLoss(loss.local_value_network, loss.mixer_network, action_space="one_hot")
    one_hot_loss.load_state_dict(loss.state_dict())
    torch.testing.assert_close(one_hot_loss(data)["loss"], loss(index)["loss"])
    assert float(QMixerLoss(make_local(), make_mixer(), gamma=0.5).value_estimator.gamma) == 0.5


def test_greedy_target_respects_the_action_mask():
    # Identity "network": action values are the observation; VDN sums them; no target copy.
    group = ("agents",)
    net = TensorDictModule(nn.Identity(), [key(group, "observation")], [key(group, "action_value")])
    mask_key = ("agents", "action_mask")
    actor = QValueActor(
        net,
        action_space="categorical",
        action_value_key=("agents", "action_value"),
        action_key=("agents", "action"),
        chosen_action_value_key=("agents", "chosen_action_value"),
        action_mask_key=mask_key,
    )
    plain = QMixerLoss(net, make_mixer(mixer="vdn"), delay_value=False)
    masked = QMixerLoss(actor, make_mixer(mixer="vdn"), delay_value=False)
    for loss in (plain, masked):
        loss.make_value_estimator(gamma=1.0)
    data = make_batch(batch=(1,))
    data["agents", "observation"] = torch.zeros(1, N, ACT)
    data["next", "agents", "observation"] = torch.tensor([[[1.0, 5.0, 2.0]] * N])
    data["next", "reward"] = torch.zeros(1, 1)
    data["next", "terminated"] = torch.zeros(1, 1, dtype=torch.bool)
    # A stale greedy value in the data is never read by a network that does not write it.
    data["next", "agents", "chosen_action_value"] = torch.full((1, N, 1), 100.0)
    data["next", mask_key] = torch.tensor([[[True, False, True]] * N])
    plain(data)
    assert data["td_error"].tolist() == [[(5.0 * N) ** 2]]  # no mask: the max
    masked(data)
    assert data["td_error"].tolist() == [[(2.0 * N) ** 2]]  # best allowed action


@pytest.mark.parametrize("use", [False, "auto"])
def test_priority_weights(use):
    torch.manual_seed(0)
    local, mix = make_local(kind="plain"), make_mixer()
    loss = QMixerLoss(local, mix, delay_value=False, use_prioritized_weights=use)
    loss.make_value_estimator(gamma=0.9)
    data = make_batch()
    weights = torch.rand(B) + 0.1
    data["priority_weight"] = weights
    ref, _ = plain_qmix(
        local.module, local.module, mix.module, mix.module, data, 0.9, "l2",
        weights=weights if use else None,
    )  # fmt: skip
    torch.testing.assert_close(loss(data)["loss"], ref)


def test_target_updaters_move_both_networks():
    loss = QMixerLoss(make_local(), make_mixer())
    soft = SoftUpdate(loss, tau=0.5)
    pairs = [
        (TensorDict.from_module(loss.local_value_network), loss.target_local_value_network_params),
        (TensorDict.from_module(loss.mixer_network), loss.target_mixer_network_params),
    ]
    with torch.no_grad():
        for p in loss.parameters():
            p.add_(1.0)
    before = [target.clone() for _, target in pairs]
    soft.step()
    for (_, target), old in zip(pairs, before):
        for k in old.keys(True, True):
            torch.testing.assert_close(target.get(k), old.get(k) + 0.5)
    hard = HardUpdate(loss, value_network_update_interval=2)
    with torch.no_grad():
        for p in loss.parameters():
            p.add_(1.0)
    hard.step()  # HardUpdate's constructor copied; the next copy comes at the second step
    for live, target in pairs:
        for k in live.keys(True, True):
            assert not torch.equal(target.get(k), live.get(k))
    hard.step()
    for live, target in pairs:
        for k in live.keys(True, True):
            assert torch.equal(target.get(k), live.get(k))
    with pytest.raises(ValueError, match="no target network"):
        SoftUpdate(QMixerLoss(make_local(), make_mixer(), delay_value=False))


def test_lazy_local_network_gets_its_target_at_the_first_call():
    net = MultiAgentMLP(None, ACT, N, centralized=False, share_params=False, num_cells=[8])
    local = TensorDictModule(net, [("agents", "observation")], [("agents", "action_value")])
    loss = QMixerLoss(local, make_mixer(), action_space="categorical")
    out = loss(make_batch())
    assert torch.isfinite(out["loss"])
    target = loss.target_local_value_network_params
    assert target["module", "params", "0", "weight"].shape == (N, 8, OBS)


def test_errors():
    data = make_batch()
    with pytest.raises(TypeError, match="mixer_network must be a tensordict module"):
        QMixerLoss(make_local(), QMixer(STATE, 8, N))
    with pytest.raises(ValueError, match="unknown loss_function"):
        QMixerLoss(make_local(), make_mixer(), loss_function="l3")
    loss = QMixerLoss(make_local(), make_mixer())
    per_agent = data.clone()
    per_agent["next", "reward"] = torch.randn(B, N, 1)
    with pytest.raises(ValueError, match="not one team reward per transition"):
        loss(per_agent)
    wrong = TensorDictModule(VDNMixer(N), [("agents", "other")], ["chosen_action_value"])
    with pytest.raises(ValueError, match=r"mixer network does not read \('agents', 'chosen"):
        QMixerLoss(make_local(), wrong)(data)
    loss.set_keys(action_value=("agents", "q"))
    with pytest.raises(ValueError, match="local value network does not write"):
        loss(data)
    loss.set_keys(action_value=("agents", "action_value"))
    assert torch.isfinite(loss(data)["loss"])  # still usable
    with pytest.raises(KeyError, match="unknown key name"):
        loss.set_keys(state="state")


@pytest.mark.parametrize("mixer", ["qmix", "vdn"])
def test_learns_a_cooperative_matrix_game(mixer):
    """One-step game, 2 agents x 3 actions, team payoff monotonic in each agent's action:
    the greedy joint action must become the optimum (2, 2)."""
    torch.manual_seed(0)
    payoff = torch.tensor([[0.0, 0.0, 1.0], [0.0, 2.0, 3.0], [1.0, 3.0, 8.0]])
    agents, batch = 2, 64
    net = MultiAgentMLP(1, 3, agents, centralized=False, share_params=False, num_cells=[16])
    local = QValueActor(
        TensorDictModule(net, [("agents", "observation")], [("agents", "action_value")]),
        action_space="categorical",
        action_value_key=("agents", "action_value"),
        action_key=("agents", "action"),
        chosen_action_value_key=("agents", "chosen_action_value"),
    )
    mixing = QMixer(2, 8, agents) if mixer == "qmix" else VDNMixer(agents)
    in_keys = [("agents", "chosen_action_value")] + (["state"] if mixer == "qmix" else [])
    loss = QMixerLoss(local, TensorDictModule(mixing, in_keys, ["chosen_action_value"]))
    updater = SoftUpdate(loss, tau=0.1)
    optim = torch.optim.Adam(loss.parameters(), lr=0.02)
    obs, state = torch.ones(batch, agents, 1), torch.ones(batch, 2)
    for _ in range(150):
        action = torch.randint(3, (batch, agents))
        data = TensorDict(
            {
                "agents": {"observation": obs, "action": action},
                "state": state,
                "next": {
                    "agents": {"observation": obs},
                    "state": state,
                    "reward": payoff[action[:, 0], action[:, 1]].unsqueeze(-1),
                    "done": torch.ones(batch, 1, dtype=torch.bool),
                    "terminated": torch.ones(batch, 1, dtype=torch.bool),
                },
            },
            [batch],
        )
        optim.zero_grad()
        loss(data)["loss"].backward()
        optim.step()
        updater.step()
    greedy = local(TensorDict({"agents": {"observation": obs[:1]}}, [1]))
    assert greedy["agents", "action"].tolist() == [[2, 2]]
