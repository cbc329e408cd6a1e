"""Functional returns/advantages against hand-computed values and the reference loops."""

from __future__ import annotations

import math

import pytest
import torch

from tdrl.objectives.value import _reference as ref
from tdrl.objectives.value import functional as F

GAMMA_LAMBDA = [(0.99, 0.95), (0.5, 0.0), (1.0, 1.0), (0.9, 0.3)]


def make_data(batch, steps, feat=(1,), dtype=torch.float32, seed=0, p_end=0.1):
    """Random values/rewards with mid-trajectory terminations and truncations."""
    gen = torch.Generator().manual_seed(seed)
    shape = (*batch, steps, *feat)
    terminated = torch.rand(shape, generator=gen) < p_end
    truncated = torch.rand(shape, generator=gen) < p_end
    return {
        "state_value": torch.randn(shape, generator=gen, dtype=dtype),
        "next_state_value": torch.randn(shape, generator=gen, dtype=dtype),
        "reward": torch.randn(shape, generator=gen, dtype=dtype),
        "done": terminated | truncated,
        "terminated": terminated,
    }


def to64(data):
    return {k: v.double() if v.is_floating_point() else v for k, v in data.items()}


def assert_matches(out, expected, scale=1.0):
    """Float32 results must match the float64 oracle to ~1e-5 relative."""
    torch.testing.assert_close(out, expected.to(out.dtype), rtol=1e-5, atol=1e-5 * scale)


# ----------------------------------------------------------------- hand-computed examples
# Three steps, reward 1 everywhere, V(s_t) = [1, 2, 3], V(s_{t+1}) = [2, 3, 4], gamma = 0.5.
V = torch.tensor([[1.0], [2.0], [3.0]])
VN = torch.tensor([[2.0], [3.0], [4.0]])
R = torch.ones(3, 1)
NONE = torch.zeros(3, 1, dtype=torch.bool)
TERM_1 = torch.tensor([[False], [True], [False]])  # terminated after step 1


