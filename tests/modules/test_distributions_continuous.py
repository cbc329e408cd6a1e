"""Tests of the continuous and deterministic distributions."""

from __future__ import annotations

import math

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import InteractionType, ProbabilisticTensorDictModule, set_interaction_type

from tdrl.modules.distributions import (
    Delta,
    IndependentNormal,
    TanhDelta,
    TanhNormal,
    TruncatedNormal,
)

BATCH_SHAPES = [(), (2, 3)]
D = 4  # event (action) dimension


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)


def _params(batch_shape, dtype=torch.float32):
    loc = torch.randn(*batch_shape, D, dtype=dtype)
    scale = torch.rand(*batch_shape, D, dtype=dtype) + 0.3
    return loc, scale


def _reference_tanh_log_prob(value, loc, scale, low, high):
    """log p(y) in float64, by the plain change of variables with log(1 - u^2)."""
    value, loc, scale = value.double(), loc.double(), scale.double()
    low = torch.as_tensor(low, dtype=torch.float64)
    high = torch.as_tensor(high, dtype=torch.float64)
    half = (high - low) / 2
    u = (value - (high + low) / 2) / half
    x = torch.atanh(u)
    normal = torch.distributions.Normal(loc, scale).log_prob(x)
    return (normal - torch.log1p(-u * u) - half.log()).sum(-1)


# --------------------------------------------------------------------------- TanhNormal


@pytest.mark.parametrize("batch_shape", BATCH_SHAPES)
@pytest.mark.parametrize("bounds", [(-1.0, 1.0), (-3.0, 0.5), "tensor"])
def test_tanh_normal_log_prob_matches_change_of_variables(batch_shape, bounds):
    if bounds == "tensor":
        low, high = torch.tensor([-1.0, 0.0, -5.0, 2.0]), torch.tensor([1.0, 0.1, 5.0, 3.0])
    else:
        low, high = bounds
    loc, scale = _params(batch_shape, torch.float64)
    dist = TanhNormal(loc, scale, low=low, high=high)
    assert dist.batch_shape == batch_shape and dist.event_shape == (D,)
    value = dist.sample((50,))
    assert ((value >= dist.low) & (value <= dist.high)).all()
    expected = _reference_tanh_log_prob(value, loc, scale, low, high)
    torch.testing.assert_close(dist.log_prob(value), expected)
    sample, joint = dist.rsample_and_log_prob((50,))
    torch.testing.assert_close(joint, _reference_tanh_log_prob(sample, loc, scale, low, high))
    mode = (dist.high + dist.low) / 2 + (dist.high - dist.low) / 2 * torch.tanh(loc)
    torch.testing.assert_close(dist.mode, mode)
    torch.testing.assert_close(dist.deterministic_sample, mode)


def test_tanh_normal_density_is_derivative_of_cdf():
    """1-d check: p(y) = d/dy Phi((atanh(u(y)) - loc) / scale), finite differences in float64."""
    loc, scale = torch.tensor([0.4], dtype=torch.float64), torch.tensor([0.8], dtype=torch.float64)
    low, high = -2.0, 3.0
    dist = TanhNormal(loc, scale, low=low, high=high)
    y = torch.linspace(low + 0.05, high - 0.05, 101, dtype=torch.float64).unsqueeze(-1)

    def cdf(v):
        x = torch.atanh((v - (high + low) / 2) / ((high - low) / 2))
        return torch.special.ndtr((x - loc) / scale)

    h = 1e-6
    numeric = ((cdf(y + h) - cdf(y - h)) / (2 * h)).squeeze(-1)
    torch.testing.assert_close(dist.log_prob(y).exp(), numeric, rtol=1e-5, atol=1e-8)
    grid = torch.linspace(low, high, 200_001, dtype=torch.float64).unsqueeze(-1)
    mass = torch.trapezoid(dist.log_prob(grid).exp(), grid.squeeze(-1))
    assert abs(mass.item() - 1.0) < 1e-3


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_tanh_normal_finite_at_bounds(dtype):
    low, high = torch.tensor(-2.0, dtype=dtype), torch.tensor(0.5, dtype=dtype)
    loc = torch.tensor([30.0, -30.0, 0.0, 9.5], dtype=dtype, requires_grad=True)
    scale = torch.full((D,), 0.5, dtype=dtype, requires_grad=True)
    dist = TanhNormal(loc, scale, low=low, high=high, safe_tanh=False)
    sample = dist.rsample((10,))
    assert (sample[..., 0] == high).all() and (sample[..., 1] == low).all()
    lp = dist.log_prob(sample)
    assert torch.isfinite(lp).all()
    lp.sum().backward()
    assert torch.isfinite(loc.grad).all() and torch.isfinite(scale.grad).all()
    edges = torch.stack([torch.full((D,), low), torch.full((D,), high)]).to(dtype)
    assert torch.isfinite(dist.log_prob(edges)).all()
    near = high - torch.finfo(dtype).eps * 4
    y = torch.tensor([near, 0.0, -1.0, near], dtype=dtype)
    ref = _reference_tanh_log_prob(y, loc.detach(), scale.detach(), low, high)
    # atanh is ill-conditioned next to the bound: float32 only keeps a few digits there.
    tol = 1e-2 if dtype is torch.float32 else 1e-6
    torch.testing.assert_close(dist.log_prob(y).double(), ref, rtol=tol, atol=tol)
    _, joint = dist.rsample_and_log_prob((10,))
    assert torch.isfinite(joint).all()


