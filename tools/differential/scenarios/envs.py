"""Core env behaviour: reset/step/rollout of the custom env and ``step_mdp`` options."""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDict

from ..registry import capture, scenario
from ._common import count_env, det_policy


def _step_td() -> TensorDict:
    """A root + "next" TensorDict with nested done groups, as an env step writes it."""
    done = torch.tensor([[True], [False]])
    return TensorDict(
        {
            "observation": torch.zeros(2, 3),
            "action": torch.ones(2, 1),
            "state": torch.arange(2.0),
            "other": torch.full((2,), 7.0),
            "done": torch.zeros(2, 1, dtype=torch.bool),
            "agents": {"obs": torch.zeros(2, 4), "done": torch.zeros(2, 1, dtype=torch.bool)},
            "next": {
                "observation": torch.ones(2, 3),
                "reward": torch.ones(2, 1),
                "done": done,
                "terminated": done.clone(),
                "state": torch.arange(2.0) + 1,
                "agents": {
                    "obs": torch.ones(2, 4),
                    "reward": torch.ones(2, 1),
                    "done": ~done,
                },
            },
        },
        [2],
    )


OPTIONS = {
    "default": {},
    "keep_other": {"keep_other": True},
    "keep_other=False": {"keep_other": False},
    "exclude_reward=False": {"exclude_reward": False},
    "exclude_done=True": {"exclude_done": True},
    "exclude_action=False": {"exclude_action": False},
    "reward_keys": {"reward_keys": [("agents", "reward"), "reward"], "exclude_reward": False},
    "done_keys": {"done_keys": ["done"], "exclude_done": True},
    "action_keys": {"action_keys": ["action"], "exclude_action": False},
}

for _name, _opts in OPTIONS.items():

    def _make(opts: dict[str, Any] = _opts, name: str = _name) -> None:
        @scenario(f"envs/step_mdp/{name}")
        def _(lib: Any) -> Any:
            return capture(lambda: lib.envs_utils.step_mdp(_step_td(), **opts))

        _make()


@scenario("envs/step_mdp/next_tensordict")
def _(lib: Any) -> Any:
    td = _step_td()
    out = TensorDict({}, [2])
    result = lib.envs_utils.step_mdp(td, next_tensordict=out)
    return {"result": result, "is_given": result is out}


@scenario("envs/CountEnv/specs")
def _(lib: Any) -> Any:
    env = count_env(lib, (2,))
    return {
        "observation_spec": env.observation_spec,
        "full_done_spec": env.full_done_spec,
        "action_spec": env.action_spec,
        "reward_spec": env.reward_spec,
        "done_keys": sorted(map(str, env.done_keys)),
        "reset_keys": sorted(map(str, env.reset_keys)),
        "input_spec": env.input_spec,
        "output_spec": env.output_spec,
    }


@scenario("envs/CountEnv/rollout")
def _(lib: Any) -> Any:
    env = count_env(lib, (2,))
    return env.rollout(6, det_policy())


@scenario("envs/CountEnv/rollout_break_when_any_done=False")
def _(lib: Any) -> Any:
    env = count_env(lib, (2,))
    return env.rollout(6, det_policy(), break_when_any_done=False)


@scenario("envs/CountEnv/rollout_break_when_all_done")
def _(lib: Any) -> Any:
    env = count_env(lib, (2,))
    return capture(
        lambda: env.rollout(6, det_policy(), break_when_any_done=False, break_when_all_done=True)
    )


@scenario("envs/CountEnv/rollout_unbatched")
def _(lib: Any) -> Any:
    env = count_env(lib, ())
    return env.rollout(5, det_policy())


@scenario("envs/CountEnv/rollout_no_auto_reset")
def _(lib: Any) -> Any:
    env = count_env(lib, (2,))
    td = env.reset()
    td = env.step(det_policy()(td))
    return env.rollout(3, det_policy(), auto_reset=False, tensordict=lib.envs_utils.step_mdp(td))


@scenario("envs/CountEnv/step_and_maybe_reset")
def _(lib: Any) -> Any:
    env = count_env(lib, (2,))
    td = env.reset()
    out = []
    for _ in range(4):
        td = det_policy()(td)
        step, td = env.step_and_maybe_reset(td)
        out.append({"step": step.clone(), "next_root": td.clone()})
    return out


@scenario("envs/CountEnv/partial_reset")
def _(lib: Any) -> Any:
    env = count_env(lib, (2,))
    td = env.reset()
    for _ in range(2):
        td = lib.envs_utils.step_mdp(env.step(det_policy()(td)))
    td["_reset"] = torch.tensor([[True], [False]])
    return env.reset(td)


@scenario("envs/CountEnv/partial_reset_mask_only")
def _(lib: Any) -> Any:
    """Only ``_reset`` given: what the rows that are not reset hold afterwards."""
    env = count_env(lib, (2,))
    td = env.reset()
    for _ in range(2):
        td = lib.envs_utils.step_mdp(env.step(det_policy()(td)))
    out = env.reset(TensorDict({"_reset": torch.tensor([[True], [False]])}, [2]))
    return {"reset": out, "env_count": env.count}


@scenario("envs/CountEnv/step_wrong_action_shape")
def _(lib: Any) -> Any:
    env = count_env(lib, (2,))
    td = env.reset()
    td["action"] = torch.zeros(2, 3)
    return capture(lambda: env.step(td))


@scenario("envs/check_env_specs")
def _(lib: Any) -> Any:
    return capture(lambda: lib.envs_utils.check_env_specs(count_env(lib, (2,))))


@scenario("envs/CountEnv/rand_step")
def _(lib: Any) -> Any:
    env = count_env(lib, (2,))
    td = env.rand_step(env.reset())
    action = td.pop("action")
    td["next"].pop("reward")
    return {"td": td, "action_in_bounds": bool(action.abs().le(1).all())}


@scenario("envs/CountEnv/rollout_set_truncated")
def _(lib: Any) -> Any:
    env = count_env(lib, (2,), horizon=6)
    return capture(lambda: env.rollout(3, det_policy(), set_truncated=True))


@scenario("envs/CountEnv/fake_tensordict")
def _(lib: Any) -> Any:
    env = count_env(lib, (2,))
    return env.fake_tensordict()


@scenario("envs/CountEnv/rand_action")
def _(lib: Any) -> Any:
    env = count_env(lib, (2,))
    td = env.rand_action(env.reset())
    return {"keys": sorted(map(str, td.keys(True, True))), "shape": list(td["action"].shape)}


@scenario("envs/CountEnv/rollout_policy_none")
def _(lib: Any) -> Any:
    env = count_env(lib, (2,))
    td = env.rollout(3)
    action = td.pop("action")
    td["next"].pop("reward")
    return {"td": td, "in_bounds": bool(action.abs().le(1).all())}


@scenario("envs/CountEnv/set_seed_return")
def _(lib: Any) -> Any:
    env = count_env(lib, (2,))
    return {"first": env.set_seed(0), "second": env.set_seed(5)}