@pytest.mark.parametrize("impl", ["vectorised", "loop"])
class TestHandComputed:
    def test_td0(self, impl):
        fn = F.td0_return_estimate if impl == "vectorised" else ref.td0_return_estimate_loop
        # [1 + 0.5 * 2, 1 + 0 (terminated), 1 + 0.5 * 4]
        out = fn(0.5, VN, R, TERM_1)
        torch.testing.assert_close(out.squeeze(-1), torch.tensor([2.0, 1.0, 3.0]))

    def test_td1_no_done_bootstraps_at_the_end(self, impl):
        fn = F.td1_return_estimate if impl == "vectorised" else ref.td1_return_estimate_loop
        # G2 = 1 + 0.5 * 4 = 3; G1 = 1 + 0.5 * 3 = 2.5; G0 = 1 + 0.5 * 2.5 = 2.25
        out = fn(0.5, VN, R, NONE)
        torch.testing.assert_close(out.squeeze(-1), torch.tensor([2.25, 2.5, 3.0]))

    def test_td1_termination_and_truncation(self, impl):
        fn = F.td1_return_estimate if impl == "vectorised" else ref.td1_return_estimate_loop
        # terminated at 1: G1 = 1, G0 = 1 + 0.5 * 1 = 1.5, G2 = 3 (bootstrap at the end)
        out = fn(0.5, VN, R, TERM_1, TERM_1)
        torch.testing.assert_close(out.squeeze(-1), torch.tensor([1.5, 1.0, 3.0]))
        # truncated at 1: G1 = 1 + 0.5 * 3 = 2.5, G0 = 1 + 0.5 * 2.5 = 2.25
        out = fn(0.5, VN, R, TERM_1, NONE)
        torch.testing.assert_close(out.squeeze(-1), torch.tensor([2.25, 2.5, 3.0]))
        # truncated at 0: G0 = 1 + 0.5 * 2 = 2 (does not read G1)
        done_0 = torch.tensor([[True], [False], [False]])
        out = fn(0.5, VN, R, done_0, NONE)
        torch.testing.assert_close(out.squeeze(-1), torch.tensor([2.0, 2.5, 3.0]))

    def test_td_lambda(self, impl):
        fn = (
            F.td_lambda_return_estimate
            if impl == "vectorised"
            else ref.td_lambda_return_estimate_loop
        )
        # lambda = 0.5: G2 = 3; G1 = 1 + 0.5 * (0.5 * 3 + 0.5 * 3) = 2.5;
        # G0 = 1 + 0.5 * (0.5 * 2 + 0.5 * 2.5) = 2.125
        out = fn(0.5, 0.5, VN, R, NONE)
        torch.testing.assert_close(out.squeeze(-1), torch.tensor([2.125, 2.5, 3.0]))
        # terminated at 1: G1 = 1; G0 = 1 + 0.5 * (0.5 * 2 + 0.5 * 1) = 1.75
        out = fn(0.5, 0.5, VN, R, TERM_1)
        torch.testing.assert_close(out.squeeze(-1), torch.tensor([1.75, 1.0, 3.0]))

    def test_gae(self, impl):
        fn = (
            F.generalized_advantage_estimate
            if impl == "vectorised"
            else ref.generalized_advantage_estimate_loop
        )
        r = torch.tensor([[1.0], [1.0], [2.0]])
        # delta = [1 + 0.5 * 2 - 1, 1 + 0.5 * 3 - 2, 2 + 0.5 * 4 - 3] = [1, 0.5, 1]
        # gamma * lambda = 0.25: A2 = 1; A1 = 0.5 + 0.25 * 1 = 0.75; A0 = 1 + 0.25 * 0.75
        adv, target = fn(0.5, 0.5, V, VN, r, NONE)
        torch.testing.assert_close(adv.squeeze(-1), torch.tensor([1.1875, 0.75, 1.0]))
        torch.testing.assert_close(target, adv + V)
        # terminated at 1: delta1 = 1 - 2 = -1 and A1 = delta1 (cut); A0 = 1 + 0.25 * -1
        adv, _ = fn(0.5, 0.5, V, VN, r, TERM_1)
        torch.testing.assert_close(adv.squeeze(-1), torch.tensor([0.75, -1.0, 1.0]))
        # truncated at 1: delta1 = 0.5 keeps the bootstrap, the recursion is cut: A1 = 0.5
        adv, _ = fn(0.5, 0.5, V, VN, r, TERM_1, NONE)
        torch.testing.assert_close(adv.squeeze(-1), torch.tensor([1.125, 0.5, 1.0]))

    def test_reverse_discounted_cumsum(self, impl):
        fn = (
            F.reverse_discounted_cumsum
            if impl == "vectorised"
            else ref.reverse_discounted_cumsum_loop
        )
        x = torch.tensor([[1.0], [2.0], [4.0]])
        out = fn(x, 0.5)
        torch.testing.assert_close(out.squeeze(-1), torch.tensor([3.0, 4.0, 4.0]))
        out = fn(x, 0.5, reset=torch.tensor([[True], [False], [False]]))
        torch.testing.assert_close(out.squeeze(-1), torch.tensor([1.0, 4.0, 4.0]))


# ----------------------------------------------------------------- against the loops
BATCHES = [(), (2, 3)]
STEPS = [1, 7, 100]
FEATS = [(1,), (3, 1)]


