"""Tests of the plain models: MLP, ConvNet, NormalParamExtractor."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from tdrl.modules import MLP, ConvNet, NormalParamExtractor
from tdrl.modules.models import SquashDims


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)


def _kinds(net: nn.Module) -> list[type[nn.Module]]:
    return [type(m) for m in net]


class TestMLP:
    @pytest.mark.parametrize("batch", [(), (2, 3)])
    def test_shapes_int_and_tuple_out(self, batch: tuple[int, ...]) -> None:
        x = torch.randn(*batch, 5)
        assert MLP(5, 4, num_cells=8)(x).shape == (*batch, 4)
        assert MLP(5, (2, 3), num_cells=[8, 8])(x).shape == (*batch, 2, 3)

    def test_default_is_one_linear_layer(self) -> None:
        # TorchRL 0.14: "depth defaults to 0 (the network contains a single linear layer)".
        mlp = MLP(4, 2)
        assert _kinds(mlp) == [nn.Linear]
        assert (mlp[0].in_features, mlp[0].out_features) == (4, 2)
        assert mlp[0].bias is not None

    def test_depth_alone_gives_32_cells(self) -> None:
        # TorchRL: num_cells defaults to 32 per hidden layer when only depth is given.
        mlp = MLP(4, 2, depth=3)
        assert _kinds(mlp) == [nn.Linear, nn.Tanh] * 3 + [nn.Linear]
        assert [m.out_features for m in mlp if isinstance(m, nn.Linear)] == [32, 32, 32, 2]

    def test_positional_order_is_torchrl(self) -> None:
        # (in_features, out_features, depth, num_cells, activation_class, activation_kwargs)
        mlp = MLP(3, 2, 1, 8, nn.LeakyReLU, {"negative_slope": 0.5})
        assert _kinds(mlp) == [nn.Linear, nn.LeakyReLU, nn.Linear]
        assert mlp[0].out_features == 8 and mlp[1].negative_slope == 0.5

    def test_out_features_required(self) -> None:
        with pytest.raises(ValueError, match="out_features is missing"):
            MLP(3)

    def test_lazy_in_features(self) -> None:
        mlp = MLP(out_features=2, num_cells=8)
        assert mlp(torch.randn(3, 7)).shape == (3, 2)
        assert mlp[0].in_features == 7

    def test_depth_and_list(self) -> None:
        linears = [m for m in MLP(3, 1, num_cells=16, depth=3) if isinstance(m, nn.Linear)]
        assert [m.out_features for m in linears] == [16, 16, 16, 1]
        linears = [m for m in MLP(3, 1, num_cells=[4, 8]) if isinstance(m, nn.Linear)]
        assert [m.out_features for m in linears] == [4, 8, 1]
        assert len([m for m in MLP(3, 1, num_cells=4, depth=0)]) == 1
        # tdrl extension kept for existing code: an int num_cells without depth is 2 layers.
        assert len([m for m in MLP(3, 1, num_cells=4) if isinstance(m, nn.Linear)]) == 3

    def test_activation_and_last_layer(self) -> None:
        mlp = MLP(3, 2, num_cells=[4], activation_class=nn.ReLU, activate_last_layer=True)
        assert isinstance(mlp[-1], nn.ReLU)
        assert bool((mlp(torch.randn(50, 3)) >= 0).all())
        assert not isinstance(MLP(3, 2, num_cells=[4])[-1], nn.Tanh)
        legacy = MLP(3, 2, num_cells=[4], activation=nn.ReLU)
        assert isinstance(legacy[1], nn.ReLU)
        with pytest.raises(ValueError, match="disagree"):
            MLP(3, 2, activation=nn.ReLU, activation_class=nn.ELU)

    def test_per_layer_activation_kwargs(self) -> None:
        kwargs = [{"negative_slope": 0.1}, {"negative_slope": 0.2}, {"negative_slope": 0.3}]
        mlp = MLP(3, 2, 2, 4, nn.LeakyReLU, kwargs, activate_last_layer=True)
        slopes = [m.negative_slope for m in mlp if isinstance(m, nn.LeakyReLU)]
        assert slopes == [0.1, 0.2, 0.3]
        with pytest.raises(ValueError, match="activation_kwargs has the wrong length"):
            MLP(3, 2, 2, 4, nn.LeakyReLU, kwargs[:2], activate_last_layer=True)

    def test_concatenates_inputs(self) -> None:
        mlp = MLP(5, 1, num_cells=8)
        a, b = torch.randn(4, 3), torch.randn(4, 2)
        torch.testing.assert_close(mlp(a, b), mlp(torch.cat([a, b], -1)))

    def test_dropout_norm_activation_order(self) -> None:
        # TorchRL builds Linear, Dropout, norm, activation for each hidden layer.
        mlp = MLP(3, 2, num_cells=[4], norm_class=nn.LayerNorm, dropout=0.5)
        assert _kinds(mlp) == [nn.Linear, nn.Dropout, nn.LayerNorm, nn.Tanh, nn.Linear]
        mlp = MLP(3, 2, num_cells=[4], norm_class=nn.LayerNorm, norm_kwargs={"normalized_shape": 4})
        assert mlp[1].normalized_shape == (4,)
        # dropout=0.0 is a Dropout(p=0) layer; only None means no dropout.
        assert nn.Dropout in _kinds(MLP(3, 2, num_cells=[4], dropout=0.0))
        assert _kinds(MLP(3, 2, num_cells=[4], activate_last_layer=True, dropout=0.1)) == [
            nn.Linear,
            nn.Dropout,
            nn.Tanh,
            nn.Linear,
            nn.Dropout,
            nn.Tanh,
        ]

    def test_bias_options(self) -> None:
        assert MLP(3, 2, num_cells=[4], bias_last_layer=False)[-1].bias is None
        mlp = MLP(3, 2, num_cells=[4], single_bias_last_layer=True)
        assert mlp[2].bias is None and mlp[3].bias.shape == (1,)
        with torch.no_grad():
            mlp[3].bias.fill_(2.0)
        x = torch.randn(5, 3)
        torch.testing.assert_close(mlp(x), mlp[2](mlp[1](mlp[0](x))) + 2.0)
        mlp = MLP(3, 2, num_cells=[4], layer_kwargs=[{"bias": False}, {}])
        assert mlp[0].bias is None and mlp[2].bias is not None

    def test_layer_class(self) -> None:
        class Scaled(nn.Linear):
            pass

        mlp = MLP(3, 2, num_cells=[4], layer_class=Scaled)
        assert _kinds(mlp) == [Scaled, nn.Tanh, Scaled]
        with pytest.raises(ValueError, match="lazy first layer"):
            MLP(out_features=2, layer_class=Scaled)

    def test_out_shape_has_no_extra_layer(self) -> None:
        mlp = MLP(3, (2, 3), num_cells=[4])
        assert _kinds(mlp) == [nn.Linear, nn.Tanh, nn.Linear]
        assert mlp.out_features == (2, 3)

    def test_bad_depth(self) -> None:
        with pytest.raises(ValueError, match="depth does not match"):
            MLP(3, 1, num_cells=[4, 4], depth=3)
        with pytest.raises(ValueError, match="non-negative int"):
            MLP(3, 1, depth=-1)


class TestConvNet:
    @pytest.mark.parametrize("batch", [(), (2, 3)])
    def test_shapes(self, batch: tuple[int, ...]) -> None:
        net = ConvNet(num_cells=[4, 8], kernel_sizes=[3, 3], strides=[2, 1], paddings=1)
        out = net(torch.randn(*batch, 3, 8, 8))
        assert out.shape == (*batch, 8 * 4 * 4)

    def test_defaults_are_torchrl(self) -> None:
        # TorchRL: three 3x3 convolutions of 32 channels, ELU, then SquashDims.
        net = ConvNet(3)
        assert _kinds(net) == [nn.Conv2d, nn.ELU] * 3 + [SquashDims]
        assert [m.out_channels for m in net if isinstance(m, nn.Conv2d)] == [32, 32, 32]
        assert net[0].kernel_size == (3, 3) and net.out_features == 32

    def test_positional_order_and_norm_after_activation(self) -> None:
        # (in_features, depth, num_cells, kernel_sizes, strides, paddings, activation_class)
        net = ConvNet(3, 2, 4, 3, 1, 0, nn.ReLU, None, nn.BatchNorm2d)
        assert _kinds(net) == [nn.Conv2d, nn.ReLU, nn.BatchNorm2d] * 2 + [SquashDims]
        net = ConvNet(3, 1, 4, norm_class=nn.BatchNorm2d, norm_kwargs={"num_features": 4})
        assert net[2].num_features == 4

    def test_aggregator_and_last_bias(self) -> None:
        net = ConvNet(3, num_cells=[4, 1], kernel_sizes=[3, 4], aggregator_class=None)
        assert net(torch.randn(2, 3, 6, 6)).shape == (2, 1, 1, 1)
        net = ConvNet(
            3, num_cells=[4, 5], kernel_sizes=[3, 4], aggregator_class=None, squeeze_output=True
        )
        assert net(torch.randn(2, 3, 6, 6)).shape == (2, 5)
        assert ConvNet(3, num_cells=[4, 5], bias_last_layer=False)[2].bias is None

    def test_matches_unbatched(self) -> None:
        net = ConvNet(3, num_cells=[4])
        x = torch.randn(2, 3, 3, 6, 6)
        torch.testing.assert_close(net(x)[1, 2], net(x[1, 2]))

    def test_errors(self) -> None:
        with pytest.raises(ValueError, match="kernel_sizes has the wrong length"):
            ConvNet(num_cells=[4, 4], kernel_sizes=[3])
        with pytest.raises(ValueError, match="depth is unknown"):
            ConvNet(num_cells=4)
        with pytest.raises(ValueError, match="at least 1"):
            ConvNet(depth=0, num_cells=4)
        with pytest.raises(ValueError, match="at least 3 dims"):
            ConvNet(num_cells=[4])(torch.zeros(4, 4))


class TestNormalParamExtractor:
    @pytest.mark.parametrize(
        ("mapping", "expected_at_zero"),
        [("softplus", math.log(2.0)), ("exp", 1.0), ("biased_softplus_1.0", 1.0)],
    )
    def test_mappings(self, mapping: str, expected_at_zero: float) -> None:
        loc, scale = NormalParamExtractor(mapping)(torch.zeros(2, 6))
        assert loc.shape == scale.shape == (2, 3)
        torch.testing.assert_close(scale, torch.full((2, 3), expected_at_zero))

    def test_biased_softplus_value(self) -> None:
        _, scale = NormalParamExtractor("biased_softplus_0.5")(torch.zeros(1, 2))
        torch.testing.assert_close(scale, torch.full((1, 1), 0.5))

    def test_scale_lb(self) -> None:
        _, scale = NormalParamExtractor("exp", scale_lb=0.1)(torch.full((1, 2), -100.0))
        assert scale.item() == pytest.approx(0.1)

    def test_torchrl_biased_softplus_away_from_zero(self) -> None:
        # TorchRL (tensordict): softplus(x + inv_softplus(b - 0.01)) + 0.01; "_<b>_<m>" sets
        # the minimum m (a plain softplus shifted to give b at 0 differs away from 0).
        x = torch.tensor([[0.0, -3.0], [0.0, 2.0]])
        _, scale = NormalParamExtractor()(x)
        shift = math.log(math.expm1(0.99))
        expected = torch.nn.functional.softplus(x[:, 1:] + shift) + 0.01
        torch.testing.assert_close(scale, expected)
        plain = torch.nn.functional.softplus(x[:, 1:] + math.log(math.expm1(1.0)))
        assert not torch.allclose(scale, plain)
        _, scale = NormalParamExtractor("biased_softplus_2.0_0.5")(torch.zeros(1, 2))
        torch.testing.assert_close(scale, torch.full((1, 1), 2.0))
        _, scale = NormalParamExtractor("biased_softplus")(torch.zeros(1, 2))
        torch.testing.assert_close(scale, torch.full((1, 1), 1.0))

    @pytest.mark.parametrize(
        ("mapping", "fn"),
        [("relu", torch.relu), ("none", lambda t: t), ("expln", lambda t: t.log1p() + 1)],
    )
    def test_other_torchrl_mappings(self, mapping, fn) -> None:
        x = torch.tensor([[0.0, 0.5], [1.0, 2.0]])
        _, scale, extra = NormalParamExtractor(mapping)(x, torch.ones(3))
        torch.testing.assert_close(scale, fn(x[:, 1:]).clamp_min(1e-4))
        assert extra.shape == (3,)  # extra inputs pass through, as TorchRL's

    def test_errors(self) -> None:
        with pytest.raises(ValueError, match="unknown scale mapping"):
            NormalParamExtractor("tanh")
        with pytest.raises(ValueError, match="unknown scale mapping"):
            NormalParamExtractor("biased_softplus_-1")
        with pytest.raises(ValueError, match="must be even"):
            NormalParamExtractor()(torch.zeros(3))

    def test_gradients_flow(self) -> None:
        x = torch.randn(4, 6, requires_grad=True)
        loc, scale = NormalParamExtractor()(x)
        (loc.sum() + scale.sum()).backward()
        assert x.grad is not None and bool((x.grad != 0).all())
