"""SerialEnv and EnvCreator: batching, specs, partial resets, seeding, reference loops."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch

from tdrl.envs.batched import SerialEnv
from tdrl.envs.core import EnvBase, EnvCreator, EnvMeta, check_env_specs
from tdrl.errors import SpecError
from tdrl.specs import Unbounded
from tdrl.testing import CountingEnv, MultiKeyEnv, NestedCountingEnv

CASES = [
    (CountingEnv, {"batch_size": ()}),
    (CountingEnv, {"batch_size": (2, 3)}),
    (NestedCountingEnv, {"batch_size": ()}),
    (NestedCountingEnv, {"batch_size": (2,)}),
    (MultiKeyEnv, {"batch_size": (2,)}),
]
IDS = ["flat-()", "flat-(2,3)", "nested-()", "nested-(2,)", "multikey-(2,)"]


class ResetCounter(CountingEnv):
    """A CountingEnv that reports how many times it was reset in the ``"resets"`` entry."""

    def __init__(self, batch_size=(), max_steps=5, **kwargs):
        super().__init__(batch_size=batch_size, max_steps=max_steps, **kwargs)
        self.n_resets = 0
        spec = self.full_observation_spec.clone()
        spec["resets"] = Unbounded(shape=(*self.batch_size, 1))
        self.full_observation_spec = spec

    def _reset(self, td):
        self.n_resets += 1
        return super()._reset(td).set("resets", torch.full((*self.batch_size, 1), self.n_resets))

    def _step(self, td):
        out = super()._step(td)
        return out.set("resets", torch.full((*self.batch_size, 1), float(self.n_resets)))


def _actions_removed(td):
    return td.exclude(
        "action", ("nested_1", "action"), ("nested_2", "action"), ("discrete", "action")
    )


@pytest.mark.parametrize(("cls", "kwargs"), CASES, ids=IDS)
def test_batch_size_specs_and_check_env_specs(cls, kwargs):
    sub = cls(**kwargs)
    env = SerialEnv(3, cls, kwargs)
    assert env.batch_size == (3, *sub.batch_size)
    assert env.full_action_spec == sub.full_action_spec.expand(3, *sub.batch_size)
    assert env.full_done_spec == sub.full_done_spec.expand(3, *sub.batch_size)
    assert env.reset_keys == sub.reset_keys
    check_env_specs(env)


@pytest.mark.parametrize(("cls", "kwargs"), CASES, ids=IDS)
def test_rollout_matches_a_plain_loop_over_the_sub_envs(cls, kwargs):
    env = SerialEnv(3, cls, kwargs)
    policy_actions = env.full_action_spec.zero()
    data = env.rollout(9, lambda td: td.update(policy_actions), break_when_any_done=False)
    refs = []
    for _ in range(3):
        sub = cls(**kwargs)
        zero = sub.full_action_spec.zero()
        refs.append(sub.rollout(9, lambda td, z=zero: td.update(z), break_when_any_done=False))
    expected = torch.stack(refs, 0)
    assert (_actions_removed(data) == _actions_removed(expected)).all()


def test_step_and_maybe_reset_matches_the_two_trip_version():
    env = SerialEnv(2, NestedCountingEnv, {"batch_size": (2,), "nested_max_steps": (2, 3)})
    ref = SerialEnv(2, NestedCountingEnv, {"batch_size": (2,), "nested_max_steps": (2, 3)})
    td, td_ref = env.reset(), ref.reset()
    for _ in range(7):
        td.update(env.full_action_spec.zero())
        td_ref.update(ref.full_action_spec.zero())
        stepped, td = env.step_and_maybe_reset(td)
        stepped_ref, td_ref = EnvBase.step_and_maybe_reset(ref, td_ref)
        assert (stepped == stepped_ref).all()
        assert (td == td_ref).all()


def test_partial_reset_only_reaches_the_envs_asked():
    env = SerialEnv(3, ResetCounter, {"max_steps": 100})
    td = env.reset()
    td = env.step_mdp(env.step(env.rand_action(td)))
    td.set("_reset", torch.tensor([[False], [True], [False]]))
    out = env.reset(td)
    assert [e.n_resets for e in env.envs] == [1, 2, 1]
    assert out["observation"].flatten().tolist() == [1.0, 0.0, 1.0]
    assert "_reset" not in out.keys()
    td.set("_reset", torch.zeros(3, 1, dtype=torch.bool))
    env.reset(td)
    assert [e.n_resets for e in env.envs] == [1, 2, 1]


def test_nested_partial_reset_of_one_group_in_one_worker():
    env = SerialEnv(2, NestedCountingEnv, {"max_steps": 100, "nested_max_steps": (50, 50)})
    td = env.reset()
    for _ in range(2):
        td = env.step_mdp(env.step(env.rand_action(td)))
    td.set(("nested_2", "_reset"), torch.tensor([[False], [True]]))
    out = env.reset(td)
    assert out["nested_2", "observation"].flatten().tolist() == [2.0, 0.0]
    assert out["observation"].eq(2).all() and out["nested_1", "observation"].eq(2).all()
    # a root _reset applies to every group of the envs it selects
    td.set("_reset", torch.tensor([[True], [False]]))
    out = env.reset(td.exclude(("nested_2", "_reset")))
    assert out["nested_1", "observation"][0].eq(0).all()
    assert out["nested_1", "observation"][1].eq(2).all()


def _torchrl_chain(seed, n):
    # TorchRL's seed chain: 8 bytes of numpy's default generator, big-endian, mod 2**32 - 1.
    out = [seed]
    for _ in range(n):
        out.append(int.from_bytes(np.random.default_rng(out[-1]).bytes(8), "big") % (2**32 - 1))
    return out


def test_set_seed_gives_distinct_reproducible_seeds():
    env = SerialEnv(4, CountingEnv)
    chain = _torchrl_chain(7, 4)
    assert env.set_seed(7) == chain[4]
    assert [e.seed for e in env.envs] == chain[:4]
    env.set_seed(7)
    assert [e.seed for e in env.envs] == chain[:4]
    assert env.set_seed(7, static_seed=True) == 7
    assert [e.seed for e in env.envs] == [7] * 4


class EchoSeedEnv(CountingEnv):
    """Draws its observations from a generator seeded by ``_set_seed``, which returns its input."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.gen = torch.Generator()

    def _set_seed(self, seed):
        self.gen.manual_seed(seed)
        return seed

    def _reset(self, td):
        obs = torch.rand((*self.batch_size, 1), generator=self.gen)
        return super()._reset(td).set("observation", obs)


