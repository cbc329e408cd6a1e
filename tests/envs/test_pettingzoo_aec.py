"""PettingZooWrapper on AEC envs (tictactoe, MPE): turn order, masks, raw-API equivalence."""

from __future__ import annotations

import warnings

import numpy as np
import torch
from mpe2 import simple_spread_v3
from tensordict.nn import TensorDictModule

with warnings.catch_warnings():  # pettingzoo>=1.27 deprecates importing env modules
    warnings.simplefilter("ignore", DeprecationWarning)
    from pettingzoo.classic import tictactoe_v3

from tdrl.envs import MarlGroupMapType, SerialEnv, check_env_specs
from tdrl.envs.libs import PettingZooWrapper
from tdrl.modules import MaskedCategorical, ProbabilisticActor, QValueModule
from tdrl.specs import Categorical

PLAYERS = ("player_1", "player_2")


def test_tictactoe_layout():
    env = PettingZooWrapper(tictactoe_v3.env(), use_mask=True)
    assert env.group_map == {"player_1": ["player_1"], "player_2": ["player_2"]}
    obs = env.full_observation_spec
    assert obs["player_1", "observation", "observation"].shape == (1, 3, 3, 2)
    assert obs["player_1", "observation", "observation"].dtype == torch.int8
    mask = obs["player_1", "action_mask"]
    assert isinstance(mask, Categorical) and mask.shape == (1, 9) and mask.dtype == torch.bool
    assert obs["player_2", "mask"].shape == (1,)
    assert env.full_action_spec["player_1", "action"].n == 9
    td = env.reset()
    assert td["player_1", "mask"].tolist() == [True] and td["player_2", "mask"].tolist() == [False]
    assert not env.done_on_any


def _play_tictactoe(seed: int):
    """Plays one game on the wrapper and on a raw copy with the same legal moves."""
    env = PettingZooWrapper(tictactoe_v3.env(), use_mask=True, seed=seed)
    raw = tictactoe_v3.env()
    raw.reset(seed=seed)  # the constructor's seeded reset; env.reset() is the raw's next
    raw.reset()
    rng = np.random.default_rng(seed)
    td = env.reset()
    totals = dict.fromkeys(PLAYERS, 0.0)
    moves = []
    while True:
        mover = raw.agent_selection
        legal = raw.observe(mover)["action_mask"]
        assert td[mover, "action_mask"][0].numpy().tolist() == (legal != 0).tolist()
        move = int(rng.choice(np.flatnonzero(legal)))
        moves.append(move)
        for p in PLAYERS:  # the idle player's action is ignored
            td[p, "action"] = torch.tensor([move if p == mover else int(rng.integers(9))])
        td = env.step(td)
        raw.step(move)
        nxt = td["next"]
        for p in PLAYERS:
            board = raw.observe(p)["observation"]
            np.testing.assert_array_equal(nxt[p, "observation", "observation"][0].numpy(), board)
            assert nxt[p, "reward"].item() == raw.rewards[p]
            assert nxt[p, "terminated"].item() == raw.terminations[p]
            assert nxt[p, "truncated"].item() == raw.truncations[p]
            assert nxt[p, "mask"].item() == (p == raw.agent_selection)
            if p != raw.agent_selection:
                assert nxt[p, "action_mask"].all()
            totals[p] += nxt[p, "reward"].item()
        if nxt["done"].item():
            assert all(raw.terminations.values())
            return totals, moves
        td = env.step_mdp(td)


def _cumulative_rewards(seed: int, moves: list[int]) -> dict[str, float]:
    """The standard AEC loop: what each player collects from ``last()``."""
    raw = tictactoe_v3.env()
    raw.reset(seed=seed)
    totals = dict.fromkeys(PLAYERS, 0.0)
    moves = list(moves)
    for agent in raw.agent_iter():
        _, reward, term, trunc, _ = raw.last()
        totals[agent] += reward
        raw.step(None if term or trunc else moves.pop(0))
    return totals


def test_tictactoe_matches_raw_api():
    for seed in range(3):
        totals, moves = _play_tictactoe(seed)
        assert totals == _cumulative_rewards(seed, moves)


def test_mpe_aec_matches_raw_api():
    make = lambda: simple_spread_v3.env(N=2, max_cycles=2)  # noqa: E731
    env = PettingZooWrapper(make(), use_mask=True, return_state=True, seed=5)
    assert env.group_map == {"agent_0": ["agent_0"], "agent_1": ["agent_1"]}
    raw = make()
    raw.reset(seed=5)  # the constructor's seeded reset; env.reset() is the raw's next
    raw.reset()
    td = env.reset()
    rng = np.random.default_rng(1)
    for _ in range(4):
        mover = raw.agent_selection
        move = int(rng.integers(5))
        for a in ("agent_0", "agent_1"):
            td[a, "action"] = torch.tensor([move])
        td = env.step(td)
        raw.step(move)
        nxt = td["next"]
        for a in ("agent_0", "agent_1"):
            np.testing.assert_array_equal(nxt[a, "observation"][0].numpy(), raw.observe(a))
            assert nxt[a, "reward"].item() == np.float32(raw.rewards[a])
            assert nxt[a, "truncated"].item() == raw.truncations[a]
            assert nxt[a, "mask"].item() == (a == raw.agent_selection)
        np.testing.assert_array_equal(nxt["state"].numpy(), raw.state())
        assert mover != raw.agent_selection
        td = env.step_mdp(td)
    assert td["done"].item() and all(raw.truncations.values())  # 2 cycles of 2 agents


