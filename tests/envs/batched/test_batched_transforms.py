"""Batched envs with transforms inside the workers and around the batched env."""

from __future__ import annotations

import pytest
import torch

from tdrl.envs.batched import ParallelEnv, SerialEnv
from tdrl.envs.core import check_env_specs
from tdrl.envs.transforms import ActionMask, StepCounter, TensorDictPrimer, TransformedEnv
from tdrl.specs import Bounded, Unbounded
from tdrl.testing import CountingEnv, TransformTestEnv

pytestmark = pytest.mark.timeout(60)


def _batched(kind, n, make):
    if kind == "serial":
        return SerialEnv(n, make)
    return ParallelEnv(n, make, mp_start_method="fork")


def _legal(td, action="action", mask="action_mask"):
    return td[mask].gather(-1, td[action].unsqueeze(-1)).all()


@pytest.mark.parametrize("kind", ["serial", "parallel"])
def test_primer_inside_carries_what_the_policy_writes(kind):
    def make():
        primer = TensorDictPrimer(
            hidden=Unbounded(shape=(4,)), expand_specs=True, default_value=1.0
        )
        return TransformedEnv(CountingEnv(max_steps=100), primer)

    with _batched(kind, 2, make) as env:
        assert "hidden" in env.state_keys and env.full_observation_spec["hidden"].shape == (2, 4)
        td = env.reset()
        assert td["hidden"].eq(1).all()
        td = env.rand_action(td)
        td["next", "hidden"] = torch.arange(8.0).reshape(2, 4)  # a recurrent policy's output
        td, root = env.step_and_maybe_reset(td)
        assert td["next", "hidden"].tolist() == torch.arange(8.0).reshape(2, 4).tolist()
        assert root["hidden"].tolist() == td["next", "hidden"].tolist()
        root.set("_reset", torch.tensor([[True], [False]]))
        out = env.reset(root)
        assert out["hidden"][0].eq(1).all() and out["hidden"][1].tolist() == [4.0, 5.0, 6.0, 7.0]
        # without a policy value, the root value is carried forward
        nxt = env.step(env.rand_action(out))["next"]
        assert nxt["hidden"].tolist() == out["hidden"].tolist()


@pytest.mark.parametrize("kind", ["serial", "parallel"])
def test_action_mask_inside_keeps_random_actions_legal(kind):
    with _batched(
        kind, 2, lambda: TransformedEnv(TransformTestEnv((3,), max_steps=6), ActionMask())
    ) as env:
        torch.manual_seed(0)
        td = env.rollout(12, break_when_any_done=False)
        assert _legal(td)
        assert td["action"].max() > 0  # the masks open up over time
        spec_mask = env.full_action_spec["action"].mask
        assert spec_mask is not None and spec_mask.shape == (2, 3, 4)


@pytest.mark.parametrize("kind", ["serial", "parallel"])
def test_transforms_around_the_batched_env(kind):
    base = _batched(kind, 2, lambda: TransformTestEnv((3,), max_steps=6))
    env = TransformedEnv(base, ActionMask())
    env.append_transform(StepCounter(max_steps=4))
    with env:
        check_env_specs(env)
        torch.manual_seed(0)
        td = env.rollout(10, break_when_any_done=False)
        assert _legal(td)
        assert td["next", "step_count"].max() == 4
        assert td["next", "truncated"].any()
    assert base.is_closed


def _counted(max_steps=3):
    # a primer whose bound is the worker's max_steps: per-worker spec values
    level = Bounded(0, max_steps, shape=(1,), dtype=torch.int64)
    env = TransformedEnv(CountingEnv(max_steps=100), StepCounter(max_steps))
    return env.append_transform(TensorDictPrimer(level=level))


@pytest.mark.parametrize("kind", ["serial", "parallel"])
def test_per_worker_kwargs_whose_specs_differ_in_bounds_stack_them(kind):
    # TorchRL: per-worker spec values (here a primer's bound) give a batched spec with per-row
    # bounds
    kwargs = [{"max_steps": 2}, {"max_steps": 4}]
    if kind == "serial":
        env = SerialEnv(2, _counted, create_env_kwargs=kwargs)
    else:
        env = ParallelEnv(2, _counted, create_env_kwargs=kwargs, mp_start_method="fork")
    spec = env.observation_spec["level"]
    assert spec.shape == (2, 1) and spec.space.high.flatten().tolist() == [2, 4]
    check_env_specs(env)
    data = env.rollout(6, break_when_any_done=False)
    assert data["next", "step_count"].flatten().tolist() == [1, 2, 1, 2, 1, 2, 1, 2, 3, 4, 1, 2]
    env.close()
    assert env.rollout(2)["next", "step_count"].flatten().tolist() == [1, 2, 1, 2]  # restart
    env.close()


def test_per_worker_specs_that_differ_in_more_than_values_are_refused():
    def extra():
        env = CountingEnv()
        env.full_observation_spec = env.full_observation_spec.clone().set(
            "extra", Unbounded(shape=(1,))
        )
        return env

    with pytest.raises(ValueError, match=r"sub-env 1 does not have the specs of sub-env 0"):
        SerialEnv(2, [CountingEnv, extra])
    with pytest.raises(ValueError, match=r"sub-env 1 does not have the specs .*batch_size"):
        ParallelEnv(2, [CountingEnv, lambda: CountingEnv(batch_size=(2,))])
