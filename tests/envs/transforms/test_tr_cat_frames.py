"""CatFrames: frame stacks against a plain loop, trajectories through forward, per-group resets."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from tdrl.envs import CatFrames, TransformedEnv
from tdrl.testing import NestedCountingEnv, TransformContract, TransformTestEnv


def _next(key):
    return ("next", *((key,) if isinstance(key, str) else key))


class _ExplicitNextForward(TransformContract):
    """forward takes keys as given: the same CatFrames with ``("next", k)`` named too."""

    forward_mode = "custom"

    def check_forward(self, transform, base_rollout, env_rollout):
        keys, outs = transform.in_keys, transform.out_keys
        explicit = CatFrames(
            transform.N,
            transform.dim,
            [*keys, *map(_next, keys)],
            [*outs, *map(_next, outs)],
            padding=transform.padding,
            padding_value=transform.padding_value,
        )
        got = explicit(base_rollout.clone())
        for key in [*outs, *map(_next, outs)]:
            torch.testing.assert_close(got[key], env_rollout[key], msg=f"key {key}")


class TestCatFramesContract(_ExplicitNextForward):
    def make_transform(self, layout):
        key = ("agents", "observation") if layout == "nested" else "observation"
        return CatFrames(3, -1, key)


class TestCatFramesPixelsConstantContract(_ExplicitNextForward):
    layouts = ("flat",)
    batch_sizes = ((2,),)

    def make_transform(self, layout):
        return CatFrames(2, -3, "pixels", "stack", padding="constant", padding_value=7)


def _reference(frames, starts, n, pad=None):
    """Plain loop over one member: the last n frames of the current episode, oldest first."""
    out, history = [], []
    for frame, start in zip(frames, starts):
        if start:
            history = []
        history.append(frame)
        window = history[-n:]
        fill = [window[0] if pad is None else torch.full_like(frame, pad)] * (n - len(window))
        out.append(torch.cat(fill + window, -1))
    return torch.stack(out)


@pytest.mark.parametrize("batch", [(), (2, 3)])
@pytest.mark.parametrize("pad", [None, -1.0])
def test_env_stacks_match_a_plain_loop(batch, pad):
    padding = "same" if pad is None else "constant"
    t = CatFrames(3, -1, "observation", "stack", padding=padding, padding_value=pad or 0.0)
    env = TransformedEnv(TransformTestEnv(batch, max_steps=2), t)
    td = env.rollout(8, break_when_any_done=False)
    obs = td["observation"].reshape(-1, 8, 3)
    done = td["next", "done"].reshape(-1, 8)
    stack = td["stack"].reshape(-1, 8, 9)
    for row in range(obs.shape[0]):
        starts = [True, *done[row, :-1].tolist()]
        torch.testing.assert_close(stack[row], _reference(obs[row], starts, 3, pad))
    nxt = td["next", "stack"]
    torch.testing.assert_close(nxt[..., :6], td["stack"][..., 3:])
    torch.testing.assert_close(nxt[..., 6:], td["next", "observation"])


def test_forward_on_a_trajectory_equals_the_env():
    env = TransformedEnv(
        TransformTestEnv((2,), max_steps=2), CatFrames(4, -1, "observation", "stack")
    )
    td = env.rollout(9, break_when_any_done=False)
    sample = td.exclude("stack", ("next", "stack"))
    out = env.transform(sample.clone())  # keys as given: the root stack only
    torch.testing.assert_close(out["stack"], td["stack"])
    assert ("next", "stack") not in out.keys(True)
    both = CatFrames(4, -1, [("next", "observation"), "observation"], [("next", "s"), "s"])
    out = both(sample.clone())  # each input is read before any stack is written
    torch.testing.assert_close(out["s"], td["stack"])
    torch.testing.assert_close(out["next", "s"], td["next", "stack"])
    in_place = CatFrames(4, -1, ["observation", ("next", "observation")])(sample.clone())
    torch.testing.assert_close(in_place["next", "observation"], td["next", "stack"])


def test_only_the_reset_agent_restarts_its_stack():
    env = TransformedEnv(
        NestedCountingEnv(batch_size=(2,), max_steps=50),
        CatFrames(2, -1, ("nested_1", "observation"), ("nested_1", "stack")),
    )
    td = env.reset()
    for _ in range(2):
        td = env.step_mdp(env.step(env.rand_action(td)))
    before = td["nested_1", "stack"].clone()
    assert before[0, 0].tolist() == [1.0, 2.0]
    mask = torch.zeros(2, 3, 1, dtype=torch.bool)
    mask[0, 1] = True
    td[("nested_1", "_reset")] = mask
    out = env.reset(td)
    expected = before.clone()
    expected[0, 1] = 0.0
    assert out["nested_1", "stack"].equal(expected)
    nxt = env.step(env.rand_action(out))["next", "nested_1", "stack"]
    assert nxt[0, 1].tolist() == [0.0, 1.0] and nxt[0, 0].tolist() == [2.0, 3.0]


def test_forward_needs_a_time_dim_and_the_frames():
    t = CatFrames(2, -1, "obs")
    with pytest.raises(ValueError, match="no time dim"):
        t(TensorDict(obs=torch.zeros(3)))
    with pytest.raises(KeyError, match=r"CatFrames.forward: key 'obs'"):
        t(TensorDict(other=torch.zeros(4, 1), batch_size=[4]))


def test_step_before_reset_and_bad_arguments():
    env = TransformedEnv(TransformTestEnv(), CatFrames(2, -1, "observation", "s"))
    td = env.fake_tensordict().exclude("next")
    with pytest.raises(RuntimeError, match=r"CatFrames._step: no frames"):
        env.step(td)
    with pytest.raises(ValueError, match="negative dim"):
        CatFrames(2, 0)
    with pytest.raises(ValueError, match="padding"):
        CatFrames(2, -1, padding="reflect")
