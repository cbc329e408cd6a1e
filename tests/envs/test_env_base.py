"""EnvBase contract: specs, key lists, step checks, done filling, resets and rollouts."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from tensordict import TensorDict

from tdrl.envs.core import EnvBase, check_env_specs
from tdrl.errors import SpecError
from tdrl.specs import Bounded, Categorical, Composite, Unbounded
from tdrl.testing import CountingEnv, MultiKeyEnv, NestedCountingEnv

BATCHES = [(), (2, 3)]


@pytest.mark.parametrize("batch", BATCHES)
def test_reset_and_step_shapes(batch):
    env = CountingEnv(batch_size=batch, max_steps=3)
    td = env.reset()
    assert td.batch_size == torch.Size(batch)
    assert td["observation"].shape == (*batch, 1)
    assert not td["done"].any() and not td["terminated"].any() and not td["truncated"].any()
    td = env.step(env.rand_action(td))
    assert td["next", "observation"].eq(1).all()
    assert td["next", "reward"].eq(1).all()
    assert td["next", "done"].shape == (*batch, 1)


def test_short_accessors_and_key_lists():
    env = CountingEnv(batch_size=(2,))
    assert env.action_keys == ["action"]
    assert env.reward_keys == ["reward"]
    assert env.observation_keys == ["observation"]
    assert sorted(env.done_keys) == ["done", "terminated", "truncated"]
    assert env.reset_keys == ["_reset"]
    assert isinstance(env.action_spec, Bounded)
    assert isinstance(env.done_spec, Composite)
    assert env.full_action_spec["action"] is env.action_spec


def test_nested_keys_and_reset_keys():
    env = NestedCountingEnv(batch_size=(2,))
    assert env.reset_keys == ["_reset", ("nested_1", "_reset"), ("nested_2", "_reset")]
    assert ("nested_1", "action") in env.action_keys
    assert ("nested_2", "reward") in env.reward_keys
    assert len(env.done_groups) == 3


def test_done_spec_completion_fills_terminated():
    class OnlyDone(CountingEnv):
        def __init__(self):
            super().__init__(batch_size=(2,))
            self.done_spec = Categorical(2, shape=(2, 1), dtype=torch.bool)

    env = OnlyDone()
    assert sorted(env.done_keys) == ["done", "terminated"]


def test_spec_with_wrong_batch_shape_raises():
    env = CountingEnv(batch_size=(2,))
    with pytest.raises(ValueError, match=r"full_observation_spec.*got \(3,\).*\(2,\)"):
        env.observation_spec = Composite(observation=Unbounded(shape=(3, 1)), shape=(3,))


@pytest.mark.parametrize("batch", BATCHES)
def test_missing_action_raises_and_env_stays_usable(batch):
    env = CountingEnv(batch_size=batch)
    td = env.reset()
    with pytest.raises(KeyError, match=r"'action' is missing.*available keys"):
        env.step(td.clone())
    td = env.step(env.rand_action(td))
    assert td["next", "observation"].eq(1).all()


def test_wrong_action_shape_and_dtype_raise():
    env = CountingEnv(batch_size=(2,))
    td = env.reset()
    with pytest.raises(SpecError, match=r"'action'.*got shape \(2, 3\).*expected shape \(2, 1\)"):
        env.step(td.clone().set("action", torch.zeros(2, 3)))
    with pytest.raises(SpecError, match=r"dtype torch.bool.*torch.float32, or another real"):
        env.step(td.clone().set("action", torch.zeros(2, 1, dtype=torch.bool)))
    assert env.step(env.rand_action(td))["next", "observation"].eq(1).all()


def test_validate_checks_bounds():
    env = CountingEnv(batch_size=(2,), validate=True)
    td = env.reset().set("action", torch.full((2, 1), 5.0))
    with pytest.raises(SpecError, match="action"):
        env.step(td)
    unchecked = CountingEnv(batch_size=(2,))
    unchecked.step(unchecked.reset().set("action", torch.full((2, 1), 5.0)))


def test_done_after_reset_raises_unless_allowed():
    class StuckEnv(CountingEnv):
        def _reset(self, td):
            out = super()._reset(td)
            out.set("done", torch.ones(*self.batch_size, 1, dtype=torch.bool))
            return out

    with pytest.raises(RuntimeError, match=r"'done' is still true after a reset"):
        StuckEnv(batch_size=(2,)).reset()
    td = StuckEnv(batch_size=(2,), allow_done_after_reset=True).reset()
    assert td["done"].all()


def test_terminated_only_step_fills_done_and_truncated():
    env = CountingEnv(batch_size=(2,), max_steps=1)
    td = env.step(env.rand_action(env.reset()))
    assert td["next", "done"].all() and td["next", "terminated"].all()
    assert not td["next", "truncated"].any()


def _advance(env, td, n):
    for _ in range(n):
        td = env.step_mdp(env.step(env.rand_action(td)))
    return td


def test_partial_reset_of_one_nested_group_keeps_the_others():
    env = NestedCountingEnv(batch_size=(2,), max_steps=100, nested_max_steps=(50, 50))
    td = _advance(env, env.reset(), 2)
    reset = torch.tensor([[True], [False]])
    td.set(("nested_2", "_reset"), reset)
    out = env.reset(td)
    assert out["nested_2", "observation"].squeeze(-1).tolist() == [0.0, 2.0]
    assert out["observation"].eq(2).all()
    assert out["nested_1", "observation"].eq(2).all()
    assert ("nested_2", "_reset") not in out.keys(True)


def test_root_reset_applies_to_every_group():
    env = NestedCountingEnv(batch_size=(2,), max_steps=100, nested_max_steps=(50, 50))
    td = _advance(env, env.reset(), 2)
    td.set("_reset", torch.tensor([[False], [True]]))
    out = env.reset(td)
    for prefix in ((), ("nested_1",), ("nested_2",)):
        obs = out.get((*prefix, "observation"))
        assert obs[0].eq(2).all() and obs[1].eq(0).all()
    assert "_reset" not in out.keys()


def test_reset_keeps_other_input_values():
    env = CountingEnv(batch_size=(2,))
    td = env.reset().set("hidden", torch.ones(2, 4))
    td.set("_reset", torch.tensor([[True], [False]]))
    assert env.reset(td)["hidden"].eq(1).all()


def test_step_and_maybe_reset_resets_only_done_agents():
    env = NestedCountingEnv(batch_size=(2,), max_steps=100, nested_max_steps=(2, 50), n_agents=3)
    td = env.reset()
    for _ in range(2):
        stepped, td = env.step_and_maybe_reset(env.rand_action(td))
    # agent 0 of nested_1 ends at step 2, agents 1 and 2 at 3 and 4
    assert (
        stepped["next", "nested_1", "done"][..., 0].squeeze(-1).tolist()
        == [[True, False, False]] * 2
    )
    assert td["nested_1", "observation"][0].squeeze(-1).tolist() == [0.0, 2.0, 2.0]
    assert td["observation"].eq(2).all() and td["nested_2", "observation"].eq(2).all()
    assert not td["nested_1", "done"].any()
    # the stored transition keeps the terminal observation
    assert stepped["next", "nested_1", "observation"][0].squeeze(-1).tolist() == [2.0] * 3


@pytest.mark.parametrize("batch", BATCHES)
def test_rollout_time_dim_last_and_break(batch):
    env = CountingEnv(batch_size=batch, max_steps=3)
    data = env.rollout(10)
    assert data.batch_size == (*batch, 3)
    assert data["next", "done"][..., -1, :].all()
    data = env.rollout(7, break_when_any_done=False)
    assert data.batch_size == (*batch, 7)
    obs = data["next", "observation"].reshape(-1, 7)[0].tolist()
    assert obs == [1.0, 2.0, 3.0, 1.0, 2.0, 3.0, 1.0]


def test_rollout_with_policy_and_without_auto_reset():
    env = CountingEnv(batch_size=(2,), max_steps=10)
    calls = []

    def policy(td):
        calls.append(1)
        return td.set("action", torch.zeros(2, 1))

    start = env.reset()
    data = env.rollout(4, policy, auto_reset=False, tensordict=start)
    assert len(calls) == 4 and data["action"].eq(0).all()
    with pytest.raises(ValueError, match="auto_reset=False"):
        env.rollout(2, auto_reset=False)


def test_fake_tensordict_matches_rollout_for_all_mocks():
    for env in (CountingEnv((2,)), NestedCountingEnv((2,)), MultiKeyEnv((2,))):
        check_env_specs(env)
        fake = env.fake_tensordict()
        real = env.rand_step()
        assert set(fake.keys(True, True)) == set(real.keys(True, True))


def test_check_env_specs_names_the_bad_key():
    class WrongDtype(CountingEnv):
        def _step(self, td):
            out = super()._step(td)
            out.set("observation", out["observation"].double())
            return out

    with pytest.raises(SpecError, match=r"'observation'|\('next', 'observation'\)"):
        check_env_specs(WrongDtype(batch_size=(2,)))

    class Extra(CountingEnv):
        def _step(self, td):
            return super()._step(td).set("surprise", torch.zeros(2, 1))

    with pytest.raises(SpecError, match="surprise"):
        check_env_specs(Extra(batch_size=(2,)))


def _torchrl_next_seed(seed):
    # TorchRL's seed chain: 8 bytes of numpy's default generator, big-endian, mod 2**32 - 1.
    return int.from_bytes(np.random.default_rng(seed).bytes(8), "big") % (2**32 - 1)


def test_set_seed_chains_and_close_is_idempotent():
    env = CountingEnv()
    assert env.set_seed(7) == _torchrl_next_seed(7) and env.seed == 7
    with env as e:
        assert e is env
    assert env.is_closed
    env.close()
    assert env.is_closed


def test_multi_key_env_rollout_has_every_key():
    env = MultiKeyEnv(batch_size=(3,), max_steps=4)
    data = env.rollout(10)
    assert data.batch_size == (3, 4)
    assert ("next", "discrete", "reward") in data.keys(True)
    assert data["discrete", "action"].dtype == torch.int64


def test_base_hooks_not_implemented_raise():
    class Empty(EnvBase):
        pass

    env = Empty()
    with pytest.raises(NotImplementedError, match="_reset"):
        env.reset()
    with pytest.raises(NotImplementedError, match="_set_seed"):
        env.set_seed(0)
    assert "Empty(batch_size=()" in repr(env)
    td = TensorDict({}, [])
    with pytest.raises(NotImplementedError, match="_step"):
        env.step(td)


def test_check_env_specs_accepts_actions_legal_under_their_own_step_mask():
    class StepMasked(CountingEnv):
        """The legal action index is the step count modulo 3; the spec mask follows it."""

        def __init__(self):
            super().__init__(batch_size=(2,), max_steps=100)
            self.observation_spec = Composite(
                observation=Unbounded(shape=(2, 1)),
                action_mask=Categorical(2, shape=(2, 3), dtype=torch.bool),
                shape=(2,),
            )
            self.action_spec = Categorical(3, shape=(2,))

        def _with_mask(self, td):
            legal = td["observation"][..., 0].long() % 3
            td["action_mask"] = torch.nn.functional.one_hot(legal, 3).bool()
            self.action_spec.update_mask(td["action_mask"])
            return td

        def _reset(self, td):
            return self._with_mask(super()._reset(td))

        def _step(self, td):
            return self._with_mask(super()._step(td))

    check_env_specs(StepMasked(), break_when_any_done=False, num_steps=4)


def test_merge_reset_hook_decides_the_partial_reset_result():
    class KeepsItsOwn(CountingEnv):
        """Its _reset already returns merged data: the hook only adds it to the input."""

        def _reset(self, td):
            obs = torch.full((*self.batch_size, 1), 7.0)
            return TensorDict(observation=obs, batch_size=self.batch_size)

        def _merge_reset(self, old, new, masks):
            return old.update(new)

    env = KeepsItsOwn(batch_size=(2,))
    td = env.step_mdp(env.rand_step(env.reset()))
    td["_reset"] = torch.tensor([[True], [False]])
    td["policy_state"] = torch.ones(2)
    out = env.reset(td)
    assert out["observation"].flatten().tolist() == [7.0, 7.0]  # the default would keep row 1
    assert out["policy_state"].tolist() == [1.0, 1.0] and "_reset" not in out.keys()
    plain = CountingEnv(batch_size=(2,))
    td = plain.step_mdp(plain.rand_step(plain.reset()))
    td["_reset"] = torch.tensor([[True], [False]])
    assert plain.reset(td)["observation"].flatten().tolist() == [0.0, 1.0]


def test_step_keeps_entries_the_policy_wrote_under_next():
    env = CountingEnv(batch_size=(2,))
    td = env.rand_action(env.reset())
    td.set(("next", "hidden"), torch.full((2, 3), 4.0))
    td.set(("next", "observation"), torch.full((2, 1), -1.0))
    out = env.step(td)
    assert out["next", "hidden"].eq(4).all()
    assert out["next", "observation"].eq(1).all()  # the env's own output wins
    assert "hidden" in env.step_mdp(out).keys()


def test_root_reset_without_trailing_dim_on_nested_env():
    env = NestedCountingEnv(batch_size=(3,), max_steps=100, nested_max_steps=(50, 50))
    td = _advance(env, env.reset(), 2)
    td.set("_reset", torch.tensor([True, False, False]))
    out = env.reset(td)
    assert out["observation"].squeeze(-1).tolist() == [0.0, 2.0, 2.0]
    assert out["nested_2", "observation"].squeeze(-1).tolist() == [0.0, 2.0, 2.0]


def test_set_seed_returns_what_the_env_reports():
    class ManySeeds(CountingEnv):
        def _set_seed(self, seed):
            self.seed = seed
            return seed + 10

    assert ManySeeds().set_seed(3) == 13


@pytest.mark.parametrize("returned", ["input", "none"])
def test_set_seed_follows_torchrl_whatever_the_hook_returns(returned):
    class Echo(CountingEnv):
        def _set_seed(self, seed):
            self.seed = seed
            return seed if returned == "input" else None

    env = Echo()
    assert env.set_seed(3) == _torchrl_next_seed(3) and env.seed == 3
    assert env.set_seed(3, static_seed=True) == 3
    assert env.set_seed(None) is None and env.seed is None
    with pytest.raises(ValueError, match=r"set_seed: invalid seed \(got -1"):
        env.set_seed(-1)


@pytest.mark.parametrize("batch", [(), (2, 3)])
def test_unbatched_specs_are_one_env_of_the_batch(batch):
    env = NestedCountingEnv(batch_size=batch)
    assert env.action_spec_unbatched.shape == env.action_spec.shape[len(batch) :]
    for kind in ("action", "observation", "reward", "done", "state"):
        full = getattr(env, f"full_{kind}_spec")
        single = getattr(env, f"full_{kind}_spec_unbatched")
        assert single.shape == () and set(single.keys(True, True)) == set(full.keys(True, True))
        for key in full.keys(True, True):
            assert single[key].shape == full[key].shape[len(batch) :], (kind, key)
        getattr(env, f"{kind}_spec_unbatched")  # the short accessor exists too
    assert env.observation_spec_unbatched.shape == ()


def test_input_and_output_spec_hold_the_full_specs():
    env = NestedCountingEnv(batch_size=(2,))
    inp, out = env.input_spec, env.output_spec
    assert inp.shape == (2,) and out.shape == (2,)
    assert set(inp["full_action_spec"].keys(True, True)) == set(env.action_keys)
    assert set(inp["full_state_spec"].keys(True, True)) == set(env.state_keys)
    assert set(out["full_observation_spec"].keys(True, True)) == set(env.observation_keys)
    assert set(out["full_reward_spec"].keys(True, True)) == set(env.reward_keys)
    assert set(out["full_done_spec"].keys(True, True)) == set(env.done_keys)
    assert inp["full_action_spec"].rand().batch_size == (2,)


def test_step_and_maybe_reset_keeps_the_actions_in_the_next_root_as_torchrl():
    from tdrl.envs.batched import SerialEnv
    from tdrl.testing import CountingEnv

    for env in (CountingEnv(batch_size=(2,), max_steps=5), SerialEnv(2, CountingEnv)):
        td = env.reset().set("action", torch.full((2, 1), 0.25))
        _, root = env.step_and_maybe_reset(td)
        assert root["action"].flatten().tolist() == [0.25, 0.25]  # TorchRL's env._step_mdp
        assert "action" not in env.step_mdp(env.step(td)).keys()  # step_mdp drops them
