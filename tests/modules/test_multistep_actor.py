"""MultiStepActorWrapper: TorchRL 0.14.1's actions and keys, env rollouts, resets and errors."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule

from tdrl.envs import CartPoleEnv, InitTracker, TransformedEnv
from tdrl.modules import MultiStepActorWrapper
from tdrl.modules.tensordict_module.actors import MultiStepActorWrapper as AliasWrapper

# Rows flagged as starting an episode at each call (three rows, a partial reset at t=2 and t=5).
INIT = [[1, 1, 1], [0, 0, 0], [0, 1, 0], [0, 0, 0], [0, 0, 0], [1, 0, 0], [0, 0, 0], [0, 0, 0]]


def _planner(n: int, out_key: object = "action") -> TensorDictModule:
    """Chunk k of row b planned at step t is 100 t + 10 b + k (readable provenance)."""
    return TensorDictModule(
        lambda obs: obs.unsqueeze(-2) * 10 + torch.arange(float(n)).reshape(n, 1),
        in_keys=["observation"],
        out_keys=[out_key],
    )


def _drive(
    wrapper: MultiStepActorWrapper, read: object = "action"
) -> tuple[list, list, TensorDict]:
    td = TensorDict(batch_size=[3])
    actions, counters = [], []
    for t, init in enumerate(INIT):
        td["observation"] = torch.arange(3.0).unsqueeze(-1) + 100 * t
        td["is_init"] = torch.tensor(init, dtype=torch.bool).unsqueeze(-1)
        td = wrapper(td)
        actions.append(td[read].flatten().tolist())
        counters.append(td["counter"].flatten().tolist())
    return actions, counters, td


# Obtained from TorchRL 0.14.1 (torchrl.modules.MultiStepActorWrapper, same actor and inputs).
N3_ACTIONS = [
    [0.0, 10.0, 20.0], [1.0, 11.0, 21.0], [2.0, 2010.0, 22.0], [3000.0, 2011.0, 3020.0],
    [3001.0, 2012.0, 3021.0], [5000.0, 5010.0, 3022.0], [5001.0, 5011.0, 6020.0],
    [5002.0, 5012.0, 6021.0],
]  # fmt: skip
N3_COUNTERS = [
    [1, 1, 1], [2, 2, 2], [3, 1, 3], [1, 2, 1], [2, 3, 2], [1, 1, 3], [2, 2, 1], [3, 3, 2],
]  # fmt: skip
CYCLE_ACTIONS = [
    [0.0, 10.0, 20.0], [1.0, 11.0, 21.0], [2.0, 2010.0, 22.0], [0.0, 2011.0, 20.0],
    [1.0, 2012.0, 21.0], [5000.0, 2010.0, 22.0], [5001.0, 2011.0, 20.0],
    [5002.0, 2012.0, 21.0],
]  # fmt: skip
REPLAN_ACTIONS = [
    [0.0, 10.0, 20.0], [1.0, 11.0, 21.0], [2000.0, 2010.0, 2020.0], [2001.0, 2011.0, 2021.0],
    [4000.0, 4010.0, 4020.0], [5000.0, 4011.0, 4021.0], [5001.0, 6010.0, 6020.0],
    [7000.0, 6011.0, 6021.0],
]  # fmt: skip


def test_dispatches_the_chunk_and_replans_on_reset_as_torchrl() -> None:
    actions, counters, td = _drive(MultiStepActorWrapper(_planner(3), n_steps=3))
    assert actions == N3_ACTIONS and counters == N3_COUNTERS
    assert td["action_orig"].shape == (3, 3, 1) and td["action"].shape == (3, 1)
    assert td["counter"].dtype == torch.int32 and td["counter"].shape == (3, 1)


def test_without_n_steps_cycles_the_chunk_until_a_reset_as_torchrl() -> None:
    actions, counters, _ = _drive(MultiStepActorWrapper(_planner(3)))
    assert actions == CYCLE_ACTIONS
    assert counters[-1] == [3, 6, 8]


def test_replan_interval_requeries_early_as_torchrl() -> None:
    actions, _, _ = _drive(MultiStepActorWrapper(_planner(4), n_steps=4, replan_interval=2))
    assert actions == REPLAN_ACTIONS
    keep, _, td = _drive(MultiStepActorWrapper(_planner(2), n_steps=2, keep_dim=True))
    assert keep == REPLAN_ACTIONS and td["action"].shape == (3, 1, 1)


@pytest.mark.parametrize(
    ("out_key", "cache", "read"),
    [
        ("action", "action_orig", "action"),
        ("action_chunk", "action_chunk", "action"),
        (("vla_action", "chunk"), ("vla_action", "chunk"), "action"),
        # TorchRL raises on this one (it caches the actor's sub-tensordict, which lacks the
        # "_orig" entry); tdrl caches at ("agent", "action_orig").
        (("agent", "action"), ("agent", "action_orig"), ("agent", "action")),
    ],
)
def test_key_names_are_torchrl_s(out_key: object, cache: object, read: object) -> None:
    wrapper = MultiStepActorWrapper(_planner(3, out_key), n_steps=3)
    actions, _, td = _drive(wrapper, read=read)
    assert actions == N3_ACTIONS
    assert wrapper.action_keys == [read]
    assert td[cache].shape == (3, 3, 1)
    assert wrapper.in_keys == ["observation", "is_init"]
    expected_out = [out_key] + [k for k in (read, cache) if k != out_key] + ["counter"]
    assert wrapper.out_keys == expected_out


def test_nested_init_key_gives_a_nested_counter() -> None:
    wrapper = MultiStepActorWrapper(_planner(3), n_steps=3, init_key=("meta", "is_init"))
    assert wrapper.counter_key == ("meta", "counter")
    assert wrapper.in_keys == ["observation", ("meta", "is_init")]
    td = TensorDict(observation=torch.zeros(2, 1), batch_size=[2])
    td["meta", "is_init"] = torch.ones(2, 1, dtype=torch.bool)
    assert wrapper(td)["meta", "counter"].tolist() == [[1], [1]]


def _bit_planner(n: int) -> TensorDictModule:
    """A categorical CartPole plan: action k is (k + [pole angle > 0]) % 2."""
    return TensorDictModule(
        lambda obs: (torch.arange(n) + (obs[..., 2:3] > 0).long()).remainder(2),
        in_keys=["observation"],
        out_keys=["action"],
    )


@pytest.mark.parametrize("batch", [(), (3,)])
def test_rollout_on_a_builtin_env_follows_the_plan(batch: tuple[int, ...]) -> None:
    n, steps = 3, 14
    env = TransformedEnv(
        CartPoleEnv(batch_size=batch, categorical_action_encoding=True, max_episode_steps=5),
        InitTracker(),
    )
    env.set_seed(0)
    planner = _bit_planner(n)
    rollout = env.rollout(
        steps, MultiStepActorWrapper(planner, n_steps=n), break_when_any_done=False
    )
    rows = rollout.reshape(-1, steps)
    assert rollout["action"].shape == (*batch, steps)
    assert rollout["action_orig"].shape == (*batch, steps, n)
    resets = 0
    for row in rows.unbind(0):
        start = None  # plain re-planning rule: a new episode or a consumed chunk
        for t in range(steps):
            if bool(row["is_init"][t]) or start is None or t - start >= n:
                start, resets = t, resets + int(t > 0 and bool(row["is_init"][t]))
            plan = planner(TensorDict(observation=row["observation"][start]))["action"]
            assert row["action"][t].item() == plan[t - start].item(), (t, start)
            assert row["counter"][t].item() == t - start + 1
    assert resets > 0  # the 5-step episodes reset inside a 3-step chunk


def test_the_action_written_is_fresh_memory() -> None:
    wrapper = MultiStepActorWrapper(_planner(3), n_steps=3)
    td = TensorDict(
        observation=torch.zeros(2, 1), is_init=torch.ones(2, 1, dtype=torch.bool), batch_size=[2]
    )
    out = wrapper(td)
    out["action"].add_(1000)
    assert out["action_orig"].max().item() < 1000


def test_errors() -> None:
    with pytest.raises(ValueError, match=r"MultiStepActorWrapper\.__init__: replan_interval"):
        MultiStepActorWrapper(_planner(3), n_steps=3, replan_interval=4)
    with pytest.raises(ValueError, match="replan_interval"):
        MultiStepActorWrapper(_planner(3), replan_interval=0)
    with pytest.raises(ValueError, match="single init_key"):
        MultiStepActorWrapper(_planner(3), init_key=["a", "b"])
    with pytest.raises(ValueError, match="differ in length"):
        MultiStepActorWrapper(_planner(3), action_keys=["action", "other"])
    with pytest.raises(ValueError, match="no action chunk"):
        MultiStepActorWrapper(_planner(3, "logits"))
    wrapper = MultiStepActorWrapper(_planner(3), n_steps=3)
    with pytest.raises(KeyError, match=r"'is_init'.*InitTracker"):
        wrapper(TensorDict(observation=torch.zeros(2, 1), batch_size=[2]))
    partial = TensorDict(
        observation=torch.zeros(2, 1), is_init=torch.tensor([[True], [False]]), batch_size=[2]
    )
    with pytest.raises(RuntimeError, match="only some rows start an episode"):
        wrapper(partial)
    first = TensorDict(
        observation=torch.zeros(2, 1), is_init=torch.ones(2, 1, dtype=torch.bool), batch_size=[2]
    )
    with pytest.raises(RuntimeError, match="wrong length"):
        MultiStepActorWrapper(_planner(3), n_steps=4)(first.clone())
    with pytest.raises(RuntimeError, match="replan_interval exceeds"):
        MultiStepActorWrapper(_planner(2), replan_interval=3)(first.clone())


def test_torchrl_module_path_alias() -> None:
    assert AliasWrapper is MultiStepActorWrapper


def test_seeded_gym_rollout_matches_torchrl() -> None:
    from tdrl.envs import GymEnv, SerialEnv

    torch.manual_seed(0)
    lin = torch.nn.Linear(3, 4)
    planner = TensorDictModule(
        lambda obs: torch.tanh(lin(obs)).unflatten(-1, (4, 1)) * 2,
        in_keys=["observation"],
        out_keys=["action"],
    )
    env = TransformedEnv(SerialEnv(2, lambda: GymEnv("Pendulum-v1")), InitTracker())
    env.set_seed(0)
    with torch.no_grad():
        rollout = env.rollout(
            10, MultiStepActorWrapper(planner, n_steps=4), break_when_any_done=False
        )
    # TorchRL 0.14.1, same script (torchrl.envs.SerialEnv/GymEnv/InitTracker, same seeds).
    expected = [
        [-0.33048066, -0.12894648, -0.57152569, 0.05560290, 0.42310905,
         -0.41280282, -0.26295915, 0.08706467, 0.22654922, -0.45112759],
        [0.07283529, -1.17763197, 0.48954242, -0.18622814, -1.74118781,
         -0.24703266, 0.17543341, -0.83956492, -1.97277367, 0.99684733],
    ]  # fmt: skip
    torch.testing.assert_close(rollout["action"][..., 0], torch.tensor(expected))
    assert rollout["counter"][..., 0].tolist() == [[1, 2, 3, 4, 1, 2, 3, 4, 1, 2]] * 2
    assert rollout["action_orig"].shape == (2, 10, 4, 1)
    env.close()


def test_keys_can_be_reassigned_after_construction() -> None:
    wrapper = MultiStepActorWrapper(_planner(3), n_steps=3)
    wrapper.action_keys = ["move"]  # the actor's "action" chunk becomes the cache, as TorchRL
    wrapper.init_key = "first"
    assert wrapper.counter_key == "counter" and wrapper.in_keys == ["observation", "first"]
    assert wrapper.out_keys == ["action", "move", "counter"]
    td = TensorDict(
        observation=torch.ones(2, 1), first=torch.ones(2, 1, dtype=torch.bool), batch_size=[2]
    )
    out = wrapper(td)
    assert out["move"].flatten().tolist() == [10.0, 10.0]
    assert out["action"].shape == (2, 3, 1) and "action_orig" not in out.keys()
    wrapper.init_key = None  # ignored, as TorchRL
    assert wrapper.init_key == "first"
    with pytest.raises(ValueError, match=r"MultiStepActorWrapper\.init_key: only a single"):
        wrapper.init_key = ["a"]
