"""TensorDictPrimer: specs, defaults, partial resets and carrying of policy states."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from tdrl.envs import StepCounter, TensorDictPrimer, TransformedEnv, check_env_specs
from tdrl.specs import Bounded, Composite, Unbounded
from tdrl.testing import NestedCountingEnv, TransformContract, TransformTestEnv


class TestPrimerContract(TransformContract):
    def make_transform(self, layout):
        key = ("agents", "hidden") if layout == "nested" else "hidden"
        return TensorDictPrimer({key: Unbounded(shape=(2, 4))}, expand_specs=True)


class TestPrimerRandomContract(TransformContract):
    layouts = ("flat",)
    forward_mode = "custom"

    def make_transform(self, layout):
        return TensorDictPrimer(
            h=Bounded(-1.0, 1.0, shape=(3,)), expand_specs=True, default_value="random"
        )

    def check_forward(self, transform, base_rollout, env_rollout):
        out = transform(base_rollout)
        assert out["h"].shape == (*base_rollout.batch_size, 3)
        assert out["h"].abs().le(1).all()


def test_specs_go_to_observation_and_state():
    env = TransformedEnv(
        TransformTestEnv((2,)), TensorDictPrimer(h=Unbounded(shape=(5,)), expand_specs=True)
    )
    assert env.full_observation_spec["h"].shape == (2, 5)
    assert env.full_state_spec["h"].shape == (2, 5)
    fake = env.fake_tensordict()
    assert fake["h"].shape == (2, 5) and fake["next", "h"].shape == (2, 5)


def test_batched_specs_without_expand_and_the_error_when_they_do_not_fit():
    spec = Composite(h=Unbounded(shape=(2, 5)), shape=(2,))
    env = TransformedEnv(TransformTestEnv((2,)), TensorDictPrimer(spec))
    assert env.reset()["h"].shape == (2, 5)
    with pytest.raises(ValueError, match=r"TensorDictPrimer.*'h'.*\(5,\).*expand_specs=True"):
        TransformedEnv(TransformTestEnv((2,)), TensorDictPrimer(h=Unbounded(shape=(5,))))


@pytest.mark.parametrize("default", [0.0, 2.5, "random", lambda spec: torch.full(spec.shape, 7.0)])
def test_default_values(default):
    t = TensorDictPrimer(
        h=Bounded(-1.0, 10.0, shape=(3,)), expand_specs=True, default_value=default
    )
    td = TransformedEnv(TransformTestEnv((4,)), t).reset()
    if default == "random":
        assert td["h"].abs().le(10).all() and td["h"].std() > 0
    elif callable(default):
        assert td["h"].eq(7).all()
    else:
        assert td["h"].eq(default).all()


def test_per_key_defaults_and_bad_defaults():
    t = TensorDictPrimer(
        a=Unbounded(shape=(1,)),
        b=Unbounded(shape=(1,)),
        expand_specs=True,
        default_value={"a": 1.0, "b": 2.0},
    )
    td = TransformedEnv(TransformTestEnv(), t).reset()
    assert td["a"].item() == 1.0 and td["b"].item() == 2.0
    with pytest.raises(TypeError, match="default_value"):
        TensorDictPrimer(a=Unbounded(), default_value="zeros")
    with pytest.raises(KeyError, match="default_value names keys"):
        TensorDictPrimer(a=Unbounded(), default_value={"c": 1.0})
    with pytest.raises(TypeError, match="not a leaf spec"):
        TensorDictPrimer(a=3)


def test_step_carries_the_root_value_unless_the_policy_wrote_next():
    env = TransformedEnv(
        TransformTestEnv((2,)), TensorDictPrimer(h=Unbounded(shape=(3,)), expand_specs=True)
    )
    td = env.reset()
    td["h"] = torch.ones(2, 3)
    out = env.step(env.rand_action(td.clone()))
    assert out["next", "h"].eq(1).all()
    td["next"] = TensorDict(h=torch.full((2, 3), 5.0), batch_size=(2,))
    out = env.step(env.rand_action(td))
    assert out["next", "h"].eq(5).all()
    assert env.step_mdp(out)["h"].eq(5).all()


def test_rollout_with_a_recurrent_policy_threads_the_state():
    env = TransformedEnv(
        TransformTestEnv((2,), max_steps=3),
        TensorDictPrimer(h=Unbounded(shape=(1,)), expand_specs=True),
    )

    def policy(td):
        td = env.rand_action(td)
        td["next", "h"] = td["h"] + 1
        return td

    td = env.rollout(5, policy, break_when_any_done=False)
    # the state counts steps since the last reset: a reset writes 0 only where done
    done = td["next", "done"][..., 0]
    for row in range(2):
        count = 0.0
        for t in range(5):
            assert td["h"][row, t].item() == count
            count = 0.0 if done[row, t] else count + 1


def test_partial_reset_only_resets_the_owning_group():
    env = TransformedEnv(
        NestedCountingEnv(batch_size=(2,), max_steps=50),
        TensorDictPrimer(
            {("nested_1", "h"): Unbounded(shape=(3, 2)), "g": Unbounded(shape=(2,))},
            expand_specs=True,
        ),
    )
    td = env.reset()
    td[("nested_1", "h")] = torch.ones(2, 3, 2)
    td["g"] = torch.ones(2, 2)
    mask = torch.zeros(2, 3, 1, dtype=torch.bool)
    mask[0, 2] = True
    td[("nested_1", "_reset")] = mask
    out = env.reset(td)
    expected = torch.ones(2, 3, 2)
    expected[0, 2] = 0
    assert out["nested_1", "h"].equal(expected)
    assert out["g"].eq(1).all()


def test_reset_key_ties_every_entry_to_one_group():
    env = TransformedEnv(
        NestedCountingEnv(batch_size=(2,), max_steps=50),
        TensorDictPrimer(
            g=Unbounded(shape=(2,)), expand_specs=True, reset_key=("nested_2", "_reset")
        ),
    )
    td = env.reset()
    td["g"] = torch.ones(2, 2)
    td[("nested_2", "_reset")] = torch.tensor([[True], [False]])
    out = env.reset(td)
    assert out["g"].tolist() == [[0.0, 0.0], [1.0, 1.0]]
    with pytest.raises(KeyError, match="reset_key"):
        TransformedEnv(NestedCountingEnv(), TensorDictPrimer(g=Unbounded(), reset_key="nope"))


def test_key_clash_and_works_with_other_transforms():
    with pytest.raises(KeyError, match="already in the env's observation spec"):
        TransformedEnv(TransformTestEnv(), TensorDictPrimer(observation=Unbounded(shape=(3,))))
    env = TransformedEnv(
        TransformTestEnv((3,)), TensorDictPrimer(h=Unbounded(shape=(2,)), expand_specs=True)
    )
    env.append_transform(StepCounter(4))
    check_env_specs(env)


def test_device_is_torchrl_keyword_not_a_primer():
    t = TensorDictPrimer(hidden=Unbounded(shape=(4,)), device="meta", expand_specs=True)
    assert list(t.primers) == ["hidden"] and t.primers["hidden"].device == torch.device("meta")
    t = TensorDictPrimer({"hidden": Unbounded(shape=(4,))}, device="cpu")
    assert list(t.primers) == ["hidden"]
