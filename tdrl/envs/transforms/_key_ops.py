"""Key bookkeeping: CatTensors, RenameTransform, ExcludeTransform and SelectTransform."""

from __future__ import annotations

import torch
from tensordict import TensorDictBase
from tensordict.utils import NestedKey, unravel_key

from tdrl.envs.core import EnvBase
from tdrl.envs.transforms._base import Transform
from tdrl.envs.transforms._utils import KeysArg, key_list, show_keys
from tdrl.specs import Bounded, Composite, Unbounded

__all__ = ["CatTensors", "ExcludeTransform", "RenameTransform", "SelectTransform"]


def _sort_key(key: NestedKey) -> str:
    return key if isinstance(key, str) else "_-|-_".join(key)


def _protected(parent: EnvBase) -> set[NestedKey]:
    """Entries no key transform may drop or rename: done leaves, rewards, actions and states."""
    return {*parent.done_keys, *parent.reward_keys, *parent.action_keys, *parent.state_keys}


class CatTensors(Transform):
    """Concatenates ``in_keys`` along ``dim`` into ``out_key`` (and drops them by default).

    Args:
        in_keys: the entries to concatenate (same dtype).
        out_key: the result.
        dim: a negative dim (counted from the end, so it never touches batch dims).
        del_keys: remove the inputs.
        unsqueeze_if_oor: TorchRL's unsqueezing of entries with too few dims; only ``False``
            is supported.
        sort: concatenate in sorted key order (TorchRL's default; nested keys sort by their
            parts joined), ``False`` for the order given.

    Examples:
        >>> from tdrl.envs.transforms import DoubleToFloat, TransformedEnv
        >>> from tdrl.testing import TransformTestEnv
        >>> env = TransformedEnv(TransformTestEnv((2,)), DoubleToFloat())
        >>> env = env.append_transform(CatTensors(["observation", "obs64"], "features"))
        >>> env.full_observation_spec["features"].shape, "obs64" in env.observation_keys
        (torch.Size([2, 5]), False)
        >>> CatTensors(["b", "a"]).in_keys, CatTensors(["b", "a"], sort=False).in_keys
        (['a', 'b'], ['b', 'a'])
    """

    def __init__(
        self,
        in_keys: KeysArg = None,
        out_key: NestedKey = "observation_vector",
        dim: int = -1,
        *,
        del_keys: bool = True,
        unsqueeze_if_oor: bool = False,
        sort: bool = True,
    ) -> None:
        if in_keys is None or unsqueeze_if_oor:
            raise ValueError(
                f"CatTensors.__init__: tdrl needs explicit in_keys and unsqueeze_if_oor=False "
                f"(got in_keys={in_keys}, unsqueeze_if_oor={unsqueeze_if_oor}). Name the "
                "entries to concatenate, with matching dims."
            )
        keys = key_list(in_keys)
        super().__init__(in_keys=sorted(keys, key=_sort_key) if sort else keys)
        if dim >= 0 or not self.in_keys:
            raise ValueError(
                f"CatTensors.__init__: need keys and a negative dim (got in_keys={self.in_keys}, "
                f"dim={dim}; expected dim < 0). Count dims from the end."
            )
        self.out_keys = [unravel_key(out_key)]
        self.dim = dim
        self.del_keys = del_keys

    def _call(self, tensordict: TensorDictBase) -> TensorDictBase:
        values = []
        for key in self.in_keys:
            value = tensordict.get(key, None)
            if value is None:
                raise self._missing_key(key, tensordict, "_call")
            values.append(value)
        tensordict.set(self.out_keys[0], torch.cat(values, self.dim))
        if self.del_keys:
            for key in self.in_keys:
                if key != self.out_keys[0]:
                    del tensordict[key]
        return tensordict

    def transform_observation_spec(self, observation_spec: Composite) -> Composite:
        leaves = [observation_spec.get(k, None) for k in self.in_keys]
        if any(leaf is None for leaf in leaves):
            return observation_spec
        dtypes = {leaf.dtype for leaf in leaves}
        if len(dtypes) > 1:
            raise TypeError(
                f"CatTensors.transform_observation_spec: the entries have different dtypes (got "
                f"{dict(zip(map(str, self.in_keys), map(str, (x.dtype for x in leaves))))}; "
                "expected one dtype). Cast them first (DTypeCastTransform)."
            )
        shape = torch.cat([torch.empty(leaf.shape, device="meta") for leaf in leaves], self.dim)
        dtype, device = leaves[0].dtype, leaves[0].device
        if all(isinstance(leaf, Bounded) for leaf in leaves):
            low = torch.cat([leaf.low for leaf in leaves], self.dim)
            high = torch.cat([leaf.high for leaf in leaves], self.dim)
            out: Bounded | Unbounded = Bounded(
                low, high, shape=shape.shape, device=device, dtype=dtype
            )
        else:
            out = Unbounded(shape.shape, device, dtype=dtype)
        if self.del_keys:
            for key in self.in_keys:
                del observation_spec[key]
        observation_spec[self.out_keys[0]] = out
        return observation_spec

    def extra_repr(self) -> str:
        return f"in_keys={self.in_keys}, out_key={self.out_keys[0]!r}, dim={self.dim}"


