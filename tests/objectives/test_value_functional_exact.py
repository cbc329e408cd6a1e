"""The fast paths of the value functions keep the previous results to the last bit.

``_zero_where`` (every estimator's "no bootstrap past a terminal step") zeroes flagged values
with ``torch.where`` and a cached 0-dim zero where it used ``masked_fill``, and
``td0_return_estimate`` checks its common inputs with plain compares. The previous code is
spelled out below as the reference; results are compared bit for bit (NaN payloads, the sign
of zero), with their dtypes, shapes and strides.
"""

from __future__ import annotations

import math
import warnings

import pytest
import torch

from tdrl.objectives.value import TD0Estimator
from tdrl.objectives.value import functional as F

FLOATS = [torch.float16, torch.bfloat16, torch.float32, torch.float64]
_BITS = {2: torch.int16, 4: torch.int32, 8: torch.int64}


def previous_zero_where(flag, value):
    flag = flag if flag.dtype is torch.bool else flag != 0
    if flag.shape == value.shape:
        return value.masked_fill(flag, 0.0)
    return torch.where(flag, 0.0, value)


def previous_td0(gamma, next_state_value, reward, terminated):
    kept = previous_zero_where(terminated, next_state_value)
    if isinstance(gamma, torch.Tensor):
        return reward + gamma * kept
    return torch.add(reward, kept, alpha=gamma)


def assert_same_bits(got, want):
    assert got.dtype == want.dtype and got.shape == want.shape
    assert got.stride() == want.stride() and got.device == want.device
    if got.is_floating_point():
        bits = _BITS[got.element_size()]
        assert torch.equal(got.contiguous().view(bits), want.contiguous().view(bits))
    else:
        assert torch.equal(got, want)


