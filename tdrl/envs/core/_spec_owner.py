"""The spec half of EnvBase: the five full specs, their short accessors and the key lists."""

from __future__ import annotations

import torch
from tensordict.utils import NestedKey

from tdrl.envs.core._keys import DoneGroup, as_key
from tdrl.specs import Categorical, Composite, TensorSpec

__all__ = ["SpecOwner"]

_SPEC_KINDS = ("observation", "action", "reward", "done", "state")
_LEAF_NAME = {"action": "action", "reward": "reward", "done": "done", "observation": "observation"}


class SpecOwner:
    """Holds an env's specs and derives its key lists once, whenever a spec is set.

    Subclasses set specs in ``__init__`` (after ``super().__init__``) either as full composites
    (``self.full_action_spec = Composite(...)``) or through the short accessors, where a bare leaf
    goes under ``"action"``, ``"reward"``, ``"done"`` or ``"observation"``.
    """

    batch_size: torch.Size
    device: torch.device | None

    def _init_specs(self) -> None:
        self._specs: dict[str, Composite] = {
            kind: Composite(shape=self.batch_size, device=self.device) for kind in _SPEC_KINDS
        }
        # As in TorchRL, an env that sets no done spec has a root "done" and "terminated".
        leaf = Categorical(2, shape=(*self.batch_size, 1), dtype=torch.bool, device=self.device)
        self._specs["done"] = Composite(
            done=leaf, terminated=leaf.clone(), shape=self.batch_size, device=self.device
        )
        self._refresh_keys()

    # ---------------------------------------------------------------- full specs
    def _get_full(self, kind: str) -> Composite:
        return self._specs[kind]

    def _set_full(self, kind: str, spec: TensorSpec) -> None:
        if not isinstance(spec, Composite):
            if kind == "state":
                raise TypeError(
                    f"{type(self).__name__}.full_state_spec: expected a Composite "
                    f"(got {type(spec).__name__}). Wrap the leaf: Composite(key=spec, shape=...)."
                )
            spec = Composite({_LEAF_NAME[kind]: spec}, shape=self.batch_size, device=self.device)
        self._check_batch(kind, spec)
        if kind == "done":
            spec = self._complete_done_spec(spec)
        if self.device is not None and spec.device != self.device:
            spec = spec.to(self.device)
        self._specs[kind] = spec
        self._refresh_keys()

    def _check_batch(self, kind: str, spec: Composite) -> None:
        n = len(self.batch_size)
        if tuple(spec.shape[:n]) != tuple(self.batch_size):
            raise ValueError(
                f"{type(self).__name__}.full_{kind}_spec: the spec's batch shape does not start "
                f"with the env batch size (got {tuple(spec.shape)}; expected leading dims "
                f"{tuple(self.batch_size)}). Build the Composite with shape=env.batch_size."
            )

    def _complete_done_spec(self, spec: Composite) -> Composite:
        """Every done group holds ``done`` and ``terminated``: fill a missing one from the other."""
        spec = spec.clone()
        for group in DoneGroup.from_done_keys(spec.keys(True, True)):
            done = spec.get(group.done, None)
            term = spec.get(group.terminated, None)
            if done is None and term is not None:
                spec[group.done] = term.clone()
            elif term is None and done is not None:
                spec[group.terminated] = done.clone()
        return spec

    @property
    def full_observation_spec(self) -> Composite:
        """All observation entries (what ``reset`` and ``step`` return besides reward/done)."""
        return self._get_full("observation")

    @full_observation_spec.setter
    def full_observation_spec(self, spec: TensorSpec) -> None:
        self._set_full("observation", spec)

    @property
    def full_action_spec(self) -> Composite:
        """All action entries the env reads in ``step``."""
        return self._get_full("action")

    @full_action_spec.setter
    def full_action_spec(self, spec: TensorSpec) -> None:
        self._set_full("action", spec)

    @property
    def full_reward_spec(self) -> Composite:
        """All reward entries written under ``"next"``."""
        return self._get_full("reward")

    @full_reward_spec.setter
    def full_reward_spec(self, spec: TensorSpec) -> None:
        self._set_full("reward", spec)

    @property
    def full_done_spec(self) -> Composite:
        """All done leaves (``done``/``terminated``/``truncated`` per group)."""
        return self._get_full("done")

    @full_done_spec.setter
    def full_done_spec(self, spec: TensorSpec) -> None:
        self._set_full("done", spec)

    @property
    def full_state_spec(self) -> Composite:
        """Inputs besides actions that ``step`` reads (and ``reset`` may receive)."""
        return self._get_full("state")

    @full_state_spec.setter
    def full_state_spec(self, spec: TensorSpec) -> None:
        self._set_full("state", spec)

    # ---------------------------------------------------------------- short accessors
    def _short(self, kind: str) -> TensorSpec:
        full = self._specs[kind]
        leaves = list(full.keys(True, True))
        if len(leaves) == 1:
            return full[leaves[0]]
        return full

    @property
    def observation_spec(self) -> Composite:
        """The observation Composite (same as ``full_observation_spec``)."""
        return self._specs["observation"]

    @observation_spec.setter
    def observation_spec(self, spec: TensorSpec) -> None:
        self._set_full("observation", spec)

    @property
    def action_spec(self) -> TensorSpec:
        """The single action leaf, or the action Composite when there are several."""
        return self._short("action")

    @action_spec.setter
    def action_spec(self, spec: TensorSpec) -> None:
        self._set_full("action", spec)

    @property
    def reward_spec(self) -> TensorSpec:
        """The single reward leaf, or the reward Composite when there are several."""
        return self._short("reward")

    @reward_spec.setter
    def reward_spec(self, spec: TensorSpec) -> None:
        self._set_full("reward", spec)

    @property
    def done_spec(self) -> TensorSpec:
        """The single done leaf, or the done Composite when there are several (the usual case)."""
        return self._short("done")

    @done_spec.setter
    def done_spec(self, spec: TensorSpec) -> None:
        self._set_full("done", spec)

    @property
    def state_spec(self) -> Composite:
        """The state Composite (same as ``full_state_spec``)."""
        return self._specs["state"]

    @state_spec.setter
    def state_spec(self, spec: TensorSpec) -> None:
        self._set_full("state", spec)

    # ---------------------------------------------------------------- TorchRL views
    @property
    def input_spec(self) -> Composite:
        """What ``step`` reads: ``Composite(full_action_spec=..., full_state_spec=...)``.

        A read-only view in TorchRL's layout (set the specs through the ``full_*`` accessors).

        Examples:
            >>> from tdrl.testing import CountingEnv
            >>> sorted(CountingEnv().input_spec.keys())
            ['full_action_spec', 'full_state_spec']
        """
        return Composite(
            full_action_spec=self._specs["action"],
            full_state_spec=self._specs["state"],
            shape=self.batch_size,
            device=self.device,
        )

    @property
    def output_spec(self) -> Composite:
        """What ``step`` writes: observation, reward and done specs, in TorchRL's layout.

        Examples:
            >>> from tdrl.testing import CountingEnv
            >>> sorted(CountingEnv().output_spec.keys())
            ['full_done_spec', 'full_observation_spec', 'full_reward_spec']
        """
        return Composite(
            full_observation_spec=self._specs["observation"],
            full_reward_spec=self._specs["reward"],
            full_done_spec=self._specs["done"],
            shape=self.batch_size,
            device=self.device,
        )

    @property
    def specs(self) -> Composite:
        """Every spec in one Composite, TorchRL's layout: ``output_spec`` (observation, reward
        and done specs) and ``input_spec`` (action and state specs).

        Examples:
            >>> from tdrl.testing import CountingEnv
            >>> specs = CountingEnv().specs
            >>> sorted(specs.keys()), sorted(specs["input_spec"].keys())
            (['input_spec', 'output_spec'], ['full_action_spec', 'full_state_spec'])
            >>> specs["output_spec", "full_observation_spec", "observation"].shape
            torch.Size([1])
        """
        return Composite(
            output_spec=self.output_spec, input_spec=self.input_spec, shape=self.batch_size
        )

    def _unbatched(self, spec: TensorSpec) -> TensorSpec:
        n = len(self.batch_size)
        return spec[(0,) * n] if n else spec

    @property
    def action_spec_unbatched(self) -> TensorSpec:
        """``action_spec`` without the env's batch dims (the spec of one env of the batch).

        Examples:
            >>> from tdrl.testing import CountingEnv
            >>> CountingEnv(batch_size=(4,)).action_spec_unbatched.shape
            torch.Size([1])
        """
        return self._unbatched(self.action_spec)

    @property
    def full_action_spec_unbatched(self) -> Composite:
        """``full_action_spec`` without the env's batch dims."""
        return self._unbatched(self.full_action_spec)  # type: ignore[return-value]

    @property
    def observation_spec_unbatched(self) -> Composite:
        """``observation_spec`` without the env's batch dims."""
        return self._unbatched(self.observation_spec)  # type: ignore[return-value]

    @property
    def full_observation_spec_unbatched(self) -> Composite:
        """``full_observation_spec`` without the env's batch dims."""
        return self._unbatched(self.full_observation_spec)  # type: ignore[return-value]

    @property
    def reward_spec_unbatched(self) -> TensorSpec:
        """``reward_spec`` without the env's batch dims."""
        return self._unbatched(self.reward_spec)

    @property
    def full_reward_spec_unbatched(self) -> Composite:
        """``full_reward_spec`` without the env's batch dims."""
        return self._unbatched(self.full_reward_spec)  # type: ignore[return-value]

    @property
    def done_spec_unbatched(self) -> TensorSpec:
        """``done_spec`` without the env's batch dims."""
        return self._unbatched(self.done_spec)

    @property
    def full_done_spec_unbatched(self) -> Composite:
        """``full_done_spec`` without the env's batch dims."""
        return self._unbatched(self.full_done_spec)  # type: ignore[return-value]

    @property
    def state_spec_unbatched(self) -> Composite:
        """``state_spec`` without the env's batch dims."""
        return self._unbatched(self.state_spec)  # type: ignore[return-value]

    @property
    def full_state_spec_unbatched(self) -> Composite:
        """``full_state_spec`` without the env's batch dims."""
        return self._unbatched(self.full_state_spec)  # type: ignore[return-value]

    # ---------------------------------------------------------------- key lists
    def _refresh_keys(self) -> None:
        leaves = {k: [as_key(x) for x in s.keys(True, True)] for k, s in self._specs.items()}
        self.observation_keys: list[NestedKey] = leaves["observation"]
        self.action_keys: list[NestedKey] = leaves["action"]
        self.reward_keys: list[NestedKey] = leaves["reward"]
        self.done_keys: list[NestedKey] = leaves["done"]
        self.state_keys: list[NestedKey] = leaves["state"]
        self.done_groups: list[DoneGroup] = DoneGroup.from_done_keys(self.done_keys)
        self.reset_keys: list[NestedKey] = [g.reset for g in self.done_groups]
        self._on_specs_changed()

    def _on_specs_changed(self) -> None:
        """Hook: EnvBase rebuilds its cached plans here."""

    @property
    def action_key(self) -> NestedKey:
        """The action key when there is exactly one (raises otherwise)."""
        return self._single("action_keys")

    @property
    def reward_key(self) -> NestedKey:
        """The reward key when there is exactly one (raises otherwise)."""
        return self._single("reward_keys")

    @property
    def done_key(self) -> NestedKey:
        """The first ``done`` key (the root one when it exists)."""
        return self.done_groups[0].done

    def _single(self, attr: str) -> NestedKey:
        keys = getattr(self, attr)
        if len(keys) != 1:
            raise KeyError(
                f"{type(self).__name__}.{attr[:-1]}: the env has {len(keys)} such keys "
                f"(got {keys}; expected exactly one). Use env.{attr} instead."
            )
        return keys[0]

    def default_done_spec(self, shape: tuple[int, ...] | None = None) -> Composite:
        """A standard root done spec (``done``, ``terminated``, ``truncated``) for this batch.

        Examples:
            >>> from tdrl.testing import CountingEnv
            >>> sorted(CountingEnv().default_done_spec().keys())
            ['done', 'terminated', 'truncated']
        """
        shape = (*self.batch_size, 1) if shape is None else shape
        leaf = Categorical(2, shape=shape, dtype=torch.bool, device=self.device)
        return Composite(
            done=leaf,
            terminated=leaf.clone(),
            truncated=leaf.clone(),
            shape=self.batch_size,
            device=self.device,
        )