def test_tanh_normal_rsample_gradients_and_sample_detached():
    loc = torch.zeros(D, requires_grad=True)
    scale = torch.ones(D, requires_grad=True)
    dist = TanhNormal(loc, scale)
    dist.rsample((8,)).sum().backward()
    assert loc.grad is not None and loc.grad.abs().sum() > 0 and scale.grad is not None
    assert not dist.sample().requires_grad
    _, lp = dist.sample_and_log_prob()
    assert not lp.requires_grad


@pytest.mark.parametrize("batch_shape", BATCH_SHAPES)
def test_tanh_normal_mean_approximation(batch_shape):
    loc, scale = _params(batch_shape)
    loc, scale = loc * 2, scale * 2
    dist = TanhNormal(loc, scale, low=-1.0, high=3.0)
    mc = dist.sample((200_000,)).mean(0)
    assert (dist.mean - mc).abs().max() < 0.04 * 2 + 0.01


def test_tanh_normal_options_and_errors():
    loc = torch.full((D,), 100.0)
    dist = TanhNormal(loc, torch.ones(D), tanh_loc=True, upscale=3.0)
    torch.testing.assert_close(dist.loc, torch.full((D,), 3.0))
    with pytest.raises(NotImplementedError, match="samples_mc_entropy"):
        dist.entropy()
    with pytest.raises(ValueError, match="low must be smaller than high"):
        TanhNormal(loc, torch.ones(D), low=1.0, high=1.0)
    with pytest.raises(ValueError, match="low must be smaller than high"):
        TanhNormal(loc, torch.ones(D), low=torch.ones(D), high=torch.zeros(D), validate_args=True)
    with pytest.raises(ValueError, match="event_dims is out of range"):
        TanhNormal(torch.zeros(D), torch.ones(D), event_dims=2)
    checked = TanhNormal(torch.zeros(D), torch.ones(D), validate_args=True)
    with pytest.raises(ValueError):
        checked.log_prob(torch.full((D,), 2.0))
    assert checked.support.check(torch.zeros(D))


def test_tanh_normal_in_probabilistic_module():
    td = TensorDict({"loc": torch.randn(5, D), "scale": torch.ones(5, D)}, batch_size=[5])
    module = ProbabilisticTensorDictModule(
        in_keys=["loc", "scale"],
        out_keys=["action"],
        distribution_class=TanhNormal,
        distribution_kwargs={"low": -2.0, "high": 2.0},
        return_log_prob=True,
        default_interaction_type=InteractionType.RANDOM,
    )
    out = module(td.clone())
    action, lp = out["action"], out["action_log_prob"]
    assert action.shape == (5, D) and lp.shape == (5,)
    dist = TanhNormal(td["loc"], td["scale"], low=-2.0, high=2.0)
    torch.testing.assert_close(lp, dist.log_prob(action), rtol=1e-4, atol=1e-4)
    with set_interaction_type("deterministic"):
        torch.testing.assert_close(module(td.clone())["action"], 2.0 * torch.tanh(td["loc"]))
    with set_interaction_type("mean"):
        torch.testing.assert_close(module(td.clone())["action"], dist.mean)