def awkward(shape, dtype, seed=0):
    """Values with NaN, +-inf, -0.0 and subnormals among random ones."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=gen, dtype=torch.float64)
    specials = torch.tensor([math.nan, math.inf, -math.inf, -0.0, 0.0, 1e-310, -1e-310])
    flat = x.view(-1)
    if flat.numel():
        pick = torch.randint(0, flat.numel(), (min(flat.numel(), 40),), generator=gen)
        flat[pick] = specials[torch.arange(pick.numel()) % specials.numel()].double()
    return x.to(dtype)


def flags(shape, seed=1, p=0.3):
    return torch.rand(shape, generator=torch.Generator().manual_seed(seed)) < p


SHAPES = [(), (1,), (5, 1), (32, 512, 1), (3, 7, 4)]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", FLOATS)
def test_zero_where_matches_masked_fill(dtype, shape):
    value, flag = awkward(shape, dtype), flags(shape)
    out = F._zero_where(flag, value)
    assert_same_bits(out, previous_zero_where(flag, value))
    assert out.data_ptr() != value.data_ptr() or value.numel() == 0  # a new tensor


@pytest.mark.parametrize("dtype", FLOATS)
def test_zero_where_other_layouts_and_flags(dtype):
    value = awkward((6, 4, 3), dtype)
    cases = [
        (flags((4, 6, 3)), value.transpose(0, 1)),  # a strided value: its strides are kept
        (flags((3, 4, 6)).transpose(0, 2), value),  # a strided flag
        (flags((6, 4, 1)), value),  # a flag broadcast over the features
        (flags((6, 4, 3)).to(torch.uint8), value),  # a 0/1 integer flag
        (flags((5, 4, 3)), value[1:]),  # a contiguous view with a storage offset
    ]
    for flag, val in cases:
        assert_same_bits(F._zero_where(flag, val), previous_zero_where(flag, val))


def test_zero_where_keeps_integer_and_zero_dim_dtypes():
    ints = torch.arange(6).view(3, 2)
    flag = flags((3, 2))
    assert_same_bits(F._zero_where(flag, ints), previous_zero_where(flag, ints))
    half = torch.tensor(2.5, dtype=torch.float16)  # a 0-dim value: no promotion by the zero
    for flag in (torch.tensor(True), torch.tensor([True, False])):
        assert_same_bits(F._zero_where(flag, half), previous_zero_where(flag, half))


def test_zero_where_gradient_and_inference_mode():
    with torch.inference_mode():
        F._zero_where(flags((4, 1)), torch.ones(4, 1))
    value = awkward((4, 3), torch.float32).nan_to_num().requires_grad_()
    flag = flags((4, 3))
    out = F._zero_where(flag, value)
    (grad,) = torch.autograd.grad(out.square().sum(), value)
    ref = value.detach().clone().requires_grad_()
    (want,) = torch.autograd.grad(previous_zero_where(flag, ref).square().sum(), ref)
    assert_same_bits(grad, want)
    for dtype, zero in F._CPU_ZEROS.items():  # shared: never written, never inference tensors
        assert zero.dtype == dtype and zero.ndim == 0 and zero.item() == 0.0
        assert not zero.is_inference() and not zero.requires_grad


def test_td0_compiles_without_warnings():
    nv, reward, term = (
        awkward((8, 16, 1), torch.float32).nan_to_num(),
        torch.randn(8, 16, 1),
        flags((8, 16, 1)),
    )
    compiled = torch.compile(F.td0_return_estimate, backend="eager", fullgraph=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = compiled(0.99, nv, reward, term)
    assert_same_bits(out, F.td0_return_estimate(0.99, nv, reward, term))


@pytest.mark.parametrize("gamma", [0.99, 0.0, 1, torch.tensor(0.9), torch.full((32, 512, 1), 0.5)])
@pytest.mark.parametrize("dtype", FLOATS)
def test_td0_matches_the_previous_code(dtype, gamma):
    shape = (32, 512, 1)
    nv, reward, term = awkward(shape, dtype), awkward(shape, dtype, seed=2), flags(shape)
    if isinstance(gamma, torch.Tensor):
        gamma = gamma.to(dtype)
    out = F.td0_return_estimate(gamma, nv, reward, term)
    assert_same_bits(out, previous_td0(gamma, nv, reward, term))
    assert_same_bits(F.td0_return_estimate(gamma, nv, reward, done=term), out)


def test_td0_broadcast_inputs_match_the_previous_code():
    nv, reward = awkward((4, 5, 3), torch.float32), awkward((4, 5, 1), torch.float32, seed=3)
    term = flags((4, 5, 1))
    out = F.td0_return_estimate(0.9, nv, reward, term)
    assert_same_bits(out, previous_td0(0.9, nv, reward, term))


@pytest.mark.parametrize("bad", [-0.1, math.inf, math.nan, "0.9", None])
def test_td0_bad_gamma_keeps_its_error(bad):
    v = torch.zeros(3, 1)
    with pytest.raises(ValueError, match=r"td0_return_estimate: gamma must be a finite non-neg"):
        F.td0_return_estimate(bad, v, v, v.bool())


def test_td0_bad_shapes_keep_their_error():
    with pytest.raises(ValueError, match=r"td0_return_estimate: the input shapes do not broad"):
        F.td0_return_estimate(0.9, torch.zeros(4, 1), torch.zeros(3, 1), torch.zeros(3, 1).bool())


def test_td0_estimator_matches_the_previous_code():
    shape = (8, 16, 1)
    value, nv, reward = (awkward(shape, torch.float32, seed=s) for s in range(3))
    done, term = flags(shape, seed=4), flags(shape, seed=5, p=0.1)
    advantage, target = TD0Estimator(gamma=0.95)._estimate(
        value, nv, reward, done, term, time_dim=1
    )
    want = previous_td0(0.95, nv, reward, term)
    assert_same_bits(target, want)
    assert_same_bits(advantage, want - value)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_gae_and_td_lambda_match_the_previous_zeroing(monkeypatch, dtype):
    shape = (4, 64, 1)
    value = awkward(shape, dtype).nan_to_num(posinf=3.0, neginf=-3.0)
    nv = awkward(shape, dtype, seed=6)
    nv = torch.where(flags(shape, seed=7), nv, nv.nan_to_num())  # garbage only where it may be
    reward, done = awkward(shape, dtype, seed=8).nan_to_num(), flags(shape, seed=9, p=0.1)
    term = done & flags(shape, seed=10, p=0.5)
    nv = torch.where(term, nv, nv.nan_to_num())

    def run():
        return (
            *F.generalized_advantage_estimate(0.99, 0.95, value, nv, reward, done, term),
            F.td_lambda_return_estimate(0.99, 0.95, nv, reward, done, term),
            F.td1_return_estimate(0.99, nv, reward, done, term),
        )

    got = run()
    monkeypatch.setattr(F, "_zero_where", previous_zero_where)
    for out, want in zip(got, run(), strict=True):
        assert_same_bits(out, want)
