"""QEnsemble: vectorised evaluation equals a loop, parameters train, targets follow updaters."""

from __future__ import annotations

import copy

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule
from torch import nn

from tdrl.modules import MLP
from tdrl.objectives import LossModule, QEnsemble, SoftUpdate
from tdrl.objectives._ensemble import ensemble_distance, ensemble_target


def make_net(nested=False):
    prefix = ("agents",) if nested else ()
    return TensorDictModule(
        MLP(5, 1, num_cells=8),
        [(*prefix, "observation"), (*prefix, "action")],
        [(*prefix, "state_action_value")],
    )


def make_td(batch=(4,)):
    return TensorDict(
        observation=torch.randn(*batch, 3), action=torch.randn(*batch, 2), batch_size=batch
    )


def test_vectorised_call_equals_a_loop_over_copies():
    torch.manual_seed(0)
    ens = QEnsemble(make_net(), num_copies=3)
    td = make_td((2, 4))
    out = ens(td)
    assert out.shape == (3, 2, 4, 1)
    for i in range(3):
        member = copy.deepcopy(make_net())
        ens.params[i].data.to_module(member)
        torch.testing.assert_close(out[i], member(td.copy())["state_action_value"])
    assert not torch.allclose(out[0], out[1])  # copies are re-initialised
    assert set(td.keys()) == {"observation", "action"}  # input untouched


def test_first_copy_keeps_the_weights_and_lists_are_used_as_given():
    net = make_net()
    td = make_td()
    torch.testing.assert_close(QEnsemble(net, 2)(td)[0], net(td.copy())["state_action_value"])
    nets = [make_net(), make_net()]
    out = QEnsemble(nets)(td)
    for i, n in enumerate(nets):
        torch.testing.assert_close(out[i], n(td.copy())["state_action_value"])


def test_gradients_reach_every_copy_and_single_copy_params():
    ens = QEnsemble(make_net(), num_copies=4)
    ens(make_td()).sum().backward()
    for name, p in ens.named_parameters():
        assert p.grad is not None and bool((p.grad.flatten(1).abs().sum(1) > 0).all()), name
    assert ens(make_td(), ens.params.detach()[2]).shape == (4, 1)
    assert not ens(make_td(), ens.params.detach()).requires_grad


def test_nested_keys_and_out_key():
    ens = QEnsemble(make_net(nested=True), num_copies=2)
    td = TensorDict({"agents": make_td((4, 3))}, [4])
    assert ens(td).shape == (2, 4, 3, 1)
    with pytest.raises(KeyError, match=r"missing key .*nope"):
        ens(td, out_key="nope")
    with pytest.raises(KeyError, match="missing key"):
        ens(make_td())


def test_bad_arguments():
    with pytest.raises(ValueError, match="num_copies must be a positive int"):
        QEnsemble(make_net())
    with pytest.raises(ValueError, match="num_copies does not match"):
        QEnsemble([make_net(), make_net()], num_copies=3)
    with pytest.raises(ValueError, match="uninitialised"):
        QEnsemble(TensorDictModule(nn.LazyLinear(1), ["observation"], ["v"]), 2)
    other = TensorDictModule(MLP(5, 1, num_cells=4), ["observation", "action"], ["v"])
    with pytest.raises(ValueError, match="do not have the same parameters"):
        QEnsemble([make_net(), other])


class _EnsembleLoss(LossModule):
    def __init__(self):
        super().__init__()
        self.qvalue_network = QEnsemble(make_net(), num_copies=3)
        self._make_target("qvalue_network")


def test_targets_through_make_target_and_soft_update():
    loss = _EnsembleLoss()
    target = ensemble_target(loss)
    assert target.batch_size == (3,)
    assert not any(t.requires_grad for t in target.values(True, True))
    soft = SoftUpdate(loss, tau=0.5)
    with torch.no_grad():
        loss.qvalue_network.params.apply_(lambda t: t.add_(1.0))
    before = target.clone()
    soft.step()
    live = loss.qvalue_network.params.data
    for key in before.keys(True, True):
        torch.testing.assert_close(target[key], (before[key] + live[key]) / 2)
    torch.testing.assert_close(loss.qvalue_network(make_td(), target).shape, torch.Size([3, 4, 1]))


def test_ensemble_distance():
    pred = torch.tensor([[[1.0], [2.0]], [[3.0], [0.0]]])  # 2 members, batch 2
    target = torch.tensor([[1.0], [1.0]])
    loss, td_error = ensemble_distance(pred, target, "l1", TensorDict(batch_size=[2]))
    assert loss.item() == pytest.approx(0.5 + 1.5)
    assert td_error.tolist() == [4.0, 1.0]  # the largest squared error (TorchRL's TD3/IQL/CQL)
    _, abs_error = ensemble_distance(pred, target, "l1", TensorDict(batch_size=[2]), squared=False)
    assert abs_error.tolist() == [2.0, 1.0]  # the largest absolute error (TorchRL's SAC)


class _TwoHeads(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(3, 1)

    def forward(self, x):
        y = self.linear(x)
        return y, 2 * y


@pytest.mark.parametrize("kind", ["mlp", "sequential", "layernorm", "two_outputs"])
def test_batched_matmul_path_and_vmap_path_agree_with_a_loop(kind):
    torch.manual_seed(0)
    if kind == "mlp":
        make = make_net
    elif kind == "sequential":

        def make():
            net = nn.Sequential(
                nn.Linear(3, 8), nn.ReLU(), nn.Linear(8, 2), nn.Unflatten(-1, (2, 1))
            )
            return TensorDictModule(net, ["observation"], ["state_action_value"])

    elif kind == "layernorm":

        def make():
            net = nn.Sequential(nn.Linear(3, 8), nn.LayerNorm(8), nn.Linear(8, 1))
            return TensorDictModule(net, ["observation"], ["state_action_value"])

    else:

        def make():
            return TensorDictModule(_TwoHeads(), ["observation"], ["state_action_value", "other"])

    nets = [make() for _ in range(3)]
    ens = QEnsemble(nets)
    assert (ens._layers is not None) == (kind in ("mlp", "sequential"))
    td = make_td((2, 5))
    out = ens(td)
    for i, net in enumerate(nets):
        torch.testing.assert_close(out[i], net(td.copy())["state_action_value"])
    torch.testing.assert_close(ens(td, ens.params[1]), out[1])
    out.sum().backward()
    assert all(p.grad is not None for p in ens.parameters())


def test_hooked_modules_take_the_vmap_path():
    net = make_net()
    calls = []
    net.module[0].register_forward_hook(lambda *args: calls.append(1))
    ens = QEnsemble(net, num_copies=2)
    assert ens._layers is None
    ens(make_td())
    assert calls  # the hook ran (once, vectorised)