@pytest.mark.parametrize("batch", BATCHES, ids=str)
@pytest.mark.parametrize("steps", STEPS)
@pytest.mark.parametrize("gamma,lmbda", GAMMA_LAMBDA)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("feat", FEATS, ids=str)
class TestAgainstLoops:
    def _data(self, batch, steps, feat, dtype):
        data = make_data(batch, steps, feat, dtype, seed=steps)
        return data, to64(data), -(len(feat) + 1)

    def test_gae(self, batch, steps, gamma, lmbda, dtype, feat):
        data, d64, dim = self._data(batch, steps, feat, dtype)
        adv, target = F.generalized_advantage_estimate(gamma, lmbda, **data, time_dim=dim)
        adv_ref, target_ref = ref.generalized_advantage_estimate_loop(
            gamma, lmbda, **d64, time_dim=dim
        )
        assert adv.dtype == dtype and adv.shape == data["reward"].shape
        assert_matches(adv, adv_ref, scale=10)
        assert_matches(target, target_ref, scale=10)

    def test_td_lambda(self, batch, steps, gamma, lmbda, dtype, feat):
        data, d64, dim = self._data(batch, steps, feat, dtype)
        keys = ("next_state_value", "reward", "done", "terminated")
        out = F.td_lambda_return_estimate(gamma, lmbda, *(data[k] for k in keys), time_dim=dim)
        expected = ref.td_lambda_return_estimate_loop(
            gamma, lmbda, *(d64[k] for k in keys), time_dim=dim
        )
        assert out.dtype == dtype
        assert_matches(out, expected, scale=10)

    def test_td1(self, batch, steps, gamma, lmbda, dtype, feat):
        data, d64, dim = self._data(batch, steps, feat, dtype)
        keys = ("next_state_value", "reward", "done", "terminated")
        out = F.td1_return_estimate(gamma, *(data[k] for k in keys), time_dim=dim)
        expected = ref.td1_return_estimate_loop(gamma, *(d64[k] for k in keys), time_dim=dim)
        assert_matches(out, expected, scale=10)
        # TD(1) is TD(lambda=1) and TD(0) is TD(lambda=0)
        lam1 = F.td_lambda_return_estimate(gamma, 1.0, *(data[k] for k in keys), time_dim=dim)
        assert_matches(lam1, expected, scale=10)

    def test_td0(self, batch, steps, gamma, lmbda, dtype, feat):
        data, d64, dim = self._data(batch, steps, feat, dtype)
        out = F.td0_return_estimate(
            gamma, data["next_state_value"], data["reward"], data["terminated"]
        )
        expected = ref.td0_return_estimate_loop(
            gamma, d64["next_state_value"], d64["reward"], d64["terminated"]
        )
        assert_matches(out, expected)
        lam0 = F.td_lambda_return_estimate(
            gamma,
            0.0,
            data["next_state_value"],
            data["reward"],
            data["done"],
            data["terminated"],
            time_dim=dim,
        )
        assert_matches(lam0, expected)


@pytest.mark.parametrize("batch", BATCHES, ids=str)
def test_tensor_gamma_and_lambda(batch):
    data = make_data(batch, 50, (2, 1), torch.float64, seed=1)
    gen = torch.Generator().manual_seed(2)
    gamma = 0.8 + 0.2 * torch.rand(data["reward"].shape, generator=gen, dtype=torch.float64)
    lmbda = torch.tensor([[0.9], [0.5]], dtype=torch.float64)  # one per agent, broadcasts
    adv, _ = F.generalized_advantage_estimate(gamma, lmbda, **data, time_dim=-3)
    adv_ref, _ = ref.generalized_advantage_estimate_loop(gamma, lmbda, **data, time_dim=-3)
    torch.testing.assert_close(adv, adv_ref)
    keys = ("next_state_value", "reward", "done", "terminated")
    out = F.td_lambda_return_estimate(gamma, lmbda, *(data[k] for k in keys), time_dim=-3)
    expected = ref.td_lambda_return_estimate_loop(
        gamma, lmbda, *(data[k] for k in keys), time_dim=-3
    )
    torch.testing.assert_close(out, expected)


def test_zero_dim_tensor_gamma_matches_float():
    data = make_data((4,), 30, seed=3)
    adv_t, _ = F.generalized_advantage_estimate(torch.tensor(0.9), torch.tensor(0.8), **data)
    adv_f, _ = F.generalized_advantage_estimate(0.9, 0.8, **data)
    torch.testing.assert_close(adv_t, adv_f)