class RenameTransform(Transform):
    """Renames entries (observations, rewards) and, backwards, inputs (actions).

    ``in_keys[i]`` becomes ``out_keys[i]`` in the data and the specs (``create_copy`` keeps
    the original too). For inputs, the user writes ``out_keys_inv[i]`` and the env below reads
    ``in_keys_inv[i]``. Done leaves cannot be renamed (they define the done groups).

    Args:
        in_keys: entries to rename.
        out_keys: their new names.
        in_keys_inv: input names the env below reads.
        out_keys_inv: the names the user writes.
        create_copy: keep the original entries as well.

    Examples:
        >>> from tdrl.envs.transforms import TransformedEnv
        >>> from tdrl.testing import CountingEnv
        >>> env = TransformedEnv(CountingEnv(), RenameTransform(["reward"], ["r"],
        ...     in_keys_inv=["action"], out_keys_inv=["act"]))
        >>> env.reward_keys, env.action_keys
        (['r'], ['act'])
    """

    def __init__(
        self,
        in_keys: KeysArg,
        out_keys: KeysArg,
        in_keys_inv: KeysArg = None,
        out_keys_inv: KeysArg = None,
        create_copy: bool = False,
    ) -> None:
        super().__init__(in_keys, out_keys, in_keys_inv, out_keys_inv)
        self._paired("__init__")  # one new name per key
        self._paired("__init__", inverse=True)
        overlap = [k for k in self.out_keys if k in self.in_keys]
        if overlap:
            raise ValueError(
                f"RenameTransform.__init__: a key is both renamed and a new name (got {overlap} "
                f"in in_keys={self.in_keys} and out_keys={self.out_keys}; expected disjoint "
                "keys). Use two RenameTransforms."
            )
        self.create_copy = create_copy

    def _bind(self, parent: EnvBase) -> None:
        for key in self.in_keys:
            if key in parent.done_keys:
                raise ValueError(
                    f"RenameTransform: {key!r} is a done leaf (got in_keys={self.in_keys}; expected "
                    "observations or rewards). Done leaves define the done groups; keep them."
                )

    def _rename(self, tensordict: TensorDictBase, pairs: list, method: str) -> TensorDictBase:
        for src, dst in pairs:
            value = tensordict.get(src, None)
            if value is None:
                raise self._missing_key(src, tensordict, method)
            tensordict.set(dst, value)
            if not self.create_copy or method == "_inv_call":
                del tensordict[src]
        return tensordict

    def _call(self, tensordict: TensorDictBase) -> TensorDictBase:
        return self._rename(tensordict, list(zip(self.in_keys, self.out_keys)), "_call")

    def _inv_call(self, tensordict: TensorDictBase) -> TensorDictBase:
        pairs = list(zip(self.out_keys_inv, self.in_keys_inv))
        return self._rename(tensordict, pairs, "_inv_call")

    def _present(self, tensordict: TensorDictBase) -> list:
        return [(a, b) for a, b in zip(self.in_keys, self.out_keys) if a in tensordict.keys(True)]

    def _reset(
        self, tensordict_in: TensorDictBase | None, tensordict_out: TensorDictBase
    ) -> TensorDictBase:
        pairs = self._present(tensordict_out)
        self._rename(tensordict_out, pairs, "_reset")
        self._keep_rows(tensordict_in, tensordict_out, [b for _, b in pairs])
        return tensordict_out

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Renames the ``in_keys`` as given (``("next", k)`` names an entry of ``"next"``)."""
        return self._rename(tensordict, list(zip(self.in_keys, self.out_keys)), "forward")

    def _transform_spec_renames(self, spec: Composite) -> Composite:
        for src, dst in zip(self.in_keys, self.out_keys):
            leaf = spec.get(src, None)
            if leaf is not None:
                if not self.create_copy:
                    del spec[src]
                spec[dst] = leaf
        return spec

    def transform_observation_spec(self, observation_spec: Composite) -> Composite:
        return self._transform_spec_renames(observation_spec)

    def transform_reward_spec(self, reward_spec: Composite) -> Composite:
        return self._transform_spec_renames(reward_spec)


class ExcludeTransform(Transform):
    """Removes observation, reward and ``truncated`` entries from the data and the specs.

    As in TorchRL, any output of the env may go except what defines it: each done group's
    ``done`` and ``terminated`` leaves, actions and state entries are refused (the env and the
    transforms need them), as is a key the env does not have. Outside an env
    (:meth:`forward`) the keys are dropped as given from the tensordict (``("next", k)`` names
    an entry of ``"next"``); absent keys are ignored.

    Args:
        *excluded_keys: the entries to remove.
        inverse: TorchRL's exclusion from the env's input instead; only ``False`` is
            supported.

    Examples:
        >>> from tdrl.envs.transforms import TransformedEnv
        >>> from tdrl.testing import TransformTestEnv
        >>> env = TransformedEnv(TransformTestEnv(), ExcludeTransform("pixels", "obs64"))
        >>> sorted(env.reset().keys())
        ['action_mask', 'done', 'observation', 'terminated', 'truncated']
    """

    def __init__(self, *excluded_keys: NestedKey, inverse: bool = False) -> None:
        super().__init__(in_keys=list(excluded_keys))
        self.out_keys = []
        _refuse(type(self).__name__, "inverse", inverse, False)

    @property
    def excluded_keys(self) -> list[NestedKey]:
        """The entries removed."""
        return list(self.in_keys)

    def _drop(self) -> list[NestedKey]:
        return list(self.in_keys)

    def _bind(self, parent: EnvBase) -> None:
        groups = parent.done_groups
        required = {*(g.done for g in groups), *(g.terminated for g in groups)}
        protected = required | {*parent.action_keys, *parent.state_keys}
        outputs = {*parent.observation_keys, *parent.reward_keys, *parent.done_keys}
        for key in self._drop():
            if key in protected:
                raise ValueError(
                    f"{type(self).__name__}: {key!r} is a done/terminated, action or state "
                    f"entry (got it among the keys to drop; expected observations, rewards or "
                    f"truncated leaves: {show_keys(sorted(outputs - protected, key=str))}). "
                    "Keep it."
                )

    def _call(self, tensordict: TensorDictBase) -> TensorDictBase:
        return tensordict.exclude(*self._drop())

    def transform_reward_spec(self, reward_spec: Composite) -> Composite:
        return reward_spec.exclude(*self._drop())

    def transform_done_spec(self, done_spec: Composite) -> Composite:
        return done_spec.exclude(*self._drop())

    def _reset(
        self, tensordict_in: TensorDictBase | None, tensordict_out: TensorDictBase
    ) -> TensorDictBase:
        return self._call(tensordict_out)

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Drops the keys as given (``("next", k)`` names an entry of ``"next"``)."""
        return tensordict.exclude(*self.in_keys)

    def transform_observation_spec(self, observation_spec: Composite) -> Composite:
        return observation_spec.exclude(*self._drop())

    def extra_repr(self) -> str:
        return f"keys={self.in_keys}"


