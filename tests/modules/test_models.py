"""Tests of the plain models: MLP, ConvNet, NormalParamExtractor."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from tdrl.modules import MLP, ConvNet, NormalParamExtractor


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)


class TestMLP:
    @pytest.mark.parametrize("batch", [(), (2, 3)])
    def test_shapes_int_and_tuple_out(self, batch: tuple[int, ...]) -> None:
        x = torch.randn(*batch, 5)
        assert MLP(5, 4, num_cells=8)(x).shape == (*batch, 4)
        assert MLP(5, (2, 3), num_cells=[8, 8])(x).shape == (*batch, 2, 3)

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

    def test_activation_and_last_layer(self) -> None:
        mlp = MLP(3, 2, num_cells=4, activation=nn.ReLU, activate_last_layer=True)
        assert isinstance(mlp[-1], nn.ReLU)
        assert bool((mlp(torch.randn(50, 3)) >= 0).all())
        assert not isinstance(MLP(3, 2, num_cells=4)[-1], nn.Tanh)

    def test_concatenates_inputs(self) -> None:
        mlp = MLP(5, 1, num_cells=8)
        a, b = torch.randn(4, 3), torch.randn(4, 2)
        torch.testing.assert_close(mlp(a, b), mlp(torch.cat([a, b], -1)))

    def test_norm_and_dropout(self) -> None:
        mlp = MLP(3, 2, num_cells=[4], norm_class=nn.LayerNorm, dropout=0.5)
        kinds = [type(m) for m in mlp]
        assert kinds == [nn.Linear, nn.LayerNorm, nn.Tanh, nn.Dropout, nn.Linear]

    def test_bad_depth(self) -> None:
        with pytest.raises(ValueError, match="depth does not match"):
            MLP(3, 1, num_cells=[4, 4], depth=3)


class TestConvNet:
    @pytest.mark.parametrize("batch", [(), (2, 3)])
    def test_shapes(self, batch: tuple[int, ...]) -> None:
        net = ConvNet(num_cells=[4, 8], kernel_sizes=[3, 3], strides=[2, 1], paddings=1)
        out = net(torch.randn(*batch, 3, 8, 8))
        assert out.shape == (*batch, 8 * 4 * 4)

    def test_matches_unbatched(self) -> None:
        net = ConvNet(3, num_cells=[4])
        x = torch.randn(2, 3, 3, 6, 6)
        torch.testing.assert_close(net(x)[1, 2], net(x[1, 2]))

    def test_errors(self) -> None:
        with pytest.raises(ValueError, match="kernel_sizes has the wrong length"):
            ConvNet(num_cells=[4, 4], kernel_sizes=[3])
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

    def test_errors(self) -> None:
        with pytest.raises(ValueError, match="unknown scale mapping"):
            NormalParamExtractor("relu")
        with pytest.raises(ValueError, match="unknown scale mapping"):
            NormalParamExtractor("biased_softplus_-1")
        with pytest.raises(ValueError, match="must be even"):
            NormalParamExtractor()(torch.zeros(3))

    def test_gradients_flow(self) -> None:
        x = torch.randn(4, 6, requires_grad=True)
        loc, scale = NormalParamExtractor()(x)
        (loc.sum() + scale.sum()).backward()
        assert x.grad is not None and bool((x.grad != 0).all())
