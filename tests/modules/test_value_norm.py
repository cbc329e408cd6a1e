"""Value normalisers: TorchRL 0.14.1's numbers, plain-computation references, state and errors."""

from __future__ import annotations

import pytest
import torch

from tdrl.modules import PercentileValueNorm, PopArtValueNorm, RunningValueNorm, ValueNorm

PROBE = torch.tensor([[0.5, -1.0], [2.0, 3.0]])


def _batches() -> list[torch.Tensor]:
    base = torch.arange(24, dtype=torch.float32).reshape(4, 3, 2)
    return [base.sin() * 3 + 1.0, base.cos() * 5 - 2.0, (base / 7).tanh() * 10]


def _fed(vn: ValueNorm) -> ValueNorm:
    for x in _batches():
        vn.update(x)
    vn.update(torch.tensor([2.0, -1.0]))  # one element: no leading dim to reduce
    return vn


# Obtained from TorchRL 0.14.1 (torchrl.modules.<same class>, same constructor arguments) fed
# _batches() then [2.0, -1.0]: the state dict, normalize(PROBE), denormalize(PROBE) and scale().
TORCHRL = {
    "popart": (
        lambda: PopArtValueNorm(shape=2, beta=0.9),
        {
            "running_mean": [0.8015464544296265, 0.5181933641433716],
            "running_mean_sq": [8.225114822387695, 8.278911590576172],
            "debiasing_term": 0.34389999508857727,
        },
        [[-0.4258172810077667, -0.5368621945381165], [-0.07693057507276535, 0.31978243589401245]],
        [[4.480449676513672, -3.162566661834717], [10.929533958435059, 15.5149564743042]],
        [4.299389839172363, 4.6693806648254395],
    ),
    "running": (
        lambda: RunningValueNorm(shape=2),
        {
            "mean": [2.2283310890197754, 2.195453405380249],
            "m2": [897.0926513671875, 946.8203125],
            "count": 37.0,
        },
        [[-0.35100165009498596, -0.6316835880279541], [-0.046371087431907654, 0.15904437005519867]],
        [[4.690329551696777, -2.8631765842437744], [12.076324462890625, 17.3713436126709]],
        [4.923996925354004, 5.058629989624023],
    ),
    "percentile": (
        lambda: PercentileValueNorm(shape=2, rate=0.5),
        {
            "low": [0.4432699680328369, -0.7473505735397339],
            "high": [4.096194267272949, 2.549842596054077],
        },
        [[0.13687664270401, -0.3032882809638977], [0.54750657081604, 0.9098648428916931]],
        [[1.8264621496200562, -3.2971930503845215], [7.305848598480225, 9.891578674316406]],
        [3.6529242992401123, 3.2971930503845215],
    ),
    "percentile_centered": (
        lambda: PercentileValueNorm(shape=2, rate=0.5, center=True, min_scale=0.5),
        {
            "low": [0.4432699680328369, -0.7473505735397339],
            "high": [4.096194267272949, 2.549842596054077],
        },
        [[0.015530032105743885, -0.07662560790777206], [0.42615994811058044, 1.1365275382995605]],
        [[2.2697319984436035, -4.044543743133545], [7.749118804931641, 9.144227981567383]],
        [3.6529242992401123, 3.2971930503845215],
    ),
}


