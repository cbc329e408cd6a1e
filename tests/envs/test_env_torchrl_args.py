"""EnvBase accepts TorchRL's constructor, reset and rollout arguments (or refuses them clearly)."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from tdrl.envs.core import EnvBase
from tdrl.errors import SpecError
from tdrl.testing import CountingEnv


def test_rollout_callback_gets_env_and_each_next_root_but_the_last():
    seen = []
    env = CountingEnv(max_steps=10)
    data = env.rollout(4, None, lambda e, td: seen.append((e, td["observation"].item())))
    assert data.batch_size == (4,)
    assert [s[1] for s in seen] == [1.0, 2.0, 3.0] and all(s[0] is env for s in seen)


def test_rollout_with_precomputed_actions_is_bounded_by_their_number():
    env = CountingEnv(max_steps=10)
    actions = [torch.full((1,), 0.25 * i) for i in range(3)]
    data = env.rollout(10, actions=actions)
    assert data.batch_size == (3,)
    assert data["action"].flatten().tolist() == [0.0, 0.25, 0.5]
    with pytest.raises(ValueError, match="both policy and actions"):
        env.rollout(3, env.rand_action, actions=actions)


def test_set_truncated_marks_the_last_step():
    data = CountingEnv(batch_size=(2,), max_steps=10).rollout(3, set_truncated=True)
    assert data["next", "truncated"][:, :, 0].tolist() == [[False, False, True]] * 2
    assert data["next", "done"][:, -1].all() and not data["next", "terminated"].any()


def test_break_when_any_done_defaults_to_true_and_false_goes_on():
    env = CountingEnv(max_steps=2)
    assert env.rollout(6).batch_size == (2,)
    assert env.rollout(6, break_when_any_done=False).batch_size == (6,)


def test_rollout_without_auto_reset_resets_done_groups_first():
    env = CountingEnv(batch_size=(2,), max_steps=3)
    start = env.step_mdp(env.rand_step(env.reset()))
    start["done"] = torch.tensor([[True], [False]])
    data = env.rollout(1, auto_reset=False, tensordict=start)
    assert data["observation"].flatten().tolist() == [0.0, 1.0]


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("out", TensorDict({}, [])),
        ("storing_device", "cpu"),
    ],
)
def test_rollout_options_tdrl_cannot_honour_raise(name, value):
    with pytest.raises(ValueError, match=rf"rollout: {name}=.* is not supported"):
        CountingEnv().rollout(2, **{name: value})


class StateEnv(CountingEnv):
    """Starts from the ``"observation"`` given to reset when there is one."""

    def _reset(self, td):
        out = super()._reset(td)
        if td is not None and "observation" in td.keys():
            out["observation"] = td["observation"].clone()
        return out


def test_reset_set_state_false_hides_the_states_and_other_kwargs_raise():
    env = StateEnv()
    given = TensorDict({"observation": torch.full((1,), 4.0)}, [])
    assert env.reset(given)["observation"].item() == 4.0
    assert env.reset(given, set_state=False)["observation"].item() == 0.0
    with pytest.raises(ValueError, match=r"reset: unsupported arguments.*set_state=True"):
        env.reset(given, set_state=True)
    with pytest.raises(ValueError, match=r"reset: unsupported arguments.*'seed'"):
        env.reset(given, seed=3)


class Liar(EnvBase):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.observation_spec = CountingEnv().observation_spec
        self.action_spec = CountingEnv().action_spec
        self.reward_spec = CountingEnv().reward_spec

    def _reset(self, td):
        return TensorDict({"observation": torch.zeros(1, dtype=torch.float64)}, [])

    def _step(self, td):
        return TensorDict({"observation": torch.zeros(1), "reward": torch.zeros(1)}, [])

    def _set_seed(self, seed):
        pass


def test_constructor_arguments():
    assert Liar(batch_size=None).batch_size == ()
    Liar().reset()  # no type checks by default
    with pytest.raises(SpecError, match="observation"):
        Liar(run_type_checks=True).reset()
    assert Liar(spec_locked=False).spec_locked is False
    with pytest.raises(ValueError, match=r"auto_reset=True is not supported"):
        Liar(auto_reset=True)


def test_check_env_specs_arguments():
    from tdrl.envs.core import check_env_specs

    class WrongDtype(CountingEnv):
        def _step(self, td):
            out = super()._step(td)
            return out.set("observation", out["observation"].double())

    with pytest.raises(SpecError, match=r"check_env_specs: WrongDtype entry .* dtype"):
        check_env_specs(WrongDtype())
    # the dtype comparison is skipped; the value check against the spec still runs
    with pytest.raises(SpecError, match=r"assert_is_in: .*'observation' has the wrong dtype"):
        check_env_specs(WrongDtype(), check_dtype=False)
    torch.manual_seed(1)
    state = torch.get_rng_state()
    env = CountingEnv(max_steps=2)
    check_env_specs(env, seed=7, break_when_any_done="both")
    assert env.seed == 7 and torch.equal(torch.get_rng_state(), state)
    start = env.step_mdp(env.rand_step(env.reset()))
    check_env_specs(env, tensordict=start)


def test_close_accepts_raise_if_closed_and_facade_exports():
    from tdrl.envs import make_composite_from_td

    env = CountingEnv()
    env.close(raise_if_closed=True)
    env.close(raise_if_closed=True)  # idempotent, as TorchRL's base close
    assert env.is_closed
    spec = make_composite_from_td(TensorDict({"a": torch.zeros(2, 3)}, [2]))
    assert spec["a"].shape == (2, 3)