# ----------------------------------------------------------------------- IndependentNormal


@pytest.mark.parametrize("batch_shape", BATCH_SHAPES)
def test_independent_normal(batch_shape):
    loc, scale = _params(batch_shape)
    dist = IndependentNormal(loc, scale)
    assert dist.batch_shape == batch_shape and dist.event_shape == (D,)
    value = torch.randn(7, *batch_shape, D)
    normal = torch.distributions.Normal(loc, scale)
    torch.testing.assert_close(dist.log_prob(value), normal.log_prob(value).sum(-1))
    torch.testing.assert_close(dist.entropy(), normal.entropy().sum(-1))
    assert torch.equal(dist.mode, loc) and torch.equal(dist.deterministic_sample, loc)
    assert torch.equal(dist.mean, loc)
    assert dist.rsample((3,)).shape == (3, *batch_shape, D)
    expanded = dist.expand((5, *batch_shape))
    assert expanded.batch_shape == (5, *batch_shape)
    squashed = IndependentNormal(loc * 100, scale, tanh_loc=True, upscale=2.0)
    assert (squashed.loc.abs() <= 2.0).all()


# ------------------------------------------------------------------------ TruncatedNormal

CASES = [
    (0.0, 1.0, -1.0, 1.0),  # centred
    (0.3, 0.2, -1.0, 1.0),  # narrow, mostly inside
    (-3.0, 0.5, 1.0, 2.0),  # box in the upper tail (mirrored computation)
    (4.0, 1.0, -1.0, 1.0),  # box in the lower tail
]


@pytest.mark.parametrize("batch_shape", BATCH_SHAPES)
@pytest.mark.parametrize("case", CASES)
def test_truncated_normal(batch_shape, case):
    mu, sigma, low, high = case
    loc = torch.full((*batch_shape, 1), mu, dtype=torch.float64)
    scale = torch.full((*batch_shape, 1), sigma, dtype=torch.float64)
    dist = TruncatedNormal(loc, scale, low=low, high=high)
    assert dist.batch_shape == batch_shape and dist.event_shape == (1,)
    samples = dist.sample((20_000,))
    assert samples.shape == (20_000, *batch_shape, 1)
    assert ((samples >= low) & (samples <= high)).all()
    grid = torch.linspace(low, high, 20_001, dtype=torch.float64)
    points = grid.reshape(-1, *([1] * len(batch_shape)), 1).expand(-1, *batch_shape, 1)
    density = dist.log_prob(points).exp()
    mass = torch.trapezoid(density, grid, dim=0)
    torch.testing.assert_close(
        mass, torch.ones(batch_shape, dtype=torch.float64), atol=1e-6, rtol=0
    )
    mean = torch.trapezoid(density * grid.reshape(-1, *([1] * len(batch_shape))), grid, dim=0)
    torch.testing.assert_close(dist.mean.squeeze(-1), mean, atol=1e-6, rtol=0)
    std = dist.variance.sqrt().squeeze(-1)
    sample_mean = samples.mean(0).squeeze(-1)
    assert ((sample_mean - mean).abs() < 5 * std / math.sqrt(20_000) + 1e-9).all()
    torch.testing.assert_close(samples.var(0).squeeze(-1), std**2, rtol=0.12, atol=1e-9)
    entropy = -torch.trapezoid(density * density.log(), grid, dim=0)
    torch.testing.assert_close(dist.entropy(), entropy, atol=1e-5, rtol=0)
    torch.testing.assert_close(dist.mode, loc.clamp(low, high))
    torch.testing.assert_close(dist.deterministic_sample, dist.mean)
    outside = torch.full((*batch_shape, 1), high + 0.1, dtype=torch.float64)
    assert (dist.log_prob(outside) == -math.inf).all()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("case", CASES)
