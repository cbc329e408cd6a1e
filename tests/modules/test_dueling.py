"""Dueling Q-networks: TorchRL 0.14.1's seeded outputs, the dueling formula, shapes and errors."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from tdrl.modules.models import DuelingCnnDQNet, DuelingMlpDQNet

SMALL_CNN = {"num_cells": [2, 3], "strides": [2, 1], "kernel_sizes": [3, 2]}


def _small_mlp(**kwargs: object) -> DuelingMlpDQNet:
    return DuelingMlpDQNet(
        mlp_kwargs_feature={"num_cells": [4], "out_features": 4},
        mlp_kwargs_output={"num_cells": 5},
        **kwargs,
    )


def test_seeded_mlp_output_is_torchrl_s() -> None:
    torch.manual_seed(0)
    net = _small_mlp(out_features=3)
    out = net(torch.linspace(-1, 1, 12).reshape(2, 6))
    # torchrl.modules.DuelingMlpDQNet, same seed and arguments, TorchRL 0.14.1.
    expected = [
        [-0.12775464355945587, 0.1268373280763626, -0.03450661897659302],
        [-0.09889811277389526, 0.1112755686044693, -0.08676117658615112],
    ]
    torch.testing.assert_close(out, torch.tensor(expected), rtol=1e-6, atol=1e-7)


def test_seeded_cnn_output_is_torchrl_s() -> None:
    torch.manual_seed(0)
    net = DuelingCnnDQNet(out_features=2, cnn_kwargs=SMALL_CNN, mlp_kwargs={"num_cells": 4})
    out = net(torch.linspace(0, 1, 2 * 3 * 7 * 7).reshape(2, 3, 7, 7))
    # torchrl.modules.DuelingCnnDQNet, same seed and arguments, TorchRL 0.14.1.
    expected = [
        [-0.1477949619293213, 0.08219103515148163],
        [-0.13453006744384766, 0.1081627681851387],
    ]
    torch.testing.assert_close(out, torch.tensor(expected), rtol=1e-6, atol=1e-7)
    assert sorted(net.state_dict()) == sorted(
        f"{head}.{i}.{p}"
        for head in ("advantage", "features", "value")
        for i in (0, 2)
        for p in ("bias", "weight")
    )


@pytest.mark.parametrize("batch", [(), (2, 3)])
def test_cnn_is_value_plus_centred_advantage(batch: tuple[int, ...]) -> None:
    net = DuelingCnnDQNet(out_features=4, cnn_kwargs=SMALL_CNN, mlp_kwargs={"num_cells": 8})
    x = torch.rand(*batch, 3, 9, 9)
    q = net(x)
    features = net.features(x)
    adv, value = net.advantage(features), net.value(features)
    assert q.shape == (*batch, 4) and value.shape == (*batch, 1)
    torch.testing.assert_close(q, value + adv - adv.mean(-1, keepdim=True))
    torch.testing.assert_close(q.mean(-1, keepdim=True), value)


def test_default_cnn_is_torchrl_s_layout() -> None:
    net = DuelingCnnDQNet(out_features=6)
    conv = [m for m in net.features if isinstance(m, nn.Conv2d)]
    assert [c.out_channels for c in conv] == [32, 64, 64]
    assert [c.stride for c in conv] == [(4, 4), (2, 2), (1, 1)]
    assert [c.kernel_size for c in conv] == [(8, 8), (4, 4), (3, 3)]
    assert isinstance(conv[0], nn.LazyConv2d)
    for head, size in ((net.advantage, 6), (net.value, 1)):
        assert isinstance(head[0], nn.LazyLinear) and head[0].out_features == 512
        assert isinstance(head[1], nn.ELU) and head[2].out_features == size
    assert net(torch.zeros(2, 3, 64, 64)).shape == (2, 6)


def test_biases_of_built_layers_start_at_zero_lazy_ones_do_not() -> None:
    torch.manual_seed(0)
    net = DuelingCnnDQNet(out_features=3, cnn_kwargs=SMALL_CNN, mlp_kwargs={"num_cells": 8})
    net(torch.zeros(1, 3, 9, 9))
    zero = {k: bool((v == 0).all()) for k, v in net.state_dict().items() if k.endswith("bias")}
    # TorchRL's pattern: zeroed at construction, so lazily built layers keep PyTorch's init.
    assert zero == {
        "features.0.bias": False,
        "features.2.bias": True,
        "advantage.0.bias": False,
        "advantage.2.bias": True,
        "value.0.bias": False,
        "value.2.bias": True,
    }
    built = DuelingCnnDQNet(3, cnn_kwargs={**SMALL_CNN, "in_features": 3})
    assert bool((built.features[0].bias == 0).all())


@pytest.mark.parametrize("batch", [(), (2, 3)])
def test_mlp_shapes_and_formula(batch: tuple[int, ...]) -> None:
    net = _small_mlp(out_features=3, out_features_value=1)
    x = torch.rand(*batch, 6)
    q = net(x)
    assert q.shape == (*batch, 3)
    torch.testing.assert_close(q.mean(-1, keepdim=True), net.value(net.features(x)))


def test_mlp_shaped_out_features_broadcasts_value_per_sample() -> None:
    net = _small_mlp(out_features=(3, 2))
    x = torch.rand(4, 6)
    q = net(x)
    assert q.shape == (4, 3, 2)
    value = net.value(net.features(x))
    torch.testing.assert_close(q.mean(-1), value.expand(4, 3))


def test_default_mlp_trunk_is_torchrl_s() -> None:
    net = DuelingMlpDQNet(out_features=2)
    linear = [m for m in net.features if isinstance(m, nn.Linear)]
    assert [m.out_features for m in linear] == [256, 256, 256]
    assert isinstance(net.features[-1], nn.ELU)  # activate_last_layer=True


def test_bad_kwargs_are_refused() -> None:
    with pytest.raises(TypeError, match=r"DuelingCnnDQNet\.__init__: cnn_kwargs"):
        DuelingCnnDQNet(2, cnn_kwargs=[{"num_cells": [4]}])
    with pytest.raises(ValueError, match=r"DuelingCnnDQNet\.__init__: mlp_kwargs sets out_feat"):
        DuelingCnnDQNet(2, mlp_kwargs={"out_features": 3})
    with pytest.raises(TypeError, match=r"DuelingMlpDQNet\.__init__: mlp_kwargs_output"):
        DuelingMlpDQNet(2, mlp_kwargs_output=3)
