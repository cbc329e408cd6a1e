"""TorchRL's batched-env constructor options: serial_for_single, threads, device, refusals."""

from __future__ import annotations

import pytest
import torch

from tdrl.envs.batched import ParallelEnv, SerialEnv
from tdrl.specs import Unbounded
from tdrl.testing import CountingEnv

pytestmark = pytest.mark.timeout(60)


class ThreadReporter(CountingEnv):
    """Reports ``torch.get_num_threads()`` of the process it runs in, as its observation."""

    def __init__(self):
        super().__init__()
        spec = self.full_observation_spec.clone()
        spec["threads"] = Unbounded(shape=(1,))
        self.full_observation_spec = spec

    def _reset(self, td):
        return super()._reset(td).set("threads", torch.full((1,), float(torch.get_num_threads())))


def test_serial_for_single_runs_in_this_process_like_a_serial_env():
    env = ParallelEnv(1, CountingEnv, {"max_steps": 3}, serial_for_single=True)
    try:
        data = env.rollout(5)
        assert env.worker_pids == [] and env.is_started and env.in_process
        ref = SerialEnv(1, CountingEnv, {"max_steps": 3}).rollout(5)
        assert data.batch_size == ref.batch_size == (1, 3)
        assert torch.equal(data["next", "observation"], ref["next", "observation"])
    finally:
        env.close()
    assert env.is_closed
    two = ParallelEnv(2, CountingEnv, serial_for_single=True, mp_start_method="fork")
    with two:  # only a single worker runs in process
        two.reset()
        assert not two.in_process and len(two.worker_pids) == 2


def test_num_sub_threads_sets_the_workers_threads_and_num_threads_the_parents():
    before = torch.get_num_threads()
    try:
        with ParallelEnv(
            2, ThreadReporter, mp_start_method="fork", num_sub_threads=2, num_threads=1
        ) as env:
            threads = env.reset()["threads"].flatten().tolist()
            assert torch.get_num_threads() == 1
        assert threads == [2.0, 2.0]
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize("cls", [SerialEnv, ParallelEnv])
@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("pin_memory", True),
        ("memmap", True),
        ("policy_proof", print),
        ("share_individual_td", True),
        ("allow_step_when_done", True),
        ("non_blocking", True),
        ("use_buffers", False),
        ("metadata_from_workers", True),
    ],
)
def test_options_tdrl_cannot_honour_raise(cls, name, value):
    with pytest.raises(ValueError, match=rf"{cls.__name__}.__init__: {name}=.* is not supported"):
        cls(2, CountingEnv, **{name: value})


def test_parallel_only_refusals_and_serial_no_ops():
    for name, value in (("shared_memory", False), ("daemon", True)):
        with pytest.raises(ValueError, match=rf"{name}=.* is not supported"):
            ParallelEnv(2, CountingEnv, **{name: value})
    # worker-process options have no effect on a SerialEnv (as in TorchRL)
    env = SerialEnv(
        2, CountingEnv, shared_memory=False, daemon=True, num_threads=3, mp_start_method="fork"
    )
    assert env.rollout(2).batch_size == (2, 2)


def test_device_must_match_the_sub_envs():
    assert SerialEnv(2, CountingEnv, device="cpu").device is None
    with pytest.raises(ValueError, match=r"SerialEnv.__init__: device differs"):
        SerialEnv(2, CountingEnv, device="meta")