def test_truncated_normal_cdf_matches_samples(case, dtype):
    mu, sigma, low, high = case
    dist = TruncatedNormal(
        torch.tensor([mu], dtype=dtype), torch.tensor([sigma], dtype=dtype), low=low, high=high
    )
    samples = dist.sample((40_000,))
    # 1%, 10%, 50%, 90% quantiles, found on a grid of the CDF
    grid = torch.linspace(low, high, 10_001, dtype=dtype).unsqueeze(-1)
    cdf = dist.cdf(grid).squeeze(-1)
    assert (cdf.diff() >= 0).all() and cdf[0] == 0 and abs(cdf[-1].item() - 1) < 1e-5
    for level in (0.01, 0.1, 0.5, 0.9):
        q = grid[torch.searchsorted(cdf, level)]
        empirical = (samples <= q).double().mean().item()
        assert abs(empirical - dist.cdf(q).item()) < 0.01


def test_truncated_normal_pathwise_gradient_matches_inverse_cdf():
    loc = torch.tensor([0.3, -0.5, 2.0, -2.0], dtype=torch.float64, requires_grad=True)
    scale = torch.tensor([0.5, 1.0, 0.7, 0.4], dtype=torch.float64, requires_grad=True)
    torch.manual_seed(1)
    x = TruncatedNormal(loc, scale, low=-1.0, high=1.0).rsample((500,))
    grads = torch.autograd.grad((x * x).sum(), [loc, scale])
    # Reference: plain autograd through x = loc + scale * ndtri(Phi(a) + u (Phi(b) - Phi(a))),
    # in the mirrored frame (z -> -z) for the last box, which lies in the upper tail.
    torch.manual_seed(1)
    u = torch.rand(500, 4, dtype=torch.float64)
    sign = torch.tensor([1.0, 1.0, 1.0, -1.0], dtype=torch.float64)
    a, b = (-1.0 - loc) / scale, (1.0 - loc) / scale
    a, b = torch.where(sign > 0, a, -b), torch.where(sign > 0, b, -a)
    cdf_a, cdf_b = torch.special.ndtr(a), torch.special.ndtr(b)
    ref = loc + scale * sign * torch.special.ndtri(cdf_a + u * (cdf_b - cdf_a))
    ref_grads = torch.autograd.grad((ref * ref).sum(), [loc, scale])
    torch.testing.assert_close(x, ref)
    for got, want in zip(grads, ref_grads):
        torch.testing.assert_close(got, want)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_truncated_normal_extreme_tails_stay_in_box(dtype):
    loc = torch.tensor([60.0, -60.0, 0.0, 14.0], dtype=dtype, requires_grad=True)
    scale = torch.tensor([1.0, 1.0, 1e-3, 1.0], dtype=dtype, requires_grad=True)
    low = torch.tensor([-1.0, -1.0, -1.0, -1.0], dtype=dtype)
    high = torch.tensor([1.0, 1.0, 1.0, 1.0], dtype=dtype)
    dist = TruncatedNormal(loc, scale, low=low, high=high)
    samples = dist.rsample((1000,))
    assert torch.isfinite(samples).all() and ((samples >= -1) & (samples <= 1)).all()
    assert (samples[:, 0] > 0.9).all() and (samples[:, 1] < -0.9).all()
    samples.sum().backward()
    assert torch.isfinite(loc.grad).all() and torch.isfinite(scale.grad).all()
    assert torch.isfinite(dist.log_prob(samples.detach())).all()
    assert torch.isfinite(dist.mean).all() and torch.isfinite(dist.entropy()).all()


def test_truncated_normal_infinite_bound_and_gradients():
    loc = torch.tensor([0.2, -0.4], requires_grad=True)
    scale = torch.tensor([1.0, 2.0], requires_grad=True)
    dist = TruncatedNormal(loc, scale, low=0.0, high=math.inf)
    samples = dist.rsample((5000,))
    assert (samples >= 0).all() and torch.isfinite(samples).all()
    assert torch.isfinite(dist.entropy()).all() and torch.isfinite(dist.mean).all()
    samples.mean().backward()
    assert loc.grad is not None and torch.isfinite(loc.grad).all() and (loc.grad > 0).all()
    with pytest.raises(ValueError, match="low must be smaller than high"):
        TruncatedNormal(loc, scale, low=1.0, high=0.0)


