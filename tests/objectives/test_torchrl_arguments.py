"""TorchRL's names and arguments on the losses, target updaters and value functions."""

import pytest
import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModule

from tdrl.modules import MLP, LSTMModule, set_recurrent_mode
from tdrl.modules.rnn import recurrent_mode
from tdrl.objectives import (
    A2CLoss,
    ClipPPOLoss,
    DQNLoss,
    IQLLoss,
    SACLoss,
    SoftUpdate,
    TD3Loss,
    group_optimizers,
)
from tdrl.objectives.value import functional as F
from tdrl.testing import (
    make_action_value_net,
    make_categorical_actor,
    make_deterministic_actor,
    make_qvalue_critic,
    make_state_value_net,
    make_tanh_normal_actor,
    make_transition_batch,
)


def test_td3_actor_and_value_loss_methods_match_forward():
    torch.manual_seed(0)
    loss = TD3Loss(make_deterministic_actor(), make_qvalue_critic(), bounds=(-1.0, 1.0))
    batch = make_transition_batch(batch=(4,))
    torch.manual_seed(1)
    out = loss(batch)
    torch.manual_seed(1)
    value, meta = loss.value_loss(batch)
    actor, actor_meta = loss.actor_loss(batch)
    torch.testing.assert_close(value, out["loss_qvalue"])
    torch.testing.assert_close(actor, out["loss_actor"])
    assert set(meta) == {"td_error", "next_state_value", "pred_value", "target_value"}
    assert set(actor_meta) == {"state_action_value_actor"}


def test_network_params_attributes():
    loss = TD3Loss(make_deterministic_actor(), make_qvalue_critic(), num_qvalue_nets=3)
    params = loss.actor_network_params
    assert isinstance(params, TensorDictBase)
    mine = {t.data_ptr() for t in params.values(True, True)}
    assert mine == {p.data_ptr() for p in loss.actor_network.parameters()}
    assert loss.qvalue_network_params.batch_size == torch.Size([3])
    assert loss.target_qvalue_network_params.batch_size == torch.Size([3])
    assert isinstance(loss.target_actor_network_params, TensorDictBase)
    with pytest.raises(AttributeError):
        loss.not_a_network_params  # noqa: B018


def test_soft_update_eps_and_tau():
    net = make_action_value_net()
    loss = DQNLoss(net)
    live = loss.value_network_params.clone()
    updater = SoftUpdate(loss, eps=0.75)
    with torch.no_grad():
        loss.target_value_network_params.zero_()
    updater.step()  # target = 0.75 * 0 + 0.25 * live
    key = ("module", "0", "weight")
    torch.testing.assert_close(loss.target_value_network_params[key], 0.25 * live[key])
    assert SoftUpdate(loss).tau == pytest.approx(0.001)  # TorchRL: eps = 0.999
    with pytest.raises(ValueError, match="exclusive"):
        SoftUpdate(loss, eps=0.9, tau=0.1)


def test_iql_value_network_is_positional():
    value = make_state_value_net()
    loss = IQLLoss(make_tanh_normal_actor(), make_qvalue_critic(), value)
    assert loss.value_network is value


def test_dqn_target_on_a_lazy_mlp():
    torch.manual_seed(0)
    net = TensorDictModule(MLP(out_features=2, num_cells=[8]), ["observation"], ["action_value"])
    loss = DQNLoss(net, delay_value=True, action_space="one-hot")
    updater = SoftUpdate(loss, tau=1.0)
    batch = make_transition_batch(batch=(4,), action="one_hot")
    loss(batch)["loss"].backward()
    target = loss.target_value_network_params
    live = loss.value_network_params
    key = ("module", "0", "weight")
    torch.testing.assert_close(target[key], live[key].detach())
    with torch.no_grad():
        live[key].add_(1.0)
    updater.step()
    torch.testing.assert_close(target[key], live[key].detach())


def test_vec_functions_equal_the_estimators():
    torch.manual_seed(0)
    v, r = torch.randn(5, 1), torch.randn(5, 1)
    nv = torch.cat([v[1:], torch.randn(1, 1)])  # V(s_{t+1}) = V(s) of the next row
    done = torch.tensor([[False], [True], [False], [False], [True]])
    gae = F.generalized_advantage_estimate(0.9, 0.8, v, nv, r, done)
    for a, b in zip(F.vec_generalized_advantage_estimate(0.9, 0.8, v, nv, r, done), gae):
        torch.testing.assert_close(a, b)
    # TD(1) is TD(lambda = 1); the TD(lambda) advantage (lambda-return minus V(s)) is GAE's
    # advantage when the values are consistent.
    ret = F.vec_td1_return_estimate(0.9, nv, r, done)
    torch.testing.assert_close(F.vec_td_lambda_return_estimate(0.9, 1.0, nv, r, done), ret)
    torch.testing.assert_close(F.vec_td1_advantage_estimate(0.9, v, nv, r, done), ret - v)
    torch.testing.assert_close(F.vec_td_lambda_advantage_estimate(0.9, 0.8, v, nv, r, done), gae[0])
    # The last step: r + gamma * V(s') since it is done (terminated = done): r.
    assert ret[-1].item() == pytest.approx(r[-1].item())
    with pytest.raises(ValueError, match="rolling_gamma"):
        F.vec_td1_return_estimate(0.9, nv, r, done, rolling_gamma=False)


