"""The data and locking methods of ``Composite`` (a mixin, to keep ``_composite.py`` small)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase

from tdrl.specs._base import TensorSpec

__all__ = ["CompositeOps"]


class CompositeOps:
    """Encoding, numpy conversion, dtype checks, emptiness and locking of a Composite.

    The host class provides ``_specs`` (``str -> TensorSpec``), ``_locked``, ``shape``,
    ``device`` and ``_missing``.
    """

    _specs: dict[str, TensorSpec]
    _locked: bool
    shape: torch.Size
    device: torch.device | None

    def _missing(self, path: tuple[str, ...], where: str) -> KeyError:
        raise NotImplementedError

    # ------------------------------------------------------------------ data
    def encode(self, val: Mapping[str, Any], *, ignore_device: bool = False) -> TensorDict:
        """A TensorDict from a (nested) dict of numpy arrays, scalars, lists or tensors.

        Args:
            val: one value per key (a subset of the spec keys is fine).
            ignore_device: if True, no value is moved to a spec device and the TensorDict
                has no device, so the caller can move it at once.

        Raises:
            KeyError: a key of ``val`` is not in the spec.

        Examples:
            >>> import numpy as np
            >>> from tdrl.specs import Composite, Unbounded
            >>> Composite(a=Unbounded(shape=(2,))).encode({"a": np.ones(2)})["a"].dtype
            torch.float32
        """
        data = {}
        for k, v in val.items():
            if k not in self._specs:
                raise self._missing((k,), "Composite.encode")
            data[k] = self._specs[k].encode(v, ignore_device=ignore_device)
        device = None if ignore_device else self.device
        return TensorDict(data, batch_size=self.shape, device=device)

    def to_numpy(self, val: TensorDictBase, safe: bool | None = None) -> dict[str, Any]:
        """A (nested) dict of numpy arrays from a TensorDict of this spec.

        Args:
            val: the TensorDict; only the keys of the spec are converted.
            safe: if True, every entry is checked against its spec first (``None``: False).

        Examples:
            >>> from tdrl.specs import Composite, Unbounded
            >>> spec = Composite(a=Unbounded(shape=(2,)), b={"c": Unbounded()})
            >>> out = spec.to_numpy(spec.zero())
            >>> out["a"].tolist(), sorted(out["b"])
            ([0.0, 0.0], ['c'])
        """
        out: dict[str, Any] = {}
        for k, v in val.items():
            if k not in self._specs:
                raise self._missing((k,), "Composite.to_numpy")
            out[k] = self._specs[k].to_numpy(v, safe)
        return out

    def type_check(
        self, value: torch.Tensor | TensorDictBase, selected_keys: str | Sequence[str] | None = None
    ) -> None:
        """Raises ``TypeError`` if an entry of ``value`` does not have its spec dtype.

        Args:
            value: a TensorDict, or a tensor when ``selected_keys`` names one key.
            selected_keys: the top-level keys to check (``None``: all).

        Examples:
            >>> from tdrl.specs import Composite, Unbounded
            >>> spec = Composite(a=Unbounded(), b=Unbounded(dtype=torch.int64))
            >>> spec.type_check(torch.zeros(1), "a")
            >>> spec.type_check(spec.zero().float())
            Traceback (most recent call last):
            ...
            TypeError: Unbounded.type_check: value for key 'b' has the wrong dtype ...
        """
        if isinstance(value, torch.Tensor) and isinstance(selected_keys, str):
            self._specs[selected_keys].type_check(value, selected_keys)
            return
        if not isinstance(value, TensorDictBase):
            raise TypeError(
                f"Composite.type_check: value is not a TensorDict (got {type(value).__name__};"
                " expected a TensorDict, or a tensor with selected_keys naming one key). Pass"
                " a TensorDict."
            )
        keys = [selected_keys] if isinstance(selected_keys, str) else selected_keys
        for k, spec in self._specs.items():
            if keys is None or k in keys:
                if isinstance(spec, CompositeOps):
                    spec.type_check(value.get(k))
                else:
                    spec.type_check(value.get(k), k)

    def is_empty(self, recurse: bool = False) -> bool:
        """Whether the composite has no entry (``recurse``: no leaf, at any depth).

        Examples:
            >>> from tdrl.specs import Composite
            >>> spec = Composite(a=Composite())
            >>> spec.is_empty(), spec.is_empty(recurse=True)
            (False, True)
        """
        if not recurse:
            return not self._specs
        return all(isinstance(v, CompositeOps) and v.is_empty(True) for v in self._specs.values())

    # ------------------------------------------------------------------ locking
    @property
    def is_locked(self) -> bool:
        """Whether setting or deleting entries is refused."""
        return self._locked

    def lock_(self, recurse: bool | None = None) -> Any:
        """Refuses further set/delete on this composite (and, with ``recurse``, nested ones).

        Args:
            recurse: also lock nested composites (``None``: True, as TorchRL).

        Examples:
            >>> from tdrl.specs import Composite, Unbounded
            >>> spec = Composite().lock_()
            >>> spec["a"] = Unbounded()
            Traceback (most recent call last):
            ...
            RuntimeError: Composite.set: cannot set key 'a' on a locked Composite ...
        """
        return self._set_lock(True, recurse is None or recurse)

    def unlock_(self, recurse: bool | None = None) -> Any:
        """Allows set/delete again (with ``recurse``, in nested composites too).

        Args:
            recurse: also unlock nested composites (``None``: True, as TorchRL).

        Examples:
            >>> from tdrl.specs import Composite
            >>> Composite().lock_().unlock_().is_locked
            False
        """
        return self._set_lock(False, recurse is None or recurse)

    def _set_lock(self, value: bool, recurse: bool) -> Any:
        self._locked = value
        if recurse:
            for v in self._specs.values():
                if isinstance(v, CompositeOps):
                    v._set_lock(value, True)
        return self