def test_workers_of_an_env_returning_its_seed_get_distinct_seeds_and_data():
    env = SerialEnv(3, EchoSeedEnv)
    assert env.set_seed(0) == _torchrl_chain(0, 3)[3]
    obs = env.reset()["observation"].flatten().tolist()
    ref = [
        torch.rand(1, generator=torch.Generator().manual_seed(s)).item()
        for s in _torchrl_chain(0, 2)
    ]
    assert obs == pytest.approx(ref) and len(set(obs)) == 3


def test_outputs_are_fresh_tensors_the_caller_may_keep():
    env = SerialEnv(2, CountingEnv, {"max_steps": 100})
    first = env.step(env.rand_action(env.reset()))
    kept = first["next", "observation"]
    second = env.step(env.rand_action(env.step_mdp(first)))
    assert kept.flatten().tolist() == [1.0, 1.0]
    assert second["next", "observation"].flatten().tolist() == [2.0, 2.0]


def test_invalid_actions_are_rejected_and_the_env_stays_usable():
    env = SerialEnv(2, CountingEnv, {"max_steps": 100})
    td = env.reset()
    with pytest.raises(SpecError, match=r"'action'.*got shape \(2,\)"):
        env.step(td.clone().set("action", torch.zeros(2)))
    env.validate = True
    with pytest.raises(SpecError, match="action"):
        env.step(td.clone().set("action", torch.full((2, 1), 5.0)))
    assert env.step(env.rand_action(td))["next", "observation"].eq(1).all()


def test_wrong_shape_of_another_input_is_rejected():
    env = SerialEnv(2, CountingEnv)
    td = env.rand_action(env.reset()).set("observation", torch.zeros(2, 3))
    with pytest.raises(SpecError, match=r"'observation'.*got \(2, 3\).*expected \(2, 1\)"):
        env.step(td)


def test_list_of_factories_and_per_worker_kwargs():
    env = SerialEnv(
        2,
        [CountingEnv, lambda max_steps: CountingEnv(max_steps=max_steps)],
        [{"max_steps": 2}, {"max_steps": 4}],
    )
    data = env.rollout(4, break_when_any_done=False)
    assert data["next", "done"].squeeze(-1).tolist() == [
        [False, True, False, True],
        [False, False, False, True],
    ]


def test_factories_with_different_specs_raise():
    with pytest.raises(ValueError, match=r"sub-env 1 .*batch_size \(\) != \(2,\)"):
        SerialEnv(2, [CountingEnv, lambda: CountingEnv(batch_size=(2,))])
    with pytest.raises(ValueError, match=r"one factory per worker.*got 1"):
        SerialEnv(2, [CountingEnv])
    with pytest.raises(ValueError, match="num_workers"):
        SerialEnv(0, CountingEnv)


def test_close_closes_the_sub_envs_and_a_later_call_builds_new_ones():
    with SerialEnv(2, CountingEnv) as env:
        env.reset()
    closed = env.envs
    assert all(e.is_closed for e in closed)
    env.close()
    env.reset()  # TorchRL restarts a closed batched env (see test_batched_restart.py)
    assert not any(e.is_closed for e in env.envs) and not set(env.envs) & set(closed)


def test_extra_root_entries_stay_in_the_parent_and_are_carried():
    env = SerialEnv(2, CountingEnv, {"max_steps": 1})
    td = env.rand_action(env.reset()).set("hidden", torch.ones(2, 3))
    stepped, root = env.step_and_maybe_reset(td)
    assert root["hidden"].eq(1).all()
    assert root["observation"].eq(0).all() and stepped["next", "observation"].eq(1).all()


# ---------------------------------------------------------------------- EnvCreator
def test_env_creator_pickles_lambdas_and_caches_meta():
    calls = []

    def make(max_steps=5):
        calls.append(max_steps)
        return CountingEnv(max_steps=max_steps)

    creator = EnvCreator(lambda **kw: make(**kw), {"max_steps": 3})
    meta = creator.meta
    assert isinstance(meta, EnvMeta) and calls == [3]
    assert creator.meta is meta and calls == [3]
    clone = pickle.loads(pickle.dumps(creator))
    assert clone.meta == meta
    assert clone(max_steps=9).max_steps == 9


def test_env_creator_rejects_non_envs():
    with pytest.raises(TypeError, match="not callable"):
        EnvCreator(3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="returned a int"):
        EnvCreator(lambda: 3)()


def test_env_creator_takes_torchrl_kwargs():
    creator = EnvCreator(CountingEnv, {"max_steps": 3}, True, batch_size=(2,), max_steps=9)
    env = creator()
    assert env.batch_size == (2,) and env.max_steps == 3  # create_env_kwargs wins
    assert EnvCreator(CountingEnv, share_memory=False)().max_steps == 5