# ------------------------------------------------------------------------ Delta, TanhDelta


@pytest.mark.parametrize("batch_shape", BATCH_SHAPES)
def test_delta(batch_shape):
    param = torch.randn(*batch_shape, D, requires_grad=True)
    dist = Delta(param)
    assert dist.batch_shape == batch_shape and dist.event_shape == (D,)
    sample = dist.sample((3,))
    assert sample.shape == (3, *batch_shape, D) and not sample.requires_grad
    assert torch.equal(sample[0], param.detach())
    for attr in ("mode", "mean", "deterministic_sample"):
        assert torch.equal(getattr(dist, attr), param)
    value = param.detach().clone()
    assert (dist.log_prob(value) == 0).all()
    value[..., 0] += 1e-3
    assert (dist.log_prob(value) == -math.inf).all()
    assert (dist.log_prob(param.detach() + 1e-8) == 0).all()
    dist.rsample((2,)).sum().backward()
    torch.testing.assert_close(param.grad, torch.full_like(param, 2.0))
    with pytest.raises(NotImplementedError, match="entropy"):
        dist.entropy()


@pytest.mark.parametrize("batch_shape", BATCH_SHAPES)
def test_tanh_delta(batch_shape):
    param = torch.randn(*batch_shape, D, requires_grad=True)
    low, high = torch.tensor([-1.0, 0.0, 2.0, -5.0]), torch.tensor([1.0, 1.0, 3.0, 5.0])
    dist = TanhDelta(param, low=low, high=high)
    expected = (high + low) / 2 + (high - low) / 2 * torch.tanh(param)
    torch.testing.assert_close(dist.mode, expected)
    torch.testing.assert_close(dist.deterministic_sample, expected)
    sample = dist.rsample()
    assert ((sample >= low) & (sample <= high)).all()
    sample.sum().backward()
    grad = (high - low) / 2 * (1 - torch.tanh(param.detach()) ** 2)
    torch.testing.assert_close(param.grad, grad)
    assert (dist.log_prob(expected.detach()) == 0).all()
    with pytest.raises(ValueError, match="low must be smaller than high"):
        TanhDelta(param, low=2.0, high=-2.0)


def test_delta_in_probabilistic_module():
    td = TensorDict({"param": torch.randn(5, D)}, batch_size=[5])
    module = ProbabilisticTensorDictModule(
        in_keys=["param"], out_keys=["action"], distribution_class=TanhDelta
    )
    torch.testing.assert_close(module(td.clone())["action"], torch.tanh(td["param"]))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_tanh_normal_safe_tanh_keeps_samples_inside(dtype):
    # TorchRL's default safe_tanh clamps tanh to +-(1 - resolution) before the affine map.
    lim = 1.0 - torch.finfo(dtype).resolution
    loc = torch.tensor([30.0, -30.0], dtype=dtype, requires_grad=True)
    dist = TanhNormal(loc, torch.full((2,), 0.1, dtype=dtype), low=-2.0, high=0.5)
    sample = dist.rsample((4,))
    center, half = -0.75, 1.25
    expected = torch.tensor([center + half * lim, center - half * lim], dtype=dtype)
    torch.testing.assert_close(sample, expected.expand(4, 2))
    torch.testing.assert_close(dist.mode, expected)
    sample.sum().backward()
    # derivative 1 - y^2 of the clamped tanh: small but not zero at saturation
    expected_grad = 4 * half * (1.0 - lim**2)
    torch.testing.assert_close(loc.grad, torch.full((2,), expected_grad, dtype=dtype))


