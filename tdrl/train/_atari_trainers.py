"""The trainers of the Atari presets: DQN with a lean pixel replay buffer, and PPO; both
compute their value targets with the end-of-life flag as the episode end (as TorchRL's Atari
recipes and CleanRL's ``EpisodicLifeEnv``), while the envs play on until the game is over."""

from __future__ import annotations

from typing import Any

from tensordict import TensorDictBase

from tdrl.data import LazyTensorStorage, TensorDictReplayBuffer
from tdrl.train._atari import restack_next_pixels
from tdrl.train._off_policy import OffPolicyTrainer
from tdrl.train._on_policy import OnPolicyTrainer

__all__ = ["AtariDQNTrainer", "AtariPPOTrainer", "make_atari_trainer"]

_EOL = "end-of-life"


def _end_of_life(config: dict[str, Any]) -> bool:
    return bool(config.get("env_options", {}).get("end_of_life", True))


class AtariDQNTrainer(OffPolicyTrainer):
    """:class:`OffPolicyTrainer` for ``dqn_atari``: the buffer stores uint8 screens only, the
    stacked ``"pixels"`` and the newest screen of ``("next", "pixels")`` (frame_stack + 1
    screens per transition, not 2 x frame_stack, and no float copies); sampled batches get
    their next stacks back from :func:`~tdrl.train._atari.restack_next_pixels`.
    """

    def __init__(self, config: dict[str, Any], out_dir: Any, **kwargs: Any) -> None:
        super().__init__(config, out_dir, **kwargs)
        rc = config["buffer"]
        self.buffer = TensorDictReplayBuffer(
            storage=LazyTensorStorage(int(rc["capacity"]), device=config.get("device", "cpu")),
            batch_size=int(rc["batch_size"]),
            transform=restack_next_pixels,
        )
        if _end_of_life(config):
            self.agent.loss.set_keys(done=_EOL, terminated=_EOL)

    def _store(self, batch: TensorDictBase) -> None:
        data = batch.reshape(-1).select(*self._stored_keys)
        data.set(("next", "pixels"), data.get(("next", "pixels"))[..., -1:, :, :])
        self.buffer.extend(data)


class AtariPPOTrainer(OnPolicyTrainer):
    """:class:`OnPolicyTrainer` for ``ppo_atari`` (the shared-trunk CNN comes from
    ``model.network = "nature_cnn"``); GAE stops at the end of a life."""

    def __init__(self, config: dict[str, Any], out_dir: Any, **kwargs: Any) -> None:
        super().__init__(config, out_dir, **kwargs)
        if _end_of_life(config):
            self.loss.set_keys(done=_EOL, terminated=_EOL)


def make_atari_trainer(config: dict[str, Any], out_dir: Any, **kwargs: Any) -> Any:
    """The trainer of an Atari config (``env_options.preprocessing = "atari"``);
    ``env_processes = -1`` steps each of the ``num_envs`` games in a worker process of its own
    (a :class:`~tdrl.envs.ParallelEnv`)."""
    algorithm = config["algorithm"]
    if config.get("env_processes") == -1:  # one worker process per env (--num-envs of them)
        config = {**config, "env_processes": int(config["num_envs"])}
    if algorithm == "dqn":
        return AtariDQNTrainer(config, out_dir, **kwargs)
    if algorithm in ("ppo", "a2c"):
        return AtariPPOTrainer(config, out_dir, **kwargs)
    raise ValueError(
        f"tdrl train: the Atari preprocessing has no trainer for {algorithm!r} (got "
        "env_options.preprocessing='atari'; expected algorithm 'dqn', 'ppo' or 'a2c'). Train "
        "dqn_atari or ppo_atari."
    )
