"""Recurrent policies in collectors: primers found in the policy, states carried across batches."""

from __future__ import annotations

import copy

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule, TensorDictSequential

from tdrl.collectors import (
    Collector,
    MultiAsyncCollector,
    MultiSyncCollector,
    add_policy_primers,
)
from tdrl.envs import ParallelEnv, SerialEnv
from tdrl.modules.rnn import GRUModule, LSTMModule
from tdrl.testing import CountingEnv

STATES = ("recurrent_state_h", "recurrent_state_c")


def _policy(seed=0):
    torch.manual_seed(seed)
    lstm = LSTMModule(1, 6, in_key="observation", out_key="features", num_layers=2)
    head = TensorDictModule(torch.nn.Linear(6, 1), in_keys=["features"], out_keys=["action"])
    return TensorDictSequential(lstm, head), lstm


def _replay(lstm, data):
    """The states a fresh sequence-mode pass over ``data`` [B, T] computes (the oracle)."""
    seq = copy.deepcopy(lstm).set_recurrent_mode(True)
    td = data.select("observation", "is_init", *STATES).clone()
    with torch.no_grad():
        return seq(td)


def _check_carried(lstm, batches):
    data = torch.cat(batches, dim=-1)  # [B, 2T]: the batch boundary sits in the middle
    assert bool(data["is_init"][..., 0, :].all())
    init = data["is_init"][..., 0]
    assert data["recurrent_state_h"][init].abs().sum() == 0  # zero where a trajectory starts
    expected = _replay(lstm, data)
    for key in STATES:
        torch.testing.assert_close(data["next", key], expected["next", key])
    t = batches[0].shape[-1]
    cont = ~batches[0]["next", "done"][..., -1, 0]
    assert cont.any()
    torch.testing.assert_close(
        batches[1]["recurrent_state_h"][..., 0, :, :][cont],
        batches[0]["next", "recurrent_state_h"][..., t - 1, :, :][cont],
    )


def test_add_policy_primers_finds_every_recurrent_module_once():
    lstm = LSTMModule(1, 4, in_key="observation", out_key="a")
    gru = GRUModule(4, 3, in_key="a", out_key="b", state_key="gru_state")
    policy = TensorDictSequential(lstm, gru, lstm)
    env = add_policy_primers(CountingEnv(batch_size=(2,)), policy)
    td = env.reset()
    assert td["recurrent_state_c"].shape == (2, 1, 4) and td["gru_state"].shape == (2, 1, 3)
    assert td["is_init"].shape == (2, 1)
    again = add_policy_primers(env, policy)
    assert len(list(again.transform)) == 0
    other = LSTMModule(1, 4, in_key="observation", out_key="c", state_keys=("gru_state", "x"))
    with pytest.raises(KeyError, match="distinct state_keys"):
        add_policy_primers(CountingEnv(), TensorDictSequential(gru, other))
    linear = TensorDictModule(torch.nn.Linear(1, 1), ["observation"], ["action"])
    plain = add_policy_primers(CountingEnv(), linear)
    assert set(plain.reset().keys()) == set(CountingEnv().reset().keys())


def test_collector_carries_the_hidden_state_across_batches():
    policy, lstm = _policy()
    env = add_policy_primers(SerialEnv(2, lambda: CountingEnv(max_steps=5)), policy)
    collector = Collector(env, policy, frames_per_batch=2 * 7, total_frames=4 * 7)
    batches = [b.clone() for b in collector]
    assert batches[0]["recurrent_state_h"].shape == (2, 7, 2, 6)
    _check_carried(lstm, batches)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("cls", [MultiSyncCollector, MultiAsyncCollector])
def test_multi_collectors_carry_the_hidden_state(cls):
    policy, lstm = _policy()
    if cls is MultiSyncCollector:

        def make_env():
            return add_policy_primers(
                ParallelEnv(2, lambda: CountingEnv(max_steps=5), mp_start_method="fork"), policy
            )
    else:

        def make_env():
            return add_policy_primers(SerialEnv(2, lambda: CountingEnv(max_steps=5)), policy)

    with cls([make_env] * 2, policy, frames_per_batch=28, mp_start_method="fork") as collector:
        per_worker: dict[int, list[TensorDict]] = {}
        for batch in collector:
            if cls is MultiSyncCollector:
                for w in range(2):
                    per_worker.setdefault(w, []).append(batch[w].clone())
            else:
                per_worker.setdefault(collector.last_worker, []).append(batch.clone())
            if all(len(v) >= 2 for v in per_worker.values()) and len(per_worker) == 2:
                break
    for batches in per_worker.values():
        _check_carried(lstm, batches[:2])