def test_tanh_normal_torchrl_positional_order_event_dims_and_scale():
    # (loc, scale, upscale, low, high, event_dims, tanh_loc, safe_tanh)
    loc = torch.full((3, 2), 100.0)
    dist = TanhNormal(loc, 1.0, 2.0, -1.0, 1.0, 2, True, False)
    torch.testing.assert_close(dist.loc, torch.full((3, 2), 2.0 * math.tanh(50.0)))
    assert dist.batch_shape == () and dist.event_shape == (3, 2)
    assert dist.log_prob(dist.sample()).shape == ()
    y = torch.tensor([[0.3, -0.2]])
    per_coord = TanhNormal(torch.zeros(1, 2), torch.ones_like, event_dims=0)
    assert per_coord.batch_shape == (1, 2) and per_coord.log_prob(y).shape == (1, 2)
    summed = TanhNormal(torch.zeros(1, 2), torch.ones(1, 2))
    torch.testing.assert_close(per_coord.log_prob(y).sum(-1), summed.log_prob(y))
    scalar = TanhNormal(torch.tensor(0.0), torch.tensor(1.0))
    assert scalar.event_shape == () and scalar.log_prob(torch.tensor(0.0)).shape == ()
    ref = -0.5 * math.log(2 * math.pi)  # density of tanh(x) at 0 equals the Normal's at 0
    assert scalar.log_prob(torch.tensor(0.0)).item() == pytest.approx(ref, abs=1e-6)


def test_delta_and_independent_normal_torchrl_positional_order():
    # Delta(param, atol, rtol); IndependentNormal(loc, scale, upscale, tanh_loc)
    delta = Delta(torch.zeros(2), 0.5, 0.0)
    assert delta.log_prob(torch.full((2,), 0.4)).item() == 0.0  # within atol
    assert delta.log_prob(torch.full((2,), 0.6)).item() == -math.inf
    normal = IndependentNormal(torch.full((2,), 10.0), torch.ones(2), 2.0, True)
    torch.testing.assert_close(normal.mode, torch.full((2,), 2.0 * math.tanh(5.0)))


def test_delta_batch_and_event_shape():
    # Delta(param, atol, rtol, batch_shape, event_shape): the event dims are compared together.
    param = torch.zeros(2, 3, 4)
    value = param.clone()
    value[0, 1, 2] = 1.0  # one coordinate of the first event differs
    dist = Delta(param, 1e-6, 1e-6, (2,), (3, 4))
    assert dist.batch_shape == (2,) and dist.event_shape == (3, 4)
    assert dist.log_prob(value).tolist() == [-math.inf, 0.0]
    only_event = Delta(param, event_shape=(3, 4))
    assert only_event.batch_shape == (2,) and only_event.log_prob(value).shape == (2,)
    only_batch = Delta(param, batch_shape=(2, 3))
    assert only_batch.event_shape == (4,)
    assert only_batch.log_prob(value).tolist() == [[0.0, -math.inf, 0.0], [0.0, 0.0, 0.0]]
    elementwise = Delta(param, batch_shape=(2, 3, 4))
    assert elementwise.event_shape == () and elementwise.log_prob(value).shape == (2, 3, 4)
    with pytest.raises(ValueError, match=r"batch_shape \+ event_shape.*\(2, 3, 4\)"):
        Delta(param, batch_shape=(2,), event_shape=(4,))


def test_tanh_delta_torchrl_positional_order_event_dims_and_safe():
    # TanhDelta(param, low, high, event_dims, atol, rtol, safe)
    param = torch.tensor([[0.0, 100.0], [-100.0, 0.5]], requires_grad=True)
    exact = TanhDelta(param, -2.0, 4.0, 1, 1e-6, 1e-6, False)
    torch.testing.assert_close(
        exact.mode, torch.tensor([[1.0, 4.0], [-2.0, 1.0 + 3.0 * math.tanh(0.5)]])
    )
    # safe (the default): tanh is clamped one float resolution inside (-1, 1)
    lim = 1.0 - torch.finfo(torch.float32).resolution
    safe = TanhDelta(param, -2.0, 4.0)
    assert safe.safe and not exact.safe
    torch.testing.assert_close(safe.mode[0, 1], torch.tensor(1.0 + 3.0 * lim))
    torch.testing.assert_close(safe.mode[1, 0], torch.tensor(1.0 - 3.0 * lim))
    assert bool((safe.mode > -2.0).all() and (safe.mode < 4.0).all())
    safe.rsample()[0, 1].backward()  # derivative 3 * (1 - y^2) of the clamped value
    torch.testing.assert_close(param.grad[0, 1], torch.tensor(3.0 * (1.0 - lim**2)))
    joint = TanhDelta(param.detach(), -2.0, 4.0, 2)
    assert joint.batch_shape == () and joint.event_shape == (2, 2)
    assert joint.log_prob(joint.mode).shape == ()
    near = joint.mode.clone()
    near[1, 1] += 0.1
    assert joint.log_prob(near).item() == -math.inf
    per_coord = TanhDelta(param.detach(), event_dims=0)
    assert per_coord.batch_shape == (2, 2) and per_coord.event_shape == ()
    with pytest.raises(ValueError, match="event_dims is out of range"):
        TanhDelta(param.detach(), event_dims=3)


