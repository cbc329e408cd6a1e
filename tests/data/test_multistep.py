"""MultiStep: n-step returns of collector batches, against a plain-loop reference (TorchRL semantics)."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from tdrl.data import MultiStep


def reference(reward, done, gamma, n):
    """Plain loops over one [T] trajectory stream: (n-step reward, steps ahead k)."""
    steps = len(reward)
    out, ahead = [], []
    for t in range(steps):
        k = 0
        while k < n - 1 and t + k < steps - 1 and not done[t + k]:
            k += 1
        out.append(sum(gamma**i * reward[t + i] for i in range(k + 1)))
        ahead.append(k)
    return out, ahead


def batch(batch_shape, steps, seed=0):
    g = torch.Generator().manual_seed(seed)
    shape = (*batch_shape, steps)
    done = torch.rand(shape, generator=g) < 0.25
    truncated = done & (torch.rand(shape, generator=g) < 0.5)
    obs = torch.randn(*shape, 3, generator=g)
    data = {
        "obs": obs,
        "next": {
            "obs": torch.randn(*shape, 3, generator=g),
            "reward": torch.randn(*shape, 1, generator=g),
            "done": done.unsqueeze(-1),
            "terminated": (done & ~truncated).unsqueeze(-1),
            "truncated": truncated.unsqueeze(-1),
        },
    }
    return TensorDict(data, list(shape))


@pytest.mark.parametrize("batch_shape", [(), (2, 3)])
@pytest.mark.parametrize("n_steps", [1, 3, 5])
def test_matches_plain_loop(batch_shape, n_steps):
    gamma = 0.9
    data = batch(batch_shape, 12)
    before = data.clone()
    out = MultiStep(gamma, n_steps)(data)
    assert (data == before).all()  # the input is not modified
    flat_in, flat_out = data.reshape(-1, 12), out.reshape(-1, 12)
    for row in range(flat_in.shape[0]):
        src, dst = flat_in[row], flat_out[row]
        reward = src["next", "reward"].squeeze(-1).tolist()
        done = src["next", "done"].squeeze(-1).tolist()
        expected, ahead = reference(reward, done, gamma, n_steps)
        assert dst["next", "reward"].squeeze(-1).tolist() == pytest.approx(expected, abs=1e-5)
        assert torch.equal(dst["next", "original_reward"], src["next", "reward"])
        target = torch.arange(12) + torch.tensor(ahead)
        assert torch.equal(dst["next", "obs"], src["next", "obs"][target])
        for key in ("done", "terminated", "truncated"):  # done flags are not shifted
            assert torch.equal(dst["next", key], src["next", key])
        assert torch.equal(dst["obs"], src["obs"])
        assert dst["steps_to_next_obs"].tolist() == [k + 1 for k in ahead]
        assert dst["gamma"].tolist() == pytest.approx([gamma ** (k + 1) for k in ahead])
        assert dst["nonterminal"].tolist() == [k != 0 for k in ahead]


def test_truncation_ends_the_window_like_termination():
    done = torch.zeros(6, 1, dtype=torch.bool)
    done[2] = True
    data = TensorDict(
        {
            "next": {
                "reward": torch.ones(6, 1),
                "done": done,
                "terminated": torch.zeros(6, 1, dtype=torch.bool),
                "truncated": done.clone(),
                "obs": torch.arange(6),
            }
        },
        [6],
    )
    out = MultiStep(gamma=0.5, n_steps=3)(data)
    assert out["next", "obs"].tolist() == [2, 2, 2, 5, 5, 5]
    assert out["next", "reward"].squeeze(-1).tolist() == [1.75, 1.5, 1.0, 1.75, 1.5, 1.0]
    assert out["steps_to_next_obs"].dtype == torch.int64
    assert out["gamma"].dtype == torch.float32


def test_collector_mask_clears_nonterminal():
    data = batch((), 6)
    data["next", "done"][:] = False
    data["collector", "mask"] = torch.tensor([True, False, True, True, True, True])
    out = MultiStep(0.9, 2)(data)
    assert out["nonterminal"].tolist() == [True, False, True, True, True, False]


def test_errors():
    with pytest.raises(ValueError, match="n_steps"):
        MultiStep(0.9, 0)
    with pytest.raises(ValueError, match="gamma"):
        MultiStep(1.5, 2)
    ms = MultiStep(0.9, 2)
    with pytest.raises(KeyError, match="reward"):
        ms(TensorDict({"next": {"done": torch.zeros(3, dtype=torch.bool)}}, [3]))
    with pytest.raises(ValueError, match="done entry"):
        ms(
            TensorDict(
                {"next": {"done": torch.zeros(3, 2, dtype=torch.bool), "reward": torch.ones(3)}},
                [3],
            )
        )
    with pytest.raises(TypeError, match="TensorDict"):
        ms({"next": {}})