def test_group_optimizers_keeps_each_group():
    a, b = torch.nn.Linear(2, 2), torch.nn.Linear(2, 1)
    opt = group_optimizers(
        torch.optim.SGD(a.parameters(), lr=0.1), torch.optim.SGD(b.parameters(), lr=0.0)
    )
    before = b.weight.detach().clone()
    (a(torch.ones(1, 2)).sum() + b(torch.ones(1, 2)).sum()).backward()
    old_a = a.weight.detach().clone()
    opt.step()
    torch.testing.assert_close(b.weight.detach(), before)
    torch.testing.assert_close(a.weight.detach(), old_a - 0.1 * a.weight.grad)
    with pytest.raises(ValueError, match="different types"):
        group_optimizers(torch.optim.SGD(a.parameters(), lr=0.1), torch.optim.Adam(b.parameters()))


def test_gamma_and_priority_key_are_honoured():
    loss = DQNLoss(make_action_value_net(), gamma=0.5, priority_key="prio")
    assert loss.value_estimator.gamma == 0.5
    batch = make_transition_batch(batch=(4,), action="one_hot")
    loss(batch)
    assert "prio" in batch.keys() and "td_error" not in batch.keys()


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: DQNLoss(make_action_value_net(), reduction="sum"), "reduction"),
        (
            lambda: SACLoss(make_tanh_normal_actor(), make_qvalue_critic(), make_state_value_net()),
            "value_network",
        ),
        (
            lambda: SACLoss(make_tanh_normal_actor(), make_qvalue_critic(), delay_actor=True),
            "delay",
        ),
        (lambda: ClipPPOLoss(make_categorical_actor(), separate_losses=True), "separate_losses"),
        (lambda: A2CLoss(make_categorical_actor(), functional=False), "functional"),
    ],
)
def test_unsupported_torchrl_arguments_raise(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_a2c_accepts_torchrl_coefficient_names():
    loss = A2CLoss(make_categorical_actor(), make_state_value_net(), critic_coeff=0.25)
    batch = make_transition_batch(batch=(8,), action="one_hot")
    batch["advantage"] = torch.randn(8, 1)
    batch["value_target"] = torch.randn(8, 1)
    full = A2CLoss(make_categorical_actor(), make_state_value_net())
    full.load_state_dict(loss.state_dict())
    torch.testing.assert_close(loss(batch)["loss_critic"], 0.25 * full(batch)["loss_critic"])
    with pytest.raises(TypeError, match="same argument"):
        A2CLoss(make_categorical_actor(), entropy_coeff=0.1, entropy_coef=0.1)


def test_global_recurrent_mode():
    lstm = LSTMModule(3, 4, in_key="x", out_key="y")
    assert recurrent_mode() is None
    with set_recurrent_mode(True):
        assert lstm.recurrent_mode and recurrent_mode() is True
        with set_recurrent_mode("sequential"):
            assert not lstm.recurrent_mode
        assert lstm.recurrent_mode
    assert not lstm.recurrent_mode and recurrent_mode() is None
    lstm.set_recurrent_mode(True)
    with set_recurrent_mode(False):  # the global mode wins over the module's own
        assert not lstm.recurrent_mode
    with set_recurrent_mode(None):
        assert lstm.recurrent_mode

    @set_recurrent_mode(False)
    def read():
        return lstm.recurrent_mode

    assert read() is False and lstm.recurrent_mode
    with pytest.raises(ValueError, match="unknown mode"):
        set_recurrent_mode("fast")


def test_distance_loss_takes_torchrls_names_and_strict_shape():
    from tdrl.objectives import distance_loss

    v1, v2 = torch.tensor([[3.0], [1.0]]), torch.tensor([1.0])
    with pytest.raises(ValueError, match="different shapes"):
        distance_loss(v1, v2, "l2")
    got = distance_loss(v1=v1, v2=v2, loss_function="l1", strict_shape=False)
    assert got.tolist() == [[2.0], [0.0]]
    assert distance_loss(v1, v2, "smooth_l1", False).tolist() == [[1.5], [0.0]]


def test_ppo_actor_network_by_keyword_or_torchrls_actor_alias():
    from tdrl.objectives import ClipPPOLoss, KLPENPPOLoss
    from tdrl.testing import make_categorical_actor

    actor = make_categorical_actor()
    assert ClipPPOLoss(actor_network=actor).actor_network is actor
    assert KLPENPPOLoss(actor=actor).actor_network is actor
    with pytest.raises(TypeError, match="actor_network has no get_dist"):
        ClipPPOLoss()
