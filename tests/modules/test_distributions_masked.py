"""Tests of the one-hot and masked categorical distributions and the reparam strategies."""

from __future__ import annotations

import math

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import InteractionType, ProbabilisticTensorDictModule, set_interaction_type

from tdrl.modules.distributions import (
    MaskedCategorical,
    MaskedOneHotCategorical,
    OneHotCategorical,
    ReparamGradientStrategy,
)

BATCH_SHAPES = [(), (2, 3)]
STRATEGIES = [ReparamGradientStrategy.PassThrough, ReparamGradientStrategy.RelaxedOneHot]
N = 6


def _make(batch_shape: tuple[int, ...], seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Random logits and a mask that differs per row, with >= 1 allowed action per row."""
    gen = torch.Generator().manual_seed(seed)
    logits = torch.randn(*batch_shape, N, generator=gen)
    mask = torch.rand(*batch_shape, N, generator=gen) > 0.5
    first = torch.randint(N, batch_shape, generator=gen)
    mask = mask | torch.nn.functional.one_hot(first, N).bool()
    return logits, mask


def _to_indices(mask: torch.Tensor, padding_value: int = -1) -> torch.Tensor:
    """Sparse form of a dense mask: allowed indices first, unused slots = padding_value."""
    order = torch.arange(N).expand(mask.shape)
    indices = torch.where(mask, order, padding_value)
    # Put the padding last (and shuffle nothing else) to exercise a realistic layout.
    key = torch.where(mask, order, N + order)
    return indices.gather(-1, key.argsort(-1))


def _hand_log_probs(logits: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Renormalisation over the allowed set, written out by hand in float64."""
    lg = logits.double()
    shift = lg.max(-1, keepdim=True).values
    total = (torch.exp(lg - shift) * mask).sum(-1, keepdim=True)
    return lg - shift - total.log()


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)


@pytest.mark.parametrize("batch_shape", BATCH_SHAPES)
@pytest.mark.parametrize("form", ["mask", "indices"])
def test_masked_actions_never_sampled(batch_shape, form):
    logits, mask = _make(batch_shape)
    logits = logits.masked_fill(~mask, 50.0)  # masked actions would win without the mask
    kwargs = (
        {"mask": mask} if form == "mask" else {"indices": _to_indices(mask), "padding_value": -1}
    )
    dist = MaskedCategorical(logits=logits, **kwargs)
    draws = dist.sample((10_000,))
    assert draws.shape == (10_000, *batch_shape)
    assert mask.expand(10_000, *mask.shape).gather(-1, draws.unsqueeze(-1)).all()
    one_hot = MaskedOneHotCategorical(logits=logits, **kwargs).sample((10_000,))
    assert one_hot.shape == (10_000, *batch_shape, N)
    assert not (one_hot.bool() & ~mask).any()
    assert (one_hot.sum(-1) == 1).all()


@pytest.mark.parametrize("batch_shape", BATCH_SHAPES)
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_rsample_never_masked_and_exactly_one_hot(batch_shape, strategy):
    logits, mask = _make(batch_shape, seed=1)
    logits = logits.masked_fill(~mask, 1e4)
    dist = MaskedOneHotCategorical(logits=logits, mask=mask, grad_method=strategy)
    draws = dist.rsample((2_000,))
    assert not (draws.bool() & ~mask).any()
    expected = torch.nn.functional.one_hot(draws.argmax(-1), N).to(draws.dtype)
    assert torch.equal(draws, expected)


def test_sampled_frequencies_match_renormalised_probs():
    logits, mask = _make((), seed=2)
    draws = MaskedCategorical(logits=logits, mask=mask).sample((20_000,))
    freq = torch.bincount(draws, minlength=N).double() / 20_000
    expected = _hand_log_probs(logits, mask).exp() * mask
    torch.testing.assert_close(freq, expected, atol=0.015, rtol=0)


@pytest.mark.parametrize("batch_shape", BATCH_SHAPES)
@pytest.mark.parametrize("strategy", [*STRATEGIES, "PassThrough", "RelaxedOneHot"])
def test_gradients_reach_logits(batch_shape, strategy):
    logits, mask = _make(batch_shape, seed=3)
    logits.requires_grad_(True)
    dist = MaskedOneHotCategorical(logits=logits, mask=mask, grad_method=strategy, temperature=0.5)
    sample = dist.rsample((64,))
    assert ((sample == 0) | (sample == 1)).all() and (sample.sum(-1) == 1).all()
    weights = torch.linspace(-1.0, 1.0, N)
    (sample * weights).sum().backward()
    grad = logits.grad
    assert grad is not None and torch.isfinite(grad).all()
    assert (grad[~mask] == 0).all()
    assert grad[mask].abs().sum() > 0


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_unmasked_one_hot_rsample(strategy):
    logits = torch.randn(2, 3, N, requires_grad=True)
    dist = OneHotCategorical(logits=logits, grad_method=strategy)
    sample = dist.rsample((5,))
    assert sample.shape == (5, 2, 3, N)
    assert torch.equal(sample, torch.nn.functional.one_hot(sample.argmax(-1), N).float())
    (sample * torch.arange(N.__float__())).sum().backward()
    assert logits.grad is not None and logits.grad.abs().sum() > 0