# ----------------------------------------------------------------- numerical stability
@pytest.mark.parametrize(
    "discount",
    [0.999 * 0.999, 1.0, 0.9, 0.3, 0.05, 1e-8],
    ids=lambda d: f"a={d:g}",
)
@pytest.mark.parametrize("p_reset", [0.0, 0.01, 0.5])
@pytest.mark.parametrize("as_tensor", [False, True])
def test_scan_stable_on_long_sequences(discount, p_reset, as_tensor):
    """T=512 in float32 matches a float64 loop, including the chunked path (small discounts)."""
    gen = torch.Generator().manual_seed(4)
    x = torch.randn(4, 512, 1, generator=gen)
    reset = torch.rand(4, 512, 1, generator=gen) < p_reset
    a = torch.full((4, 512, 1), discount) if as_tensor else discount
    out = F.reverse_discounted_cumsum(x, a, reset=reset)
    a64 = a.double() if isinstance(a, torch.Tensor) else discount
    expected = ref.reverse_discounted_cumsum_loop(x.double(), a64, reset=reset)
    assert torch.isfinite(out).all()
    scale = 1.0 / max(1e-3, 1.0 - discount) ** 0.5
    assert_matches(out, expected, scale=scale)


def test_scan_tensor_discount_with_zeros_and_tiny_values():
    gen = torch.Generator().manual_seed(5)
    x = torch.randn(3, 300, 2, generator=gen, dtype=torch.float64)
    a = torch.rand(3, 300, 2, generator=gen, dtype=torch.float64)
    a[a < 0.1] = 0.0
    a[:, 100:110] = 1e-200
    out = F.reverse_discounted_cumsum(x, a)
    torch.testing.assert_close(out, ref.reverse_discounted_cumsum_loop(x, a))


@pytest.mark.parametrize("time_dim", [0, 1, -1, -3])
def test_scan_any_time_dim(time_dim):
    gen = torch.Generator().manual_seed(6)
    x = torch.randn(5, 6, 7, generator=gen, dtype=torch.float64)
    reset = torch.rand(5, 6, 7, generator=gen) < 0.2
    out = F.reverse_discounted_cumsum(x, 0.7, reset=reset, time_dim=time_dim)
    expected = ref.reverse_discounted_cumsum_loop(x, 0.7, reset=reset, time_dim=time_dim)
    torch.testing.assert_close(out, expected)


def test_gae_many_dones_long_horizon():
    data = make_data((8,), 512, p_end=0.3, seed=7)
    adv, _ = F.generalized_advantage_estimate(0.999, 0.999, **data)
    adv_ref, _ = ref.generalized_advantage_estimate_loop(0.999, 0.999, **to64(data))
    assert_matches(adv, adv_ref, scale=10)


# ----------------------------------------------------------------- done semantics
def test_terminated_ignores_next_value_garbage():
    vn = VN.clone()
    vn[1] = float("nan")  # the value after a terminal step is never read
    adv, _ = F.generalized_advantage_estimate(0.5, 0.5, V, vn, R, TERM_1)
    assert torch.isfinite(adv).all()
    assert torch.isfinite(F.td_lambda_return_estimate(0.5, 0.5, vn, R, TERM_1)).all()
    assert torch.isfinite(F.td0_return_estimate(0.5, vn, R, TERM_1)).all()


def test_truncation_bootstraps_from_next_value():
    out_a = F.td1_return_estimate(0.5, VN, R, TERM_1, NONE)
    vn = VN.clone()
    vn[1] += 2.0
    out_b = F.td1_return_estimate(0.5, vn, R, TERM_1, NONE)
    # G1 = 1 + 0.5 * V(s_2); G0 inherits half of it
    torch.testing.assert_close(out_b - out_a, torch.tensor([[0.5], [1.0], [0.0]]))


def test_done_cuts_the_recursion():
    data = make_data((), 20, p_end=0.0, seed=8)
    data["done"][9] = True  # a truncation: terminated stays False
    adv_a, _ = F.generalized_advantage_estimate(0.9, 0.9, **data)
    data["reward"][10:] += 100.0
    adv_b, _ = F.generalized_advantage_estimate(0.9, 0.9, **data)
    torch.testing.assert_close(adv_a[:10], adv_b[:10])
    assert (adv_a[10:] != adv_b[10:]).all()


def test_terminated_without_done_counts_as_done():
    done = torch.zeros(3, 1, dtype=torch.bool)
    out = F.td1_return_estimate(0.5, VN, R, done, TERM_1)
    torch.testing.assert_close(out, F.td1_return_estimate(0.5, VN, R, TERM_1, TERM_1))


