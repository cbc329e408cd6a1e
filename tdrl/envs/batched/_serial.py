"""SerialEnv: several copies of an env stepped one after the other in this process."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from tdrl.envs.batched._batched_base import BatchedEnvBase, EnvFactory, check_torchrl_options
from tdrl.envs.batched._runner import Buffers, EnvRunner
from tdrl.envs.core import EnvBase, EnvMeta

__all__ = ["SerialEnv"]


class SerialEnv(BatchedEnvBase):
    """Runs ``num_workers`` sub-envs in this process behind one batched env.

    The batch size is ``[num_workers, *sub_env.batch_size]`` and the specs are the sub-env specs
    expanded to it. The sub-envs are built in the constructor; they must all have the same specs.
    Outputs are fresh tensors (the caller may keep them across steps); inputs are copied into a
    preallocated buffer whose row ``i`` is what sub-env ``i`` receives. Errors raised by a sub-env
    propagate unchanged. Use it to debug what a :class:`ParallelEnv` would do, or when the sub-envs
    are too cheap for processes to pay off.

    Args:
        num_workers: number of sub-envs.
        create_env_fn: a callable returning an :class:`EnvBase` (an env class, a lambda, an
            :class:`EnvCreator`), or a list with one per sub-env.
        create_env_kwargs: keyword arguments of the factory: one dict for all, or one per sub-env.
        device: the sub-envs' device (``None``: read from them); another device raises.

    TorchRL's other constructor arguments are accepted at their defaults; the options that only
    concern worker processes (``shared_memory``, ``num_threads``, ``num_sub_threads``,
    ``serial_for_single``, ``mp_start_method``, ``consolidate``, ``daemon``,
    ``shutdown_timeout``) have no effect, as in TorchRL; a value tdrl cannot honour
    (``pin_memory=True``, ``memmap=True``, ``policy_proof``, ``share_individual_td=True``,
    ``allow_step_when_done=True``, ``non_blocking=True``, ``use_buffers=False``,
    ``metadata_from_workers=True``) raises ``ValueError``.

    ``close()`` closes the sub-envs (idempotent). As in TorchRL, a closed env builds new
    sub-envs on its next ``reset``, ``step``, ``step_and_maybe_reset``, ``set_seed``,
    ``rollout``, ``state_dict`` or ``load_state_dict``: seeds and the sub-envs' state do not
    carry over (call ``set_seed`` again).

    Raises:
        ValueError: the sub-envs do not have the same specs (the message names the first
            differing one and the entry).

    Examples:
        >>> from tdrl.testing import CountingEnv
        >>> env = SerialEnv(3, CountingEnv, {"max_steps": 4})
        >>> env.batch_size, env.action_spec.shape
        (torch.Size([3]), torch.Size([3, 1]))
        >>> env.rollout(10)["next", "observation"].shape
        torch.Size([3, 4, 1])
    """

    def __init__(
        self,
        num_workers: int,
        create_env_fn: EnvFactory | Sequence[EnvFactory],
        create_env_kwargs: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None = None,
        *,
        pin_memory: bool = False,
        share_individual_td: bool | None = None,
        shared_memory: bool = True,
        memmap: bool = False,
        policy_proof: Any = None,
        device: torch.device | str | None = None,
        allow_step_when_done: bool = False,
        num_threads: int | None = None,
        num_sub_threads: int = 1,
        serial_for_single: bool = False,
        non_blocking: bool = False,
        mp_start_method: str | None = None,
        use_buffers: bool | None = None,
        metadata_from_workers: bool = False,
        consolidate: bool = True,
        daemon: bool = False,
        shutdown_timeout: float = 10.0,
    ) -> None:
        # shared_memory, num_threads, num_sub_threads, serial_for_single, mp_start_method,
        # consolidate, daemon and shutdown_timeout only concern worker processes: no effect here
        # (as in TorchRL's SerialEnv).
        check_torchrl_options(
            "SerialEnv",
            {
                "pin_memory": pin_memory,
                "share_individual_td": share_individual_td,
                "memmap": memmap,
                "policy_proof": policy_proof,
                "allow_step_when_done": allow_step_when_done,
                "non_blocking": non_blocking,
                "use_buffers": use_buffers,
                "metadata_from_workers": metadata_from_workers,
            },
        )
        self._envs: list[EnvBase] = []
        self._runners: list[EnvRunner] = []
        super().__init__(num_workers, create_env_fn, create_env_kwargs, device=device)

    def _close_sub_envs(self) -> None:
        for env in self._envs:
            env.close()

    def _read_metas(self) -> list[EnvMeta]:
        self._envs, metas = self._build_envs(None)
        return metas

    def _build_envs(self, expected: list[EnvMeta] | None) -> tuple[list[EnvBase], list[EnvMeta]]:
        """Builds one sub-env per factory (checked against ``expected``, the specs of the first
        build, when given); closes them all on any failure."""
        envs: list[EnvBase] = []
        try:
            for creator in self._creators:
                envs.append(creator())
            metas = [EnvMeta.from_env(env) for env in envs]
            for i, (meta, before) in enumerate(zip(metas, expected or ())):
                diff = before.difference(meta)
                if diff is not None:
                    raise ValueError(
                        f"SerialEnv.start: sub-env {i} does not have the specs it had when the "
                        f"env was built (got {diff}). Every factory must build envs with the "
                        "same specs at every call."
                    )
        except BaseException:
            for env in envs:
                env.close()
            raise
        return envs, metas

    @property
    def envs(self) -> list[EnvBase]:
        """The sub-envs (row ``i`` of the batch is ``envs[i]``)."""
        return list(self._envs)

    def _ready_buffers(self) -> Buffers:
        if self._buffers is None:
            if self.is_closed:  # TorchRL restarts a closed batched env on use: new sub-envs
                self._envs, _ = self._build_envs(self._metas)
                self._closed = False
            self._buffers = self._make_buffers(self.device)
            self._runners = [
                EnvRunner(env, self._buffers.row(i)) for i, env in enumerate(self._envs)
            ]
            self._plan_inputs([runner.writer_reads for runner in self._runners])
        return self._buffers

    def _dispatch(self, cmd: str, args: tuple, workers: Sequence[int]) -> list[Any]:
        runners = self._runners
        return [getattr(runners[w], cmd)(*args) for w in workers]

    def _close(self) -> None:
        for env in self._envs:
            env.close()
        self._runners = []
        self._release_buffers()