def test_pass_through_gradient_is_softmax_gradient():
    logits = torch.randn(N, requires_grad=True)
    weights = torch.randn(N)
    sample = OneHotCategorical(logits=logits).rsample()
    (sample * weights).sum().backward()
    ref_logits = logits.detach().clone().requires_grad_(True)
    (torch.softmax(ref_logits, -1) * weights).sum().backward()
    torch.testing.assert_close(logits.grad, ref_logits.grad)


def test_relaxed_gradient_depends_on_temperature():
    logits = torch.randn(N, requires_grad=True)
    grads = []
    for temperature in (0.1, 10.0):
        torch.manual_seed(5)
        dist = OneHotCategorical(logits=logits, grad_method="RelaxedOneHot")
        dist.temperature = temperature
        (dist.rsample() * torch.arange(float(N))).sum().backward()
        grads.append(logits.grad.clone())
        logits.grad = None
    assert not torch.allclose(grads[0], grads[1])


@pytest.mark.parametrize("bad", ["passthrough", "Gumbel", 3, None])
def test_unknown_strategy_raises(bad):
    logits, mask = _make(())
    with pytest.raises(ValueError, match=r"PassThrough.*RelaxedOneHot"):
        MaskedOneHotCategorical(logits=logits, mask=mask, grad_method=bad)
    with pytest.raises(ValueError, match="grad_method"):
        OneHotCategorical(logits=logits, grad_method=bad)


def test_temperature_must_be_positive():
    with pytest.raises(ValueError, match="temperature"):
        OneHotCategorical(logits=torch.zeros(3), temperature=0.0)
    dist = OneHotCategorical(logits=torch.zeros(3))
    with pytest.raises(ValueError, match="temperature"):
        dist.temperature = -1.0


@pytest.mark.parametrize("batch_shape", BATCH_SHAPES)
@pytest.mark.parametrize("form", ["mask", "indices"])
def test_log_prob_matches_renormalised_categorical(batch_shape, form):
    logits, mask = _make(batch_shape, seed=4)
    kwargs = (
        {"mask": mask} if form == "mask" else {"indices": _to_indices(mask), "padding_value": -1}
    )
    dist = MaskedCategorical(logits=logits, **kwargs)
    reference = torch.distributions.Categorical(logits=logits.masked_fill(~mask, -math.inf))
    hand = _hand_log_probs(logits, mask)
    for action in range(N):
        value = torch.full(batch_shape, action)
        lp = dist.log_prob(value)
        allowed = mask[..., action]
        torch.testing.assert_close(lp[allowed], reference.log_prob(value)[allowed])
        torch.testing.assert_close(
            lp[allowed].double(), hand[..., action][allowed], rtol=1e-5, atol=1e-6
        )
        assert (lp[~allowed] == -math.inf).all()
        one_hot = torch.nn.functional.one_hot(value, N).float()
        lp_oh = MaskedOneHotCategorical(logits=logits, **kwargs).log_prob(one_hot)
        torch.testing.assert_close(lp_oh, lp)


@pytest.mark.parametrize("neg_inf", [-math.inf, -1e9])
def test_masked_log_prob_is_minus_inf_not_nan(neg_inf):
    logits = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    mask = torch.tensor([True, False, True])
    dist = MaskedCategorical(logits=logits, mask=mask, neg_inf=neg_inf)
    lp = dist.log_prob(torch.tensor([0, 1, 2]))
    assert lp[1] == -math.inf and torch.isfinite(lp[[0, 2]]).all()
    lp[[0, 2]].sum().backward()
    assert torch.isfinite(logits.grad).all() and logits.grad[1] == 0
    assert not (dist.sample((5_000,)) == 1).any()


@pytest.mark.parametrize("batch_shape", BATCH_SHAPES)
def test_entropy_of_allowed_distribution(batch_shape):
    logits, mask = _make(batch_shape, seed=6)
    logits.requires_grad_(True)
    dist = MaskedCategorical(logits=logits, mask=mask)
    entropy = dist.entropy()
    hand_lp = _hand_log_probs(logits.detach(), mask)
    hand = -torch.where(mask, hand_lp.exp() * hand_lp, 0.0).sum(-1)
    assert entropy.shape == batch_shape and torch.isfinite(entropy).all()
    torch.testing.assert_close(entropy.double(), hand, rtol=1e-5, atol=1e-6)
    entropy.sum().backward()
    assert torch.isfinite(logits.grad).all()
    torch.testing.assert_close(
        MaskedOneHotCategorical(logits=logits, mask=mask).entropy(), entropy, rtol=0, atol=0
    )