def test_truncated_normal_torchrl_positional_order_and_tanh_loc():
    # TruncatedNormal(loc, scale, upscale, low, high, tanh_loc)
    loc, scale = torch.tensor([100.0, -0.5]), torch.ones(2)
    squashed = TruncatedNormal(loc, scale, 2.0, -3.0, 3.0, True)
    expected_loc = 2.0 * torch.tanh(loc / 2.0)
    torch.testing.assert_close(squashed.loc, expected_loc)
    torch.testing.assert_close(squashed.mode, expected_loc)
    assert squashed.tanh_loc and squashed.upscale == 2.0
    plain = TruncatedNormal(loc, scale, 2.0, -3.0, 3.0)
    torch.testing.assert_close(plain.mode, torch.tensor([3.0, -0.5]))  # loc clamped to the box
    # the density with the squashed location: phi(z) / (scale * Z), summed over the event
    x = torch.tensor([0.5, -1.0])
    normal = torch.distributions.Normal(expected_loc.double(), 1.0)
    z_mass = normal.cdf(torch.tensor(3.0).double()) - normal.cdf(torch.tensor(-3.0).double())
    ref = (normal.log_prob(x.double()) - z_mass.log()).sum()
    torch.testing.assert_close(squashed.log_prob(x).double(), ref, rtol=1e-5, atol=1e-5)


def test_independent_normal_event_dim_and_scale_forms():
    # IndependentNormal(loc, scale, upscale, tanh_loc, event_dim); scale: tensor, number, callable
    loc = torch.randn(2, 3, 4)
    value = torch.randn(2, 3, 4)
    per_coord = torch.distributions.Normal(loc, 0.5).log_prob(value)
    dist = IndependentNormal(loc, 0.5, 5.0, False, 2)
    assert dist.batch_shape == (2,) and dist.event_shape == (3, 4)
    torch.testing.assert_close(dist.log_prob(value), per_coord.sum((-2, -1)))
    torch.testing.assert_close(
        dist.entropy(), torch.distributions.Normal(loc, 0.5).entropy().sum((-2, -1))
    )
    assert dist.expand((5, 2)).event_shape == (3, 4)
    callable_scale = IndependentNormal(loc, torch.ones_like)
    torch.testing.assert_close(
        callable_scale.log_prob(value),
        torch.distributions.Normal(loc, 1.0).log_prob(value).sum(-1),
    )
    with pytest.raises(ValueError, match="event_dim is out of range"):
        IndependentNormal(loc, 0.5, event_dim=4)


def test_tanh_normal_kl_is_the_pre_tanh_normals_kl():
    # TorchRL's TanhNormal is a transformed distribution: torch's KL rule for those gives the
    # KL of the base Normals (KLPENPPOLoss uses it); tdrl's TanhNormal has the same closed form.
    torch.manual_seed(0)
    loc_p, loc_q = torch.randn(4, 3), torch.randn(4, 3)
    scale_p, scale_q = torch.rand(4, 3) + 0.2, torch.rand(4, 3) + 0.2
    p = TanhNormal(loc_p, scale_p, low=-2.0, high=2.0)
    q = TanhNormal(loc_q, scale_q, low=-2.0, high=2.0)
    base = torch.distributions.Independent(torch.distributions.Normal(loc_p, scale_p), 1)
    other = torch.distributions.Independent(torch.distributions.Normal(loc_q, scale_q), 1)
    expected = torch.distributions.kl_divergence(base, other)
    torch.testing.assert_close(torch.distributions.kl_divergence(p, q), expected)
    with pytest.raises(NotImplementedError, match="squash differently"):
        torch.distributions.kl_divergence(p, TanhNormal(loc_q, scale_q, low=-1.0, high=1.0))
