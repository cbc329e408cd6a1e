"""ParallelEnv behaviour: same results as SerialEnv, shared buffers, start methods, seeding."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

from tdrl.envs.batched import ParallelEnv, SerialEnv
from tdrl.envs.core import EnvCreator, check_env_specs
from tdrl.errors import SpecError, WorkerError
from tdrl.specs import Unbounded
from tdrl.testing import CountingEnv, NestedCountingEnv

pytestmark = pytest.mark.timeout(60)


class ResetCounter(CountingEnv):
    """A CountingEnv that reports how many times it was reset in the ``"resets"`` entry."""

    def __init__(self, batch_size=(), max_steps=100):
        super().__init__(batch_size=batch_size, max_steps=max_steps)
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


def _zero_policy(env):
    zero = env.full_action_spec.zero()
    return lambda td: td.update(zero)


@pytest.mark.parametrize("sub_batch", [(), (2,)])
def test_matches_serial_env_on_nested_groups(sub_batch):
    kwargs = {"batch_size": sub_batch, "nested_max_steps": (2, 3), "max_steps": 4}
    with ParallelEnv(3, NestedCountingEnv, kwargs, mp_start_method="fork") as env:
        serial = SerialEnv(3, NestedCountingEnv, kwargs)
        assert env.batch_size == serial.batch_size == (3, *sub_batch)
        assert env.full_observation_spec == serial.full_observation_spec
        check_env_specs(env)
        data = env.rollout(9, _zero_policy(env), break_when_any_done=False)
        ref = serial.rollout(9, _zero_policy(serial), break_when_any_done=False)
        assert (data == ref).all()


def test_step_and_maybe_reset_and_fresh_outputs():
    with ParallelEnv(2, CountingEnv, {"max_steps": 2}, mp_start_method="fork") as env:
        td = env.reset()
        first, td = env.step_and_maybe_reset(env.rand_action(td))
        kept = first["next", "observation"]
        assert not kept.is_shared()
        second, td = env.step_and_maybe_reset(env.rand_action(td))
        assert kept.flatten().tolist() == [1.0, 1.0]
        assert second["next", "observation"].flatten().tolist() == [2.0, 2.0]
        assert second["next", "done"].all() and not td["done"].any()
        assert td["observation"].eq(0).all()


def test_partial_reset_only_reaches_the_workers_asked():
    with ParallelEnv(3, ResetCounter, mp_start_method="fork") as env:
        td = env.step_mdp(env.step(env.rand_action(env.reset())))
        td.set("_reset", torch.tensor([[False], [True], [False]]))
        out = env.reset(td)
        assert out["observation"].flatten().tolist() == [1.0, 0.0, 1.0]
        # each worker reports its own reset count at the next step
        nxt = env.step(env.rand_action(out))["next"]
        assert nxt["resets"].flatten().tolist() == [1.0, 2.0, 1.0]


def test_set_seed_chains_distinct_seeds_through_the_workers():
    class SeedEcho(CountingEnv):
        def _step(self, td):
            return super()._step(td).set("reward", torch.full((1,), float(self.seed)))

    chain = [5]
    for _ in range(3):  # TorchRL's seed chain: numpy default_rng bytes, mod 2**32 - 1
        drawn = np.random.default_rng(chain[-1]).bytes(8)
        chain.append(int.from_bytes(drawn, "big") % (2**32 - 1))
    with ParallelEnv(3, SeedEcho, mp_start_method="fork") as env:
        assert env.set_seed(5) == chain[3]
        rewards = env.rand_step(env.reset())["next", "reward"].flatten().tolist()
        assert rewards == torch.tensor(chain[:3], dtype=torch.float32).tolist()


class SeedReturningEnv(CountingEnv):
    """Its observation is drawn from a generator seeded by ``_set_seed``, which returns its input."""

    def __init__(self):
        super().__init__()
        self.gen = torch.Generator()

    def _set_seed(self, seed):
        self.gen.manual_seed(seed)
        return seed

    def _reset(self, td):
        return super()._reset(td).set("observation", torch.rand(1, generator=self.gen))


def test_workers_of_an_env_returning_its_seed_produce_distinct_data():
    with ParallelEnv(3, SeedReturningEnv, mp_start_method="fork") as env:
        env.set_seed(0)
        obs = env.reset()["observation"].flatten().tolist()
    assert len(set(obs)) == 3


def test_invalid_actions_are_rejected_before_dispatch():
    with ParallelEnv(2, CountingEnv, {"max_steps": 100}, mp_start_method="fork") as env:
        td = env.reset()
        with pytest.raises(SpecError, match=r"'action'.*got shape \(2, 3\)"):
            env.step(td.clone().set("action", torch.zeros(2, 3)))
        with pytest.raises(SpecError, match="dtype"):  # (an exact cast, e.g. int64, passes)
            env.step(td.clone().set("action", torch.zeros(2, 1, dtype=torch.complex64)))
        env.validate = True
        with pytest.raises(SpecError, match="action"):
            env.step(td.clone().set("action", torch.full((2, 1), 5.0)))
        # no worker stepped: the next valid step is the first one
        out = env.step(env.rand_action(td))
        assert out["next", "observation"].eq(1).all()
    assert ParallelEnv(2, CountingEnv, {"validate": True}).validate


def test_factories_with_other_specs_raise_at_construction():
    with pytest.raises(ValueError, match=r"__init__: sub-env 1 .*batch_size \(\) != \(2,\)"):
        ParallelEnv(2, [CountingEnv, lambda: CountingEnv(batch_size=(2,))], mp_start_method="fork")


def test_specs_that_differ_between_workers_raise_at_start():
    built = []

    def make():  # the parent's build (the specs) has batch (), the workers' (forked) (2,)
        built.append(1)
        return CountingEnv(batch_size=(len(built) > 1) * (2,))

    env = ParallelEnv(2, make, mp_start_method="fork")
    with pytest.raises(ValueError, match=r"worker 0 built an env whose specs differ.*batch_size"):
        env.reset()
    assert env.is_closed and env.worker_pids == []


def test_a_factory_that_raises_names_the_worker():
    parent = os.getpid()

    def broken():
        if os.getpid() != parent:  # the specs are read in the parent: fail in the worker
            raise OSError("no simulator here")
        return CountingEnv()

    env = ParallelEnv(2, [CountingEnv, broken], mp_start_method="fork")
    with pytest.raises(WorkerError, match=r"start: worker 1 .*OSError: no simulator here"):
        env.start()
    assert env.is_closed


@pytest.mark.timeout(120)
def test_spawn_with_a_lambda():
    env = ParallelEnv(1, lambda: NestedCountingEnv(batch_size=(2,)), mp_start_method="spawn")
    with env:
        check_env_specs(env)
        data = env.rollout(4, _zero_policy(env), break_when_any_done=False)
    serial = SerialEnv(1, NestedCountingEnv, {"batch_size": (2,)})
    assert (data == serial.rollout(4, _zero_policy(serial), break_when_any_done=False)).all()


@pytest.mark.timeout(120)
def test_forkserver_with_an_env_creator():
    creator = EnvCreator(CountingEnv, {"max_steps": 2})
    with ParallelEnv(1, creator, mp_start_method="forkserver") as env:
        data = env.rollout(3, break_when_any_done=False)
    assert data["next", "observation"].flatten().tolist() == [1.0, 2.0, 1.0]


def test_unknown_start_method_and_bad_timeouts_raise():
    with pytest.raises(ValueError, match="mp_start_method"):
        ParallelEnv(1, CountingEnv, mp_start_method="threads")
    with pytest.raises(ValueError, match="step_timeout"):
        ParallelEnv(1, CountingEnv, step_timeout=float("inf"))


def test_seeded_pendulum_is_reproducible_and_distinct_per_worker():
    from tdrl.envs.builtin import PendulumV1Env

    serial_next = SerialEnv(2, PendulumV1Env).set_seed(3)
    with ParallelEnv(2, PendulumV1Env, mp_start_method="fork") as env:
        runs = []
        for _ in range(2):
            assert env.set_seed(3) == serial_next
            runs.append(env.rollout(5, _zero_policy(env)))
    serial = SerialEnv(2, PendulumV1Env)
    serial.set_seed(3)
    ref = serial.rollout(5, _zero_policy(serial))
    assert (runs[0] == runs[1]).all() and (runs[0] == ref).all()
    assert not torch.equal(runs[0]["observation"][0], runs[0]["observation"][1])


def test_pickles_before_start_only():
    import pickle

    env = ParallelEnv(1, lambda: CountingEnv(max_steps=3), mp_start_method="fork")
    clone = pickle.loads(pickle.dumps(env))
    with clone:
        assert clone.rollout(5)["next", "done"][0, -1].item()
    with env:
        env.start()
        with pytest.raises(TypeError, match="started ParallelEnv cannot be pickled"):
            pickle.dumps(env)