@pytest.mark.parametrize("name", sorted(TORCHRL))
def test_matches_torchrl(name: str) -> None:
    build, state, normed, denormed, scale = TORCHRL[name]
    vn = _fed(build())
    got = vn.state_dict()
    assert list(got) == list(state)
    for key, value in state.items():
        torch.testing.assert_close(got[key], torch.tensor(value), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(vn.normalize(PROBE), torch.tensor(normed), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(vn.denormalize(PROBE), torch.tensor(denormed), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(vn.scale(), torch.tensor(scale), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("batch", [(), (2, 3)])
def test_running_is_the_exact_mean_and_population_variance(batch: tuple[int, ...]) -> None:
    chunks = [torch.randn(*batch, 4, generator=torch.Generator().manual_seed(i)) for i in range(5)]
    vn = RunningValueNorm(shape=4)
    for chunk in chunks:
        vn.update(chunk)
    everything = torch.stack(chunks).reshape(-1, 4).double()
    torch.testing.assert_close(vn.mean.double(), everything.mean(0), rtol=1e-5, atol=1e-6)
    var = everything.var(0, unbiased=False)
    torch.testing.assert_close(vn.scale().double(), var.sqrt(), rtol=1e-5, atol=1e-6)
    assert vn.count.item() == everything.shape[0]


def test_popart_follows_the_debiased_moving_average() -> None:
    beta, chunks = 0.8, [torch.full((3, 1), v) for v in (1.0, 4.0, -2.0)]
    vn = PopArtValueNorm(beta=beta)
    mean = mean_sq = debias = 0.0
    for chunk in chunks:
        vn.update(chunk)
        value = chunk[0, 0].item()
        mean = beta * mean + (1 - beta) * value
        mean_sq = beta * mean_sq + (1 - beta) * value**2
        debias = beta * debias + (1 - beta)
    ref_mean, ref_var = mean / debias, mean_sq / debias - (mean / debias) ** 2
    got = vn.normalize(torch.tensor([[1.0]])).item()
    assert got == pytest.approx((1.0 - ref_mean) / ref_var**0.5, rel=1e-5)
    assert vn.denormalize(torch.tensor([[0.0]])).item() == pytest.approx(ref_mean, rel=1e-5)


@pytest.mark.parametrize("name", sorted(TORCHRL))
def test_state_dict_round_trip(name: str) -> None:
    build = TORCHRL[name][0]
    source, target = _fed(build()), build()
    assert not torch.equal(target.normalize(PROBE), source.normalize(PROBE))
    target.load_state_dict(source.state_dict())
    assert torch.equal(target.normalize(PROBE), source.normalize(PROBE))
    assert torch.equal(target.denormalize(PROBE), source.denormalize(PROBE))


@pytest.mark.parametrize("cls", [PopArtValueNorm, RunningValueNorm, PercentileValueNorm])
def test_update_takes_no_gradient_and_normalize_keeps_it(cls: type[ValueNorm]) -> None:
    vn = cls(shape=1)
    target = torch.randn(8, 1, requires_grad=True)
    vn.update(target * 2)
    assert all(not b.requires_grad for b in vn.buffers())
    vn.normalize(target).sum().backward()
    assert target.grad is not None
    assert torch.allclose(target.grad, 1 / vn.scale().expand(8, 1))


def test_normalize_then_denormalize_is_the_identity() -> None:
    vn = _fed(PopArtValueNorm(shape=2, beta=0.9))
    torch.testing.assert_close(vn.denormalize(vn.normalize(PROBE)), PROBE)


@pytest.mark.parametrize("cls", [PopArtValueNorm, RunningValueNorm, PercentileValueNorm])
def test_update_refuses_a_wrong_trailing_shape(cls: type[ValueNorm]) -> None:
    vn = cls(shape=2)
    with pytest.raises(ValueError, match=rf"{cls.__name__}\.update: .*got shape \(5, 3\)"):
        vn.update(torch.zeros(5, 3))
    with pytest.raises(ValueError, match="expected trailing dims"):
        cls(shape=(2, 3)).update(torch.zeros(3))


def test_value_norm_is_abstract_and_scale_must_be_defined() -> None:
    with pytest.raises(TypeError):
        ValueNorm()

    class NoScale(ValueNorm):
        def update(self, value_target: torch.Tensor) -> None:
            pass

        def normalize(self, value_target: torch.Tensor) -> torch.Tensor:
            return value_target

        def denormalize(self, normalised_value: torch.Tensor) -> torch.Tensor:
            return normalised_value

    with pytest.raises(NotImplementedError, match=r"NoScale\.scale"):
        NoScale().scale()


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"quantiles": (0.9, 0.1)}, "quantiles"),
        ({"quantiles": (0.1, 1.5)}, "quantiles"),
        ({"rate": 1.5}, "rate"),
        ({"min_scale": 0.0}, "min_scale"),
        ({"shape": 0}, "shape"),
    ],
)
def test_percentile_refuses_bad_arguments(kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(ValueError, match=rf"PercentileValueNorm\.__init__: {match}"):
        PercentileValueNorm(**kwargs)


def test_defaults_are_torchrl_s() -> None:
    popart = PopArtValueNorm()
    assert (popart.shape, popart.beta, popart.epsilon) == ((1,), 0.99999, 1e-5)
    pct = PercentileValueNorm()
    assert (pct.quantiles, pct.rate, pct.min_scale, pct.center) == ((0.05, 0.95), 0.01, 1.0, False)
    assert RunningValueNorm(shape=(2, 3)).mean.shape == (2, 3)