def test_broadcast_done_and_integer_flags():
    data = make_data((2,), 10, (3, 1), torch.float64, seed=9)
    done = data["done"][..., :1, :]  # one flag for all agents: [2, 10, 1, 1]
    adv, _ = F.generalized_advantage_estimate(
        0.9, 0.9, data["state_value"], data["next_state_value"], data["reward"],
        done.long(), time_dim=-3,
    )  # fmt: skip
    expected, _ = ref.generalized_advantage_estimate_loop(
        0.9, 0.9, data["state_value"], data["next_state_value"], data["reward"],
        done.expand_as(data["reward"]), time_dim=-3,
    )  # fmt: skip
    torch.testing.assert_close(adv, expected)


# ----------------------------------------------------------------- gradients
def test_gradients_flow_to_values_and_rewards():
    data = make_data((2,), 12, dtype=torch.float64, seed=10)
    for key in ("state_value", "next_state_value", "reward"):
        data[key].requires_grad_(True)
    gamma = torch.tensor(0.9, dtype=torch.float64, requires_grad=True)
    adv, _ = F.generalized_advantage_estimate(gamma, 0.8, **data)
    adv.sum().backward()
    for key in ("state_value", "next_state_value", "reward"):
        assert data[key].grad is not None and data[key].grad.abs().sum() > 0
    assert gamma.grad is not None and torch.isfinite(gamma.grad)


def test_gradcheck_scan():
    gen = torch.Generator().manual_seed(11)
    x = torch.randn(2, 6, 1, generator=gen, dtype=torch.float64, requires_grad=True)
    a = torch.rand(2, 6, 1, generator=gen, dtype=torch.float64, requires_grad=True)
    reset = torch.rand(2, 6, 1, generator=gen) < 0.3
    assert torch.autograd.gradcheck(
        lambda x, a: F.reverse_discounted_cumsum(x, a, reset=reset), (x, a)
    )


def test_inference_mode_first_then_autograd():
    """Cached helper tensors made under inference mode must not break a later backward."""
    data = make_data((3,), 37, seed=12)
    with torch.inference_mode():
        F.generalized_advantage_estimate(0.91, 0.77, **data)
        F.td_lambda_return_estimate(
            0.91, 0.77, data["next_state_value"], data["reward"], data["done"]
        )
    data["reward"].requires_grad_(True)
    adv, _ = F.generalized_advantage_estimate(0.91, 0.77, **data)
    target = F.td_lambda_return_estimate(
        0.91, 0.77, data["next_state_value"], data["reward"], data["done"]
    )
    (adv.sum() + target.sum()).backward()
    assert data["reward"].grad is not None


def test_empty_time_dim():
    x = torch.zeros(2, 0, 1)
    assert F.reverse_discounted_cumsum(x, 0.9).shape == (2, 0, 1)


# ----------------------------------------------------------------- errors
def test_error_time_dim_out_of_range():
    with pytest.raises(ValueError, match=r"time_dim is out of range \(got time_dim=-2"):
        F.td1_return_estimate(0.9, torch.zeros(5), torch.zeros(5), torch.zeros(5, dtype=bool))


def test_error_shapes_do_not_broadcast():
    with pytest.raises(ValueError, match=r"do not broadcast \(got \[\(3, 1\), \(4, 1\)"):
        F.generalized_advantage_estimate(0.9, 0.9, V, torch.zeros(4, 1), R, NONE)


@pytest.mark.parametrize("bad", [-0.1, math.inf, math.nan, "0.9"])
def test_error_bad_gamma(bad):
    with pytest.raises(ValueError, match="gamma must be a finite non-negative number"):
        F.generalized_advantage_estimate(bad, 0.9, V, VN, R, NONE)
    with pytest.raises(ValueError, match="lmbda must be"):
        F.td_lambda_return_estimate(0.9, bad, VN, R, NONE)


def test_error_td0_without_flags():
    with pytest.raises(ValueError, match="no termination flag given"):
        F.td0_return_estimate(0.9, VN, R)
    out = F.td0_return_estimate(0.9, VN, R, done=TERM_1)
    torch.testing.assert_close(out, F.td0_return_estimate(0.9, VN, R, TERM_1))