@pytest.mark.parametrize("batch_shape", BATCH_SHAPES)
def test_mode_never_masked_even_with_huge_logits(batch_shape):
    logits, mask = _make(batch_shape, seed=7)
    logits = logits.masked_fill(~mask, 1e30)
    dist = MaskedCategorical(logits=logits, mask=mask)
    assert mask.gather(-1, dist.mode.unsqueeze(-1)).all()
    assert torch.equal(dist.deterministic_sample, dist.mode)
    one_hot = MaskedOneHotCategorical(logits=logits, mask=mask)
    assert torch.equal(one_hot.mode, torch.nn.functional.one_hot(dist.mode, N).float())
    expected = torch.where(mask, logits, -math.inf).argmax(-1)
    assert torch.equal(dist.mode, expected)


def test_indices_convention():
    logits = torch.zeros(2, 4)
    indices = torch.tensor([[3, 0, -1], [1, -1, -1]])
    dist = MaskedCategorical(logits=logits, indices=indices, padding_value=-1)
    expected = torch.tensor([[True, False, False, True], [False, True, False, False]])
    assert torch.equal(dist.mask, expected)
    custom = MaskedCategorical(logits=logits, indices=torch.tensor([[2, 9]]), padding_value=9)
    assert torch.equal(custom.mask, torch.tensor([[False, False, True, False]] * 2))
    with pytest.raises(ValueError, match="out of range"):
        MaskedCategorical(logits=logits, indices=torch.tensor([[4, -1]]))
    with pytest.raises(ValueError, match="integer"):
        MaskedCategorical(logits=logits, indices=torch.tensor([[1.0]]))


def test_indices_without_padding_value_are_all_classes():
    # TorchRL's default padding_value=None: no slot is padding, so -1 is not a valid index
    # (TorchRL's gather fails on it) and every listed index is an allowed class.
    logits = torch.zeros(2, 4)
    dist = MaskedCategorical(logits=logits, indices=torch.tensor([[3, 0], [1, 2]]))
    expected = torch.tensor([[True, False, False, True], [False, True, True, False]])
    assert torch.equal(dist.mask, expected)
    assert dist.padding_value == 0  # TorchRL's property reads 0 when none was given
    with pytest.raises(ValueError, match=r"out of range.*padding_value=None"):
        MaskedCategorical(logits=logits, indices=torch.tensor([[3, -1], [1, 2]]))
    one_hot = MaskedOneHotCategorical(logits=logits, indices=torch.tensor([[3, 0], [1, 2]]))
    assert torch.equal(one_hot.mask, expected)


@pytest.mark.parametrize("use_cross_entropy", [True, False])
def test_log_prob_paths_match_the_formula(use_cross_entropy):
    logits = torch.tensor([[1.0, 2.0, 0.5], [0.0, -1.0, 3.0]])
    mask = torch.tensor([[True, True, False], [True, False, True]])
    dist = MaskedCategorical(logits=logits, mask=mask, use_cross_entropy=use_cross_entropy)
    assert dist.use_cross_entropy is use_cross_entropy
    value = torch.tensor([[1, 0], [2, 2], [0, 1]])  # sample dim 3, batch 2
    # log p(k) = logit_k - log sum_{allowed j} exp(logit_j); -inf for forbidden classes
    norm = [math.log(math.exp(1.0) + math.exp(2.0)), math.log(1.0 + math.exp(3.0))]
    expected = torch.tensor(
        [[2.0 - norm[0], 0.0 - norm[1]], [-math.inf, 3.0 - norm[1]], [1.0 - norm[0], -math.inf]]
    )
    torch.testing.assert_close(dist.log_prob(value), expected)
    expanded = dist.expand((4, 2))
    assert expanded.use_cross_entropy is use_cross_entropy
    torch.testing.assert_close(expanded.log_prob(value[0]), expected[0].expand(4, 2))


def test_padding_side():
    logits, mask = torch.zeros(3), torch.tensor([True, False, True])
    assert MaskedCategorical(logits=logits, mask=mask).padding_side == "left"
    right = MaskedCategorical(logits=logits, mask=mask, padding_side="right")
    assert right.padding_side == "right" and right.expand((2,)).padding_side == "right"
    with pytest.raises(ValueError, match=r"padding_side.*'middle'"):
        MaskedCategorical(logits=logits, mask=mask, padding_side="middle")