def test_set_seed_resets_the_aec_env_at_once_as_torchrl():
    make = lambda: simple_spread_v3.env(N=2, max_cycles=2)  # noqa: E731
    ref = make()
    ref.reset(seed=9)
    seeded = ref.observe("agent_0")
    ref.reset()  # TorchRL: the first reset after set_seed(9) continues the seeded generator
    following = ref.observe("agent_0")
    assert not np.array_equal(seeded, following)
    env = PettingZooWrapper(make(), use_mask=True)
    assert isinstance(env.set_seed(9), int)
    np.testing.assert_array_equal(env.reset()["agent_0", "observation"][0].numpy(), following)
    built = PettingZooWrapper(make(), use_mask=True, seed=9).reset()
    np.testing.assert_array_equal(built["agent_0", "observation"][0].numpy(), following)
    # a step may follow set_seed: it continues the seeded reset
    ref.reset(seed=4)
    ref.step(3)
    env.set_seed(4)
    td = env.fake_tensordict()
    for a in ("agent_0", "agent_1"):
        td[a, "action"] = torch.tensor([3])
    nxt = env.step(td)["next"]
    np.testing.assert_array_equal(nxt["agent_1", "observation"][0].numpy(), ref.observe("agent_1"))
    assert nxt["agent_1", "mask"].item() and not nxt["agent_0", "mask"].item()


def test_random_actions_honour_the_action_mask():
    env = PettingZooWrapper(tictactoe_v3.env(), use_mask=True, seed=0)
    check_env_specs(env, break_when_any_done="both")
    torch.manual_seed(0)
    data = env.rollout(60, break_when_any_done=False)
    for p in PLAYERS:
        acting = data[p, "mask"]
        chosen = data[p, "action"][acting]
        allowed = data[p, "action_mask"][acting]
        assert allowed.gather(-1, chosen.unsqueeze(-1)).all()
    # illegal moves end a game with -1 for the mover: random legal play never does
    assert data["next", "done"].sum() >= 5


def test_masked_greedy_policy_picks_legal_moves():
    env = PettingZooWrapper(tictactoe_v3.env(), use_mask=True, seed=1)
    modules = [
        QValueModule(
            "categorical",
            action_value_key=(p, "action_value"),
            out_keys=[(p, "action"), (p, "action_value"), (p, "chosen_action_value")],
            action_mask_key=(p, "action_mask"),
        )
        for p in PLAYERS
    ]

    def policy(td):
        for p, module in zip(PLAYERS, modules):
            td[p, "action_value"] = torch.zeros(1, 9)  # ties: the first legal square
            module(td)
        return td

    data = env.rollout(9, policy)
    moves = [
        data[p, "action"][t].item()
        for t in range(data.shape[0])
        for p in PLAYERS
        if data[p, "mask"][t].item()
    ]
    # 0, 1, 2, ...: every move is the first free square; player_1 wins on the 2-4-6 diagonal
    assert moves == list(range(7))
    assert data["next", "done"][-1].item() and data["next", "player_1", "reward"][-1].item() == 1


class _PreferCorner(torch.nn.Module):
    """Logits that favour square 0 whatever the board: legal play needs the mask."""

    def forward(self, board):
        return torch.linspace(8.0, 0.0, 9).expand(*board.shape[:-3], 9)


def test_masked_categorical_policy_samples_legal_moves():
    env = PettingZooWrapper(
        tictactoe_v3.env(), use_mask=True, group_map=MarlGroupMapType.ALL_IN_ONE_GROUP, seed=2
    )
    logits = TensorDictModule(
        _PreferCorner(), [("agents", "observation", "observation")], [("agents", "logits")]
    )
    actor = ProbabilisticActor(
        logits,
        in_keys={"logits": ("agents", "logits"), "mask": ("agents", "action_mask")},
        out_keys=[("agents", "action")],
        distribution_class=MaskedCategorical,
    )
    torch.manual_seed(0)
    data = env.rollout(40, actor, break_when_any_done=False)
    acting = data["agents", "mask"]
    assert acting.sum(-1).eq(1).all()  # one player per step, the other's mask is all true
    chosen = data["agents", "action"][acting]
    assert data["agents", "action_mask"][acting].gather(-1, chosen.unsqueeze(-1)).all()
    assert data["next", "done"].sum() >= 4


def test_serial_env_of_turn_based_games():
    batched = SerialEnv(2, [lambda: PettingZooWrapper(tictactoe_v3.env(), use_mask=True)] * 2)
    batched.set_seed(0)
    data = batched.rollout(30, break_when_any_done=False)
    assert data.shape == (2, 30)
    acting = data["player_1", "mask"] | data["player_2", "mask"]
    assert acting.all()  # exactly one player acts at every step
    assert not (data["player_1", "mask"] & data["player_2", "mask"]).any()
    for p in PLAYERS:
        chosen = data[p, "action"][data[p, "mask"]]
        allowed = data[p, "action_mask"][data[p, "mask"]]
        assert allowed.gather(-1, chosen.unsqueeze(-1)).all()
    batched.close()
