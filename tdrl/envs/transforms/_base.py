"""Transform: the base class of every env transform, with its few documented hooks."""

from __future__ import annotations

import copy
import weakref
from typing import TYPE_CHECKING, Any

import torch
from tensordict import TensorDictBase
from tensordict.utils import NestedKey
from torch import nn

from tdrl.envs.core import EnvBase
from tdrl.envs.transforms._checks import apply_outside, check_keys_in_specs
from tdrl.envs.transforms._utils import KeyNotFoundError, KeysArg, group_mask, key_list, show_keys
from tdrl.specs import Composite, TensorSpec, Unbounded

if TYPE_CHECKING:
    from tdrl.envs.transforms._env import TransformedEnv

__all__ = ["Transform"]


class Transform(nn.Module):
    """Base class of env transforms: maps what an env produces and what it reads.

    A transform reads ``in_keys`` and writes ``out_keys`` (same length; ``out_keys`` defaults to
    ``in_keys``) on the data an env returns, and maps the actions the user writes under
    ``out_keys_inv`` to what the env below reads under ``in_keys_inv`` (``out_keys_inv``
    defaults to ``in_keys_inv``). Keys may be nested tuples everywhere.

    Hooks (override only what you need):

    - ``_apply_transform(value)``: the per-tensor map used for every ``in_key -> out_key`` pair.
    - ``_call(td)``: applies the map to one TensorDict: ``"next"`` after a step, the reset output,
      and, in :meth:`forward`, the tensordict given (keys as given). Missing keys raise a
      ``KeyError``.
    - ``_step(td, next_td)``: the step side inside an env; ``td`` is the root the user stepped
      (read-only) as the env's inverse maps left it (TorchRL: the actions the base env reads),
      ``next_td`` what the env below returned. Default: ``_call(next_td)``.
      Override it when the result depends on the root (counters, sums, carried states).
    - ``_reset(td_in, td_out)``: the reset side. ``td_in`` is the reset input (``None`` for a
      full reset), ``td_out`` the reset output of the env below. Its output is final: for every
      entry it writes, the rows (groups, agents) that do not reset must keep their value in
      ``td_in`` (see :meth:`_where_reset`), and internal state changes only where the group
      resets. Default: ``_apply_transform`` on every ``in_key`` the output holds (rewards do
      not exist after a reset) and the rows that do not reset are restored for its
      ``out_key``; a transform that overrides ``_call`` instead gets ``_call(td_out)`` when the
      output holds its ``in_keys``, then the same restoring for ``out_keys``.
      List every entry a transform writes in ``out_keys``: the TransformedEnv hands the base env
      the previous values of the other entries only.
    - ``_inv_apply_transform(value)`` / ``_inv_call(td)``: the action side, applied to a shallow
      copy of the root before the env below steps.
    - ``transform_observation_spec``, ``transform_reward_spec``, ``transform_done_spec``,
      ``transform_action_spec``, ``transform_state_spec``: the spec side. Each gets a Composite
      whose structure it may change (add, remove, replace entries) and returns it; leaves are
      shared with the env below, so replace a leaf instead of mutating it. By default the
      ``in_keys`` entries are mapped with :meth:`_transform_spec` (shape and dtype inferred by
      running ``_apply_transform`` on zeros) and the inverse keys with
      :meth:`_inv_transform_spec` (identity).

    When the transform is part of a :class:`TransformedEnv`, :attr:`parent` is the env up to
    (and excluding) this transform and :attr:`container` the TransformedEnv. Both are set when
    the transform is attached (TransformedEnv construction, ``append_transform``,
    ``insert_transform``) and cleared when it is removed; they are ``None`` otherwise.

    Args:
        in_keys: keys read by the forward map.
        out_keys: keys written by the forward map (default ``in_keys``).
        in_keys_inv: keys the env below reads (inner names of the inverse map).
        out_keys_inv: keys the user writes (outer names, default ``in_keys_inv``).

    Examples:
        >>> from tdrl.envs.transforms import TransformedEnv
        >>> from tdrl.testing import CountingEnv
        >>> class Double(Transform):
        ...     def _apply_transform(self, value):
        ...         return value * 2
        >>> env = TransformedEnv(CountingEnv(), Double(in_keys="observation", out_keys="twice"))
        >>> env.rollout(3)["next", "twice"].flatten().tolist()
        [2.0, 4.0, 6.0]
    """

    def __init__(
        self,
        in_keys: KeysArg = None,
        out_keys: KeysArg = None,
        in_keys_inv: KeysArg = None,
        out_keys_inv: KeysArg = None,
    ) -> None:
        super().__init__()
        self.in_keys = key_list(in_keys)
        self.out_keys = key_list(out_keys) if out_keys is not None else list(self.in_keys)
        self.in_keys_inv = key_list(in_keys_inv)
        self.out_keys_inv = (
            key_list(out_keys_inv) if out_keys_inv is not None else list(self.in_keys_inv)
        )
        # As in TorchRL, the lists may differ in length (``in_keys=[], out_keys=["bytes"]``
        # for a transform that writes its own entries); the hooks that pair them raise then.
        self._owner_ref: weakref.ReferenceType[Any] | None = None
        self._parent_ref: weakref.ReferenceType[Any] | None = None

    # ------------------------------------------------------------------ attachment
    @property
    def container(self) -> TransformedEnv | None:
        """The TransformedEnv this transform belongs to (``None`` when it is not attached)."""
        owner = self._owner_ref() if self._owner_ref is not None else None
        if owner is None or not owner._owns(self):
            return None
        return owner  # type: ignore[no-any-return]

    @property
    def parent(self) -> EnvBase | None:
        """The env up to this transform: the base env and the transforms placed before it.

        Set when the transform is attached to a TransformedEnv (and refreshed whenever the
        transform list changes); ``None`` for a detached transform. Use it for spec queries
        (``self.parent.full_done_spec``) and to run the env below (``init_stats``).
        """
        if self.container is None or self._parent_ref is None:
            return None
        return self._parent_ref()  # type: ignore[no-any-return]

    def _require_parent(self, method: str) -> EnvBase:
        parent = self.parent
        if parent is None:
            raise RuntimeError(
                f"{type(self).__name__}.{method}: the transform is not part of an env (got "
                "parent=None; expected a transform attached to a TransformedEnv). Wrap the env: "
                "TransformedEnv(env, transform)."
            )
        return parent

    def _attach(self, owner: Any, parent: Any) -> None:
        self._owner_ref = weakref.ref(owner)
        self._parent_ref = weakref.ref(parent) if parent is not None else None

    def _detach(self) -> None:
        self._owner_ref = None
        self._parent_ref = None

    def _bind(self, parent: EnvBase) -> None:
        """Hook: resolve keys that depend on the env (e.g. default reward keys) before specs."""

    def _wrap_env(self, env: EnvBase) -> TransformedEnv:
        """``TransformedEnv(env, self)``: what ``EnvBase.append_transform`` returns."""
        from tdrl.envs.transforms._env import TransformedEnv

        return TransformedEnv(env, self)

    def clone(self) -> Transform:
        """A detached shallow copy, as in TorchRL: it shares the tensors (buffers, parameters).

        The copy belongs to no env (``parent`` and ``container`` are ``None``), so it can be
        attached to another one; its own containers (key lists, per-key state) are copies, so
        attaching or running it does not change the original. Use ``copy.deepcopy`` for
        independent tensors.

        Examples:
            >>> import torch
            >>> from tdrl.envs.transforms import ObservationNorm, TransformedEnv
            >>> from tdrl.testing import CountingEnv
            >>> env = TransformedEnv(CountingEnv(), ObservationNorm(1.0, 2.0, out_keys="n"))
            >>> twin = env.transform.clone()
            >>> twin.container is None, twin.loc is env.transform.loc
            (True, True)
        """
        out = copy.copy(self)
        for name, value in self.__dict__.items():
            if isinstance(value, (dict, list, set)):
                out.__dict__[name] = copy.copy(value)
        out._detach()
        return out

    def __getstate__(self) -> dict[str, Any]:
        # Weak references do not pickle; a TransformedEnv re-attaches on unpickling.
        state = dict(super().__getstate__())
        state["_owner_ref"] = None
        state["_parent_ref"] = None
        return state

    # ------------------------------------------------------------------ data hooks
    def _apply_transform(self, value: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError(
            f"{type(self).__name__}._apply_transform is not implemented (got in_keys="
            f"{self.in_keys}). Override _apply_transform or _call."
        )

    def _inv_apply_transform(self, value: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError(
            f"{type(self).__name__}._inv_apply_transform is not implemented (got in_keys_inv="
            f"{self.in_keys_inv}). Override _inv_apply_transform or _inv_call."
        )

    def _call(self, tensordict: TensorDictBase) -> TensorDictBase:
        for in_key, out_key in zip(self.in_keys, self.out_keys):
            value = tensordict.get(in_key, None)
            if value is None:
                raise self._missing_key(in_key, tensordict, "_call")
            tensordict.set(out_key, self._apply_transform(value))
        return tensordict

    def _step(self, tensordict: TensorDictBase, next_tensordict: TensorDictBase) -> TensorDictBase:
        return self._call(next_tensordict)

    def _reset(
        self, tensordict_in: TensorDictBase | None, tensordict_out: TensorDictBase
    ) -> TensorDictBase:
        if not self._maps_tensors():
            if self._holds(tensordict_out, self.in_keys, "_reset"):
                tensordict_out = self._call(tensordict_out)
                self._keep_rows(tensordict_in, tensordict_out, self.out_keys)
            return tensordict_out
        for in_key, out_key in zip(self.in_keys, self.out_keys):
            value = tensordict_out.get(in_key, None)
            if value is not None:  # rewards do not exist after a reset
                new = self._apply_transform(value)
                tensordict_out.set(out_key, self._where_reset(tensordict_in, out_key, new))
        return tensordict_out

    def _maps_tensors(self) -> bool:
        """Whether the transform works key by key through ``_apply_transform``."""
        return type(self)._apply_transform is not Transform._apply_transform

    def _inv_call(self, tensordict: TensorDictBase) -> TensorDictBase:
        for in_key, out_key in zip(self.in_keys_inv, self.out_keys_inv):
            value = tensordict.get(out_key, None)
            if value is None:
                raise self._missing_key(out_key, tensordict, "_inv_call")
            tensordict.set(in_key, self._inv_apply_transform(value))
        return tensordict

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Applies the transform outside any env (a replay-buffer sample, data from disk).

        The keys are taken as given and looked up in ``tensordict`` itself (in place), as in
        TorchRL: ``"observation"`` is the root entry, ``("next", "observation")`` the one under
        ``"next"``; name both to map both. Every input is read before any output is written,
        so no entry is mapped twice. Transforms that override ``_call`` get
        ``_call(tensordict)`` once all their keys are present.

        Raises:
            KeyError: an ``in_key`` is missing (the message lists the available keys).

        Examples:
            >>> import torch
            >>> from tensordict import TensorDict
            >>> class Triple(Transform):
            ...     def _apply_transform(self, value):
            ...         return value * 3
            >>> td = TensorDict({"reward": torch.ones(2, 1), "next": {"reward": torch.ones(2, 1)}},
            ...     batch_size=[2])
            >>> out = Triple(in_keys=[("next", "reward")])(td)
            >>> out["next", "reward"].flatten().tolist(), out["reward"].flatten().tolist()
            ([3.0, 3.0], [1.0, 1.0])
        """
        return apply_outside(self, tensordict)

    def inv(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Applies the action-side map to a shallow copy of ``tensordict`` and returns it.

        Examples:
            >>> import torch
            >>> from tensordict import TensorDict
            >>> class ToDouble(Transform):
            ...     def _inv_apply_transform(self, value):
            ...         return value.double()
            >>> t = ToDouble(in_keys_inv="action")
            >>> t.inv(TensorDict(action=torch.zeros(2)))["action"].dtype
            torch.float64
        """
        if type(self)._inv_call is Transform._inv_call:
            self._paired("inv", inverse=True)
        return self._inv_call(tensordict.copy())

    # ------------------------------------------------------------------ spec hooks
    def transform_observation_spec(self, observation_spec: Composite) -> Composite:
        """Maps the observation spec the way ``_call`` maps the data (see class docstring)."""
        return self._map_spec(observation_spec)

    def transform_reward_spec(self, reward_spec: Composite) -> Composite:
        """Maps the reward spec the way ``_call`` maps the data."""
        return self._map_spec(reward_spec)

    def transform_done_spec(self, done_spec: Composite) -> Composite:
        """Maps the done spec the way ``_call`` maps the data."""
        return self._map_spec(done_spec)

    def transform_action_spec(self, action_spec: Composite) -> Composite:
        """Maps the action spec of the env below (inner keys) to what the user writes."""
        return self._map_spec_inv(action_spec)

    def transform_state_spec(self, state_spec: Composite) -> Composite:
        """Maps the state spec of the env below (inner keys) to what the user writes."""
        return self._map_spec_inv(state_spec)

    def transform_output_spec(self, output_spec: Composite) -> Composite:
        """Maps an env's output spec: a Composite holding ``full_observation_spec``,
        ``full_reward_spec`` and ``full_done_spec`` (each optional here), as TorchRL.

        ``TransformedEnv`` builds its specs through this hook and :meth:`transform_input_spec`;
        the defaults call the per-kind hooks on a copy, so a transform usually overrides those
        (``transform_observation_spec``, ...) and only overrides this one to see every output
        spec at once.

        Examples:
            >>> from tdrl.specs import Composite, Unbounded
            >>> out = Composite(full_observation_spec=Composite(observation=Unbounded(3)))
            >>> t = Transform(in_keys="observation", out_keys="copy")
            >>> sorted(t.transform_output_spec(out)["full_observation_spec"].keys())
            ['copy', 'observation']
        """
        return self._map_spec_group(output_spec, ("observation", "reward", "done"))

    def transform_input_spec(self, input_spec: Composite) -> Composite:
        """Maps an env's input spec: a Composite holding ``full_action_spec`` and
        ``full_state_spec`` (each optional here), as TorchRL (see
        :meth:`transform_output_spec`).

        Examples:
            >>> from tdrl.specs import Composite, Unbounded
            >>> inp = Composite(full_action_spec=Composite(force=Unbounded(1)),
            ...                 full_state_spec=Composite())
            >>> t = Transform(in_keys_inv="force", out_keys_inv="push")
            >>> list(t.transform_input_spec(inp)["full_action_spec"].keys())
            ['push']
        """
        return self._map_spec_group(input_spec, ("state", "action"))

    def _map_spec_group(self, group: Composite, kinds: tuple[str, ...]) -> Composite:
        group = group.exclude()  # a new tree sharing the leaves: the caller's stays as it was
        for kind in kinds:
            key = f"full_{kind}_spec"
            if key in group.keys():
                group[key] = getattr(self, f"transform_{kind}_spec")(group[key].exclude())
        return group

    def _transform_spec(self, spec: TensorSpec) -> TensorSpec:
        """The spec of ``_apply_transform(x)`` for ``x`` in ``spec``.

        Inferred from one call on zeros: an Unbounded leaf of the result's shape and dtype (the
        input leaf itself when it is Unbounded and nothing changed). Override it when the map
        has side effects or when the domain is known (bounds, categories). A transform without
        ``_apply_transform`` (it overrides ``_call``) keeps the spec: the first reset and step
        check its data against it.
        """
        if type(self)._apply_transform is Transform._apply_transform:
            return spec
        out = self._apply_transform(spec.zero())
        if isinstance(spec, Unbounded) and out.shape == spec.shape and out.dtype == spec.dtype:
            return spec
        return Unbounded(shape=out.shape, dtype=out.dtype, device=spec.device)

    def _inv_transform_spec(self, spec: TensorSpec) -> TensorSpec:
        """The outer spec of an inverse key given the inner one (identity by default)."""
        return spec

    def _paired(self, method: str, inverse: bool = False) -> list[tuple[Any, Any]]:
        """The ``(in_key, out_key)`` pairs (``_inv`` ones with ``inverse``); raises when the
        lists differ in length, which only a transform writing its own hooks may have."""
        a, b = (self.in_keys_inv, self.out_keys_inv) if inverse else (self.in_keys, self.out_keys)
        if len(a) != len(b):
            what = "in_keys_inv/out_keys_inv" if inverse else "in_keys/out_keys"
            raise ValueError(
                f"{type(self).__name__}.{method}: {what} differ in length (got {a} and {b}; "
                "expected one output key per input key, which this method pairs). Pass as many "
                "keys on both sides, or override the hooks that read and write them."
            )
        return list(zip(a, b))

    def _map_spec(self, spec: Composite) -> Composite:
        if len(self.in_keys) != len(self.out_keys):
            return spec  # unpaired keys: the transform writes its own hooks (TorchRL: identity)
        for in_key, out_key in zip(self.in_keys, self.out_keys):
            leaf = spec.get(in_key, None)
            if leaf is not None:
                spec[out_key] = self._transform_spec(leaf)
        return spec

    def _map_spec_inv(self, spec: Composite) -> Composite:
        if len(self.in_keys_inv) != len(self.out_keys_inv):
            return spec
        for in_key, out_key in zip(self.in_keys_inv, self.out_keys_inv):
            leaf = spec.get(in_key, None)
            if leaf is not None:
                if out_key != in_key:
                    del spec[in_key]
                spec[out_key] = self._inv_transform_spec(leaf)
        return spec

    # ------------------------------------------------------------------ checks and errors
    def _check_keys(self, parent: EnvBase) -> None:
        """Raises a ``KeyError`` when a key the transform reads is in none of the env's specs,
        and a ``ValueError`` when the default hooks would pair key lists of unequal lengths."""
        check_keys_in_specs(self, parent)
        cls = type(self)
        if self.in_keys and (cls._call is Transform._call or self._maps_tensors()):
            self._paired("_call")
        if self.in_keys_inv and cls._inv_call is Transform._inv_call:
            self._paired("_inv_call", inverse=True)

    def _holds(self, tensordict: TensorDictBase, keys: list[NestedKey], method: str) -> bool:
        """True when ``tensordict`` holds every key, False when it holds none, else raises."""
        present = [tensordict.get(k, None) is not None for k in keys]
        if all(present) and keys:
            return True
        if not any(present):
            return False
        missing = keys[present.index(False)]
        raise self._missing_key(missing, tensordict, method)

    def _env_only(self, method: str) -> RuntimeError:
        name = type(self).__name__
        return RuntimeError(
            f"{name}.{method}: this transform only works inside an env, it needs the env's "
            f"resets and steps (got a call outside a TransformedEnv; expected env.reset/env.step)."
            f" Wrap the env: TransformedEnv(env, {name}(...))."
        )

    def _missing_key(self, key: NestedKey, tensordict: TensorDictBase, method: str) -> KeyError:
        shown = tensordict.exclude("next") if method == "_step" else tensordict
        return KeyNotFoundError(
            f"{type(self).__name__}.{method}: key {key!r} is missing from the data "
            f"(available keys: {show_keys(shown)}). Check the transform's keys against "
            "what the env (or the data) holds."
        )

    # ------------------------------------------------------------------ reset helpers
    def _reset_mask(
        self,
        tensordict_in: TensorDictBase | None,
        key: NestedKey,
        like: torch.Tensor,
        *,
        reset_key: NestedKey | None = None,
    ) -> torch.Tensor | None:
        """Where the done group owning ``key`` resets, shaped to broadcast against ``like``.

        ``None`` means every entry resets (a full reset). The owning group is the deepest done
        group whose prefix contains ``key`` (the root group otherwise); ``reset_key`` names a
        group's ``_reset`` key explicitly.
        """
        if tensordict_in is None:
            return None
        owner = self._owner_ref() if self._owner_ref is not None else None
        if owner is not None:  # the owner computes each mask once per reset
            return owner._group_mask(tensordict_in, key, like, reset_key)  # type: ignore[no-any-return]
        return group_mask(self._require_parent("_reset"), tensordict_in, key, like, reset_key)

    def _keep_rows(
        self,
        tensordict_in: TensorDictBase | None,
        tensordict_out: TensorDictBase,
        keys: list[NestedKey],
    ) -> None:
        """Restores, for ``keys``, the values of ``tensordict_in`` where nothing resets."""
        if tensordict_in is None:
            return
        for key in keys:
            value = tensordict_out.get(key, None)
            if isinstance(value, torch.Tensor):
                tensordict_out.set(key, self._where_reset(tensordict_in, key, value))

    def _where_reset(
        self,
        tensordict_in: TensorDictBase | None,
        key: NestedKey,
        new: torch.Tensor,
        *,
        reset_key: NestedKey | None = None,
    ) -> torch.Tensor:
        """``new`` where the group of ``key`` resets, the value in ``tensordict_in`` elsewhere."""
        mask = self._reset_mask(tensordict_in, key, new, reset_key=reset_key)
        if mask is None or tensordict_in is None:
            return new
        old = tensordict_in.get(key, None)
        if old is None or old.shape != new.shape:
            return new
        if old.device != new.device:
            old = old.to(new.device)
        return torch.where(mask, new, old)

    def extra_repr(self) -> str:
        parts = []
        for name in ("in_keys", "out_keys", "in_keys_inv", "out_keys_inv"):
            keys = getattr(self, name)
            if keys and not (name.startswith("out") and keys == getattr(self, "in" + name[3:])):
                parts.append(f"{name}={keys}")
        return ", ".join(parts)