def test_argument_errors():
    logits, mask = _make((3,))
    with pytest.raises(ValueError, match="exactly one of mask and indices"):
        MaskedCategorical(logits=logits, mask=mask, indices=_to_indices(mask))
    with pytest.raises(ValueError, match="exactly one of mask and indices"):
        MaskedOneHotCategorical(logits=logits)
    with pytest.raises(ValueError, match="exactly one of logits and probs"):
        MaskedCategorical(logits=logits, probs=logits.softmax(-1), mask=mask)
    with pytest.raises(ValueError, match="bool"):
        MaskedCategorical(logits=logits, mask=mask.float())
    all_masked = mask.clone()
    all_masked[1] = False
    with pytest.raises(ValueError, match="all actions masked"):
        MaskedCategorical(logits=logits, mask=all_masked)
    with pytest.raises(ValueError, match=r"MaskedOneHotCategorical.*all actions masked"):
        MaskedOneHotCategorical(logits=logits, indices=torch.full((3, 2), -1), padding_value=-1)


def test_probs_input_and_broadcast_mask():
    probs = torch.tensor([[0.1, 0.2, 0.3, 0.4], [0.25, 0.25, 0.25, 0.25]])
    mask = torch.tensor([True, False, True, False])  # one mask shared by both rows
    dist = MaskedCategorical(probs=probs, mask=mask)
    expected = torch.tensor([[0.25, 0.0, 0.75, 0.0], [0.5, 0.0, 0.5, 0.0]])
    torch.testing.assert_close(dist.probs, expected)
    assert dist.batch_shape == (2,) and dist.mask.shape == (2, 4)
    torch.testing.assert_close(MaskedOneHotCategorical(probs=probs, mask=mask).mean, expected)


def test_expand_keeps_mask():
    logits, mask = _make((3,))
    dist = MaskedCategorical(logits=logits, mask=mask).expand((2, 3))
    assert dist.batch_shape == (2, 3) and dist.mask.shape == (2, 3, N)
    draws = dist.sample((100,))
    assert draws.shape == (100, 2, 3)
    assert dist.mask.expand(100, 2, 3, N).gather(-1, draws.unsqueeze(-1)).all()
    one_hot = MaskedOneHotCategorical(logits=logits, mask=mask).expand((2, 3))
    assert isinstance(one_hot, MaskedOneHotCategorical)
    assert not (one_hot.rsample((100,)).bool() & ~mask).any()


def test_one_hot_categorical_matches_torch():
    logits = torch.randn(2, 3, N)
    dist = OneHotCategorical(logits=logits)
    reference = torch.distributions.OneHotCategorical(logits=logits)
    value = reference.sample((4,))
    torch.testing.assert_close(dist.log_prob(value), reference.log_prob(value))
    torch.testing.assert_close(dist.entropy(), reference.entropy())
    assert torch.equal(dist.mode, reference.mode)
    assert torch.equal(dist.deterministic_sample, reference.mode)
    assert dist.expand((5, 2, 3)).batch_shape == (5, 2, 3)
    with pytest.raises(ValueError, match="exactly one of logits and probs"):
        OneHotCategorical()


@pytest.mark.parametrize("one_hot", [False, True])
def test_probabilistic_module_integration(one_hot):
    logits, mask = _make((4,), seed=8)
    logits = logits.masked_fill(~mask, 100.0)
    td = TensorDict({"logits": logits, "action_mask": mask}, batch_size=[4])
    module = ProbabilisticTensorDictModule(
        in_keys={"logits": "logits", "mask": "action_mask"},
        out_keys=["action"],
        distribution_class=MaskedOneHotCategorical if one_hot else MaskedCategorical,
        return_log_prob=True,
        default_interaction_type=InteractionType.RANDOM,
    )
    out = module(td.clone())
    action = out["action"]
    index = action.argmax(-1) if one_hot else action
    assert mask.gather(-1, index.unsqueeze(-1)).all()
    assert torch.isfinite(out["action_log_prob"]).all()
    for kind in ("deterministic", "mode"):
        with set_interaction_type(kind):
            det = module(td.clone())["action"]
        det_index = det.argmax(-1) if one_hot else det
        assert torch.equal(det_index, torch.where(mask, logits, -math.inf).argmax(-1))


def test_torchrl_positional_order():
    # OneHotCategorical(logits, probs, grad_method) and
    # MaskedOneHotCategorical(logits, probs, mask, indices, neg_inf, padding_value, grad_method)
    logits = torch.zeros(4, N, requires_grad=True)
    relaxed = OneHotCategorical(logits, None, ReparamGradientStrategy.RelaxedOneHot)
    assert relaxed.grad_method is ReparamGradientStrategy.RelaxedOneHot
    mask = torch.zeros(4, N, dtype=torch.bool)
    mask[:, 2] = True
    dist = MaskedOneHotCategorical(logits, None, mask, None, -1e9, -1, "RelaxedOneHot")
    assert dist.sample((5,)).argmax(-1).eq(2).all()
    assert dist.grad_method is ReparamGradientStrategy.RelaxedOneHot