class SelectTransform(ExcludeTransform):
    """Keeps only the given observation entries (plus done, reward, action and state entries).

    Outside an env (:meth:`forward`) the tensordict keeps the given keys and its
    ``"reward"``/``"done"`` entries (the env's reward, done and state keys once attached).

    Args:
        *selected_keys: the observations to keep.
        keep_rewards: TorchRL's option to drop the rewards too; only ``True`` is supported.
        keep_dones: TorchRL's option to drop the done leaves too; only ``True`` is supported.

    Examples:
        >>> from tdrl.envs.transforms import TransformedEnv
        >>> from tdrl.testing import TransformTestEnv
        >>> env = TransformedEnv(TransformTestEnv(), SelectTransform("observation"))
        >>> env.observation_keys
        ['observation']
    """

    def __init__(
        self, *selected_keys: NestedKey, keep_rewards: bool = True, keep_dones: bool = True
    ) -> None:
        super().__init__(*selected_keys)
        _refuse("SelectTransform", "keep_rewards", keep_rewards, True)
        _refuse("SelectTransform", "keep_dones", keep_dones, True)
        self._dropped: list[NestedKey] | None = None
        self._kept: list[NestedKey] = ["reward", "done"]

    @property
    def selected_keys(self) -> list[NestedKey]:
        """The observations kept."""
        return list(self.in_keys)

    def _bind(self, parent: EnvBase) -> None:
        protected = _protected(parent)
        keep = set(key_list(list(self.in_keys))) | protected
        self._dropped = [k for k in parent.observation_keys if k not in keep]
        self._kept = [k for k in protected if k not in parent.action_keys]

    def _drop(self) -> list[NestedKey]:
        if self._dropped is None:
            raise RuntimeError(
                "SelectTransform._drop: the observation keys are unknown (got a transform "
                "never attached to an env; expected one that was). Attach it to an env first."
            )
        return self._dropped

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Keeps the selected keys and the reward/done (and state) entries, as given."""
        return tensordict.select(*self.in_keys, *self._kept, strict=False)


def _refuse(name: str, arg: str, value: bool, supported: bool) -> None:
    if value != supported:
        raise ValueError(
            f"{name}.__init__: {arg}={value} is not supported by tdrl (got {value}; expected "
            f"{supported}). Done leaves and rewards define the env; drop other entries only."
        )
