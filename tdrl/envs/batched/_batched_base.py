"""BatchedEnvBase: what SerialEnv and ParallelEnv share (specs, buffers, reset routing)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase

from tdrl.envs.batched._metas import batched_specs
from tdrl.envs.batched._runner import Buffers
from tdrl.envs.batched._shared import TreeBuffer
from tdrl.envs.core import EnvBase, EnvCreator, EnvMeta
from tdrl.envs.core._fast import lookup, put, set_next
from tdrl.envs.core._keys import broadcast_mask

__all__ = ["BatchedEnvBase", "EnvFactory", "check_torchrl_options"]

EnvFactory = Callable[..., EnvBase]

# TorchRL batched-env options tdrl cannot honour: name -> (accepted values, why).
_REFUSED: dict[str, tuple[tuple[Any, ...], str]] = {
    "pin_memory": ((False,), "outputs are fresh tensors; call .pin_memory() on them"),
    "share_individual_td": ((None, False), "the batch is always one TensorDict, not a lazy stack"),
    "shared_memory": ((True,), "workers always exchange data through shared memory"),
    "memmap": ((False,), "outputs are fresh in-memory tensors"),
    "policy_proof": ((None,), "entries the specs do not declare stay in the parent"),
    "allow_step_when_done": ((False,), "done sub-envs are reset through partial resets"),
    "non_blocking": ((False,), "device moves are synchronous"),
    "use_buffers": ((None, True), "preallocated buffers are always used"),
    "metadata_from_workers": ((False,), "specs are read in the parent (EnvCreator caches them)"),
    "daemon": ((False,), "workers are non-daemonic and exit with the parent (watchdog)"),
}


def check_torchrl_options(owner: str, options: Mapping[str, Any]) -> None:
    """Raises ``ValueError`` for a TorchRL batched-env option set to a value tdrl cannot honour."""
    for name, value in options.items():
        accepted, why = _REFUSED[name]
        if not any(value is a or (type(value) is type(a) and value == a) for a in accepted):
            raise ValueError(
                f"{owner}.__init__: {name}={value!r} is not supported (got {value!r}; expected "
                f"{' or '.join(map(repr, accepted))}): {why}. Drop the argument."
            )


def _as_creators(
    owner: str,
    num_workers: int,
    create_env_fn: EnvFactory | Sequence[EnvFactory],
    create_env_kwargs: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None,
) -> list[EnvCreator]:
    if isinstance(num_workers, bool) or not isinstance(num_workers, int) or num_workers < 1:
        raise ValueError(
            f"{owner}.__init__: num_workers must be a positive int (got {num_workers!r}; "
            "expected >= 1)."
        )
    fns = list(create_env_fn) if isinstance(create_env_fn, (list, tuple)) else None
    if fns is not None and len(fns) != num_workers:
        raise ValueError(
            f"{owner}.__init__: one factory per worker is needed (got {len(fns)} factories; "
            f"expected num_workers={num_workers}). Pass a single callable or {num_workers}."
        )
    if fns is None:
        fns = [create_env_fn] * num_workers  # type: ignore[list-item]
    if create_env_kwargs is None or isinstance(create_env_kwargs, Mapping):
        kwargs = [dict(create_env_kwargs or {})] * num_workers
    else:
        kwargs = [dict(k) for k in create_env_kwargs]
        if len(kwargs) != num_workers:
            raise ValueError(
                f"{owner}.__init__: create_env_kwargs has {len(kwargs)} entries "
                f"(expected num_workers={num_workers}). Pass one dict, or one per worker."
            )
    out = []
    made: dict[tuple[int, int], EnvCreator] = {}  # one creator (and one meta cache) per pair
    for fn, kw in zip(fns, kwargs):
        if not callable(fn):
            raise TypeError(
                f"{owner}.__init__: create_env_fn must be callable (got {type(fn).__name__}; "
                "expected an env class, a function or an EnvCreator returning an EnvBase)."
            )
        creator = made.get((id(fn), id(kw)))
        if creator is None:
            creator = fn if isinstance(fn, EnvCreator) and not kw else EnvCreator(fn, kw)
            made[(id(fn), id(kw))] = creator
        out.append(creator)
    return out


class _MaskFlags:
    """Whether any sub-env's action spec holds a mask: the bytes of the shared flags compared
    with zeros through a memoryview (~1 us where ``tensor.any()`` costs several inside a step
    loop). Copies and pickles start unbound (a view must not outlive the buffers it reads)."""

    __slots__ = ("_view", "_zeros", "bufs")

    def __init__(self) -> None:
        self.bufs: Buffers | None = None
        self._view: Any = None
        self._zeros = b""

    def __reduce__(self) -> tuple[type, tuple]:
        return (_MaskFlags, ())

    def bind(self, bufs: Buffers) -> None:
        flags = bufs.mask_active
        self.bufs, self._view = bufs, flags
        if flags.device.type == "cpu" and flags.is_contiguous():
            self._view, self._zeros = flags.numpy().data.cast("B"), bytes(flags.numel())

    def any(self) -> bool:
        view = self._view
        if type(view) is memoryview:
            return view != self._zeros
        return bool(view.any())


class BatchedEnvBase(EnvBase):
    """Base of batched envs: ``num_workers`` copies of a sub-env behind one ``EnvBase``.

    The batch size is ``[num_workers, *sub_env.batch_size]`` and the specs are the sub-env specs
    expanded to it. Every call copies the spec'd root entries of the input (actions, observations,
    states, done leaves) into a preallocated input buffer; the sub-envs write their results into
    preallocated output buffers; the caller receives fresh tensors (copies), which it may keep
    across steps. Entries that no spec declares stay in the parent: they are not sent to the
    sub-envs (``step_mdp`` still carries them to the next root). A partial reset only reaches the
    workers whose ``_reset`` entries hold a true value.

    Sub-envs whose specs differ in their values only (bounds set by per-worker arguments) give
    stacked batched specs (row ``i``: sub-env ``i``'s), as in TorchRL.

    Subclasses provide ``_read_metas`` and ``_dispatch``.
    """

    def __init__(
        self,
        num_workers: int,
        create_env_fn: EnvFactory | Sequence[EnvFactory],
        create_env_kwargs: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None = None,
        *,
        device: torch.device | str | None = None,
    ) -> None:
        name = type(self).__name__
        self._creators = _as_creators(name, num_workers, create_env_fn, create_env_kwargs)
        self.num_workers = num_workers
        metas = self._read_metas()
        meta = self.sub_meta = metas[0]
        self._metas = metas
        try:
            specs = batched_specs(name, metas, torch.Size((num_workers, *meta.batch_size)))
        except ValueError:
            self._close_sub_envs()
            raise
        if device is not None and torch.device(device) != (meta.device or torch.device("cpu")):
            self._close_sub_envs()
            raise ValueError(
                f"{name}.__init__: device differs from the sub-envs' device (got {device!r}; "
                f"expected None or {meta.device or 'cpu'}). Build the sub-envs on that device."
            )
        super().__init__(
            batch_size=(num_workers, *meta.batch_size),
            device=meta.device,
            allow_done_after_reset=meta.allow_done_after_reset,
            validate=meta.validate,
        )
        self.full_observation_spec = specs["observation"]
        self.full_action_spec = specs["action"]
        self.full_reward_spec = specs["reward"]
        self.full_done_spec = specs["done"]
        self.full_state_spec = specs["state"]
        self._buffers: Buffers | None = None
        self._masks_published = False
        self._all_workers = tuple(range(num_workers))
        # the input leaves every step reads (None: all of them), see ``_plan_inputs``
        self._input_plan: tuple[int, ...] | None = None
        self._mask_flags = _MaskFlags()
        self._merge_masks: dict[tuple[bool, ...], list[torch.Tensor]] = {}

    # ------------------------------------------------------------------ subclass hooks
    def _read_metas(self) -> list[EnvMeta]:
        """Hook: the metadata of every sub-env (worker order)."""
        raise NotImplementedError

    def _close_sub_envs(self) -> None:
        """Hook: closes sub-envs built by ``_read_metas`` when the constructor fails after it."""

    def _dispatch(self, cmd: str, args: tuple, workers: Sequence[int]) -> list[Any]:
        """Runs ``EnvRunner.<cmd>(*args)`` on each of ``workers``; returns their results."""
        raise NotImplementedError

    def _ready_buffers(self) -> Buffers:
        """The buffers, allocated (and the workers started) on first use."""
        raise NotImplementedError

    def _make_buffers(self, device: torch.device | None) -> Buffers:
        name = type(self).__name__
        fake = self.fake_tensordict()
        if device is not None:
            fake = fake.to(device)
        nxt = fake.get("next").clone()
        inputs = fake.exclude("next").clone()
        if self.state_keys:  # a policy may write the next state (e.g. a recurrent state)
            inputs.set("next", nxt.select(*self.state_keys).clone())
        root = inputs.exclude(*self.action_keys, "next").clone()
        done = self.full_done_spec
        reset_masks = [
            torch.zeros(done[g.done].shape, dtype=torch.bool, device=device)
            for g in self.done_groups
        ]
        actions = self.full_action_spec
        # discrete specs (Categorical, OneHot, MultiCategorical, MultiOneHot) can carry a mask
        mask_keys = [k for k in self.action_keys if hasattr(actions[k], "update_mask")]
        action_masks = [
            torch.ones(actions[k]._mask_shape(), dtype=torch.bool, device=device) for k in mask_keys
        ]
        active = torch.zeros(self.num_workers, len(mask_keys), dtype=torch.bool, device=device)
        return Buffers(
            TreeBuffer(inputs, f"{name}.step"),
            TreeBuffer(nxt, f"{name}.step"),
            TreeBuffer(root, f"{name}.reset"),
            reset_masks,
            mask_keys,
            action_masks,
            active,
        )

    def _plan_inputs(self, reads: Sequence[frozenset[int] | None]) -> None:
        """Records which input leaves the steps read, from every sub-env's
        ``EnvRunner.writer_reads``: when each sub-env writes its own rows, a step copies only
        the leaves they read (the actions, say) into the input buffer, not every spec'd entry."""
        if any(r is None for r in reads):
            self._input_plan = None
        else:
            self._input_plan = tuple(sorted(set().union(*reads)))  # type: ignore[arg-type]

    def _write_step_inputs(self, bufs: Buffers, tensordict: TensorDictBase) -> tuple[int, ...]:
        """Copies what the sub-envs' steps read into the input buffer; returns the missing
        leaves. When one the steps read is missing, every leaf is copied (the sub-envs go the
        general way, which reads them all, and raise its error if it needs the missing one).
        Leaves no step reads are neither copied nor checked (TorchRL's batched envs copy only
        the env's input keys too)."""
        plan = self._input_plan
        if plan is not None:
            missing = bufs.inputs.write(tensordict, plan)
            if not missing:
                return missing
        return bufs.inputs.write(tensordict)

    def _any_mask_active(self, bufs: Buffers) -> bool:
        flags = self._mask_flags
        if flags.bufs is not bufs:
            flags.bind(bufs)
        return flags.any()

    def _release_buffers(self) -> None:
        """Drops every reference to the buffers (closing: shared memory is freed with them)."""
        self._buffers = None
        self._mask_flags = _MaskFlags()
        self._merge_masks.clear()

    def _publish_action_masks(self, bufs: Buffers) -> None:
        """Mirrors the sub-envs' action masks (e.g. from ActionMask) into the batched spec."""
        if not bufs.mask_keys:
            return  # no discrete actions
        if not self._masks_published and not self._any_mask_active(bufs):
            return  # the usual case: discrete actions without masks
        active = bufs.mask_active.any(0).tolist()
        spec = self.full_action_spec
        for key, on, mask in zip(bufs.mask_keys, active, bufs.action_masks):
            leaf = spec[key]
            if on:
                leaf.update_mask(mask)
            elif leaf.mask is not None:
                leaf.update_mask(None)
        self._masks_published = any(active)

    # ------------------------------------------------------------------ EnvBase hooks
    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        bufs = self._ready_buffers()
        missing = self._write_step_inputs(bufs, tensordict)
        self._dispatch("step", (missing,), self._all_workers)
        self._publish_action_masks(bufs)
        return self._output(bufs.next)

    def _output(self, buf: TreeBuffer) -> TensorDictBase:
        """Fresh tensors for the caller (subclasses may move them to the env device)."""
        return buf.clone()

    def _reset(self, tensordict: TensorDictBase | None) -> TensorDictBase:
        bufs = self._ready_buffers()
        if tensordict is None:
            self._dispatch("reset", (None, ()), self._all_workers)
            self._publish_action_masks(bufs)
            return self._output(bufs.root)
        masks = self._reset_plan.masks(tensordict)
        if masks is None:
            # A full reset with inputs (e.g. parameters): every worker resets every group and
            # receives its row of the spec'd entries, as a sub-env given tensordict[i].
            masks = [torch.ones_like(m) for m in bufs.reset_masks]
        groups: list[int] = []
        todo = torch.zeros(self.num_workers, dtype=torch.bool)
        for g, mask in enumerate(masks):
            if mask is None:
                continue
            dst = bufs.reset_masks[g]
            if mask.numel() == dst.numel():
                dst.copy_(mask.reshape(dst.shape))
            else:
                m = broadcast_mask(mask, len(self.batch_size), dst.ndim)
                dst.copy_(m.expand(dst.shape))
            groups.append(g)
            todo |= dst.reshape(self.num_workers, -1).any(1).cpu()
        workers = todo.nonzero().flatten().tolist()
        if workers:
            missing = bufs.inputs.write(tensordict)
            self._dispatch("reset", (tuple(groups), missing), workers)
            self._publish_action_masks(bufs)
        return self._output(bufs.root)

    def _set_seed(self, seed: int | None) -> None:
        self.set_seed(seed)

    # ------------------------------------------------------------------ public API
    def set_seed(self, seed: int | None = None, static_seed: bool = False) -> int | None:
        """Seeds the workers with a chain of seeds; returns the next seed of the chain.

        Worker 0 gets ``seed``, worker ``i + 1`` the seed that worker ``i``'s env returned from
        ``set_seed`` (``EnvBase.set_seed``: a hash of its seed), so every worker gets a distinct,
        reproducible seed even when the sub-env's ``_set_seed`` returns nothing or its input.
        With ``static_seed=True`` every worker gets ``seed``; ``None`` seeds every worker from
        fresh entropy.

        Examples:
            >>> from tdrl.testing import CountingEnv
            >>> from tdrl.envs.batched import SerialEnv
            >>> env = SerialEnv(3, CountingEnv)
            >>> last = env.set_seed(10)
            >>> seeds = [e.seed for e in env.envs]
            >>> seeds[0], len(set(seeds)), last == CountingEnv().set_seed(seeds[-1])
            (10, 3, True)
        """
        self._ready_buffers()
        for w in self._all_workers:
            seed = self._dispatch("set_seed", (seed, static_seed), (w,))[0]
        return seed

    def state_dict(self) -> dict[str, dict[str, Any]]:
        """The sub-envs' state dicts (e.g. their transforms' statistics), keyed ``"worker<i>"``.

        TorchRL's layout: ``{"worker0": sub_env_0.state_dict(), ...}``; a sub-env without
        state (no ``state_dict``) gives ``{}``. The tensors are copies.

        Examples:
            >>> from tdrl.testing import CountingEnv
            >>> from tdrl.envs.batched import SerialEnv
            >>> SerialEnv(2, CountingEnv).state_dict()
            {'worker0': {}, 'worker1': {}}
        """
        self._ready_buffers()
        states = self._dispatch("state_dict", (), self._all_workers)
        return {f"worker{i}": state for i, state in enumerate(states)}

    def load_state_dict(self, state_dict: Mapping[str, Any], strict: bool = True) -> None:
        """Loads per-worker state dicts (``state_dict()``'s layout) into the sub-envs.

        As in TorchRL, a dict without a ``"worker0"`` entry is one sub-env's state, loaded into
        every sub-env.

        Raises:
            KeyError: a ``"worker<i>"`` entry is missing.

        Examples:
            >>> from tdrl.testing import CountingEnv
            >>> from tdrl.envs.batched import SerialEnv
            >>> env = SerialEnv(2, CountingEnv)
            >>> env.load_state_dict(env.state_dict())
        """
        name = type(self).__name__
        if not isinstance(state_dict, Mapping):
            raise TypeError(
                f"{name}.load_state_dict: expected a mapping (got {type(state_dict).__name__}). "
                "Pass what state_dict() returned."
            )
        per_worker = "worker0" in state_dict
        for i in self._all_workers:
            if per_worker and f"worker{i}" not in state_dict:
                raise KeyError(
                    f"{name}.load_state_dict: no entry for worker {i} (got keys "
                    f"{sorted(state_dict)}; expected 'worker0'...'worker{self.num_workers - 1}'). "
                    "Pass what state_dict() returned, or one sub-env's state for all."
                )
        self._ready_buffers()
        for i in self._all_workers:
            state = state_dict[f"worker{i}"] if per_worker else state_dict
            self._dispatch("load_state_dict", (dict(state), strict), (i,))

    def step_and_maybe_reset(
        self, tensordict: TensorDictBase
    ) -> tuple[TensorDictBase, TensorDictBase]:
        """Steps and partially resets the finished sub-envs in one call per worker.

        Same result as ``EnvBase.step_and_maybe_reset`` (the ``"next"`` entry keeps the terminal
        observation, the returned root holds the reset values), with a single round trip.

        Examples:
            >>> from tdrl.testing import CountingEnv
            >>> from tdrl.envs.batched import SerialEnv
            >>> env = SerialEnv(2, CountingEnv, {"max_steps": 1})
            >>> td, root = env.step_and_maybe_reset(env.rand_action(env.reset()))
            >>> td["next", "observation"].flatten().tolist(), root["observation"].flatten().tolist()
            ([1.0, 1.0], [0.0, 0.0])
        """
        self._check_actions(tensordict)
        bufs = self._ready_buffers()
        missing = self._write_step_inputs(bufs, tensordict)
        flags = self._dispatch("step_and_maybe_reset", (missing,), self._all_workers)
        self._publish_action_masks(bufs)
        set_next(tensordict, self._output(bufs.next), type(tensordict) is TensorDict)
        root = self._step_mdp_keep(tensordict)  # keeps the actions, as EnvBase's
        if any(flags):
            self._merge_reset_rows(root, bufs, flags)
        return tensordict, root

    def _merge_reset_rows(self, root: TensorDictBase, bufs: Buffers, flags: list[Any]) -> None:
        """The root rows of the workers that reset come from the root buffer; the others left
        it alone (their root is their next row, already in ``root``). Fresh tensors."""
        masks = self._reset_row_masks(bufs, flags)
        for key, path, leaf, mask in zip(bufs.root.keys, bufs.root._paths, bufs.root.leaves, masks):
            current = lookup(root, path)
            if current is None:
                current = self._output_leaf(bufs.next.leaf(key))
            put(root, path, torch.where(mask, self._output_leaf(leaf), current))

    def _reset_row_masks(self, bufs: Buffers, flags: list[Any]) -> list[torch.Tensor]:
        """Per root leaf, the per-worker reset flags shaped to broadcast over it (on the device
        of the outputs), cached per combination of flags."""
        key = tuple(bool(f) for f in flags)
        masks = self._merge_masks.get(key)
        if masks is None:
            if len(self._merge_masks) >= 256:  # many workers: keep the cache bounded
                self._merge_masks.clear()
            reset = torch.tensor(key, device=self.device)
            masks = [reset.reshape(-1, *([1] * (leaf.ndim - 1))) for leaf in bufs.root.leaves]
            self._merge_masks[key] = masks
        return masks

    def _output_leaf(self, leaf: torch.Tensor) -> torch.Tensor:
        """A buffer leaf as the caller sees it (moved to the env device when it differs)."""
        return leaf if self.device is None or leaf.device == self.device else leaf.to(self.device)

    @property
    def create_env_fns(self) -> list[EnvCreator]:
        """The per-worker factories (``EnvCreator`` instances)."""
        return list(self._creators)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(num_workers={self.num_workers}, "
            f"env={self.sub_meta.env_name}, batch_size={tuple(self.batch_size)}, "
            f"device={self.device})"
        )
