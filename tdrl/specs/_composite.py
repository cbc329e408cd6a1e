"""Composite: a nested mapping of specs that describes a TensorDict."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase

from tdrl.errors import SpecError
from tdrl.specs._base import TensorSpec
from tdrl.specs._composite_ops import CompositeOps
from tdrl.specs._non_tensor import NonTensor
from tdrl.specs._utils import (
    DeviceLike,
    ShapeLike,
    as_device,
    expand_ellipsis,
    index_shape,
    norm_dim,
    shape_from_args,
)

__all__ = ["Composite"]

NestedKey = str | tuple[str, ...]
_MISSING = object()


def is_key(idx: Any) -> bool:
    """Whether ``idx`` names an entry (a str or a non-empty tuple of str) rather than an index."""
    if isinstance(idx, str):
        return True
    return isinstance(idx, tuple) and len(idx) > 0 and all(isinstance(k, str) for k in idx)


def _path(key: Any, where: str) -> tuple[str, ...]:
    if not is_key(key):
        raise TypeError(
            f"{where}: invalid key (got {key!r}; expected a str or a tuple of str)."
            " Use string keys."
        )
    return (key,) if isinstance(key, str) else tuple(key)


def _getter(td: TensorDictBase) -> Any:
    """A ``get(key, default)`` over the top-level entries of ``td``.

    For a plain TensorDict one ``dict(td.items())`` (about 0.5 us) beats one ``td.get`` per key
    (about 1 us each); other TensorDict types keep their own ``get``.
    """
    if type(td) is TensorDict:
        return dict(td.items()).get
    return td.get


def _not_composite(cls: type) -> bool:
    return not issubclass(cls, Composite)


def _show(path: tuple[str, ...]) -> NestedKey:
    return path[0] if len(path) == 1 else path


class Composite(CompositeOps, TensorSpec):
    """A nested mapping ``str -> TensorSpec`` describing a TensorDict.

    ``shape`` is the batch shape: every entry's shape starts with it. Nested keys are tuples
    (``spec["agents", "obs"]``), as in TensorDict. ``rand``/``zero``/``one`` build a
    ``TensorDict`` of batch size ``(*shape, *self.shape)``.

    Args:
        spec_dict: initial entries (plain dicts become nested Composites).
        shape: the batch shape (``None``: ``()``).
        device: if given, entries are moved to it; ``None`` allows mixed devices.
        data_cls: only None. step_mdp_static: only False. names: only None (TorchRL options
            tdrl does not support; other values raise ``ValueError``).
        **kwargs: more entries; ``batch_size`` is TorchRL's alias of ``shape`` (not an entry).

    Examples:
        >>> from tdrl.specs import Bounded, Categorical
        >>> spec = Composite(
        ...     action=Bounded(-1.0, 1.0, shape=(4, 2)),
        ...     agents={"obs": Categorical(3, shape=(4,))},
        ...     shape=(4,),
        ... )
        >>> spec.keys(include_nested=True, leaves_only=True)
        ['action', ('agents', 'obs')]
        >>> spec.rand()["agents", "obs"].shape
        torch.Size([4])
    """

    _specs: dict[str, TensorSpec]

    def __init__(
        self,
        spec_dict: Mapping[str, Any] | None = None,
        *,
        shape: ShapeLike | None = None,
        device: DeviceLike = None,
        data_cls: type | None = None,
        step_mdp_static: bool = False,
        names: Sequence[str] | None = None,
        **kwargs: Any,
    ) -> None:
        for name, value, default in (
            ("data_cls", data_cls, None),
            ("step_mdp_static", step_mdp_static, False),
            ("names", names, None),
        ):
            if value is not default:
                raise ValueError(
                    f"Composite.__init__: {name}={value!r} is not supported (got {value!r}; "
                    f"expected {default!r}): tdrl composites build plain TensorDicts. Drop it."
                )
        # TorchRL's alias of shape (as TensorDict's batch_size); an entry cannot be named so
        batch_size = kwargs.pop("batch_size", None)
        if batch_size is not None:
            if shape is not None:
                raise TypeError(
                    f"Composite.__init__: both shape and batch_size were given (got shape="
                    f"{shape!r}, batch_size={batch_size!r}; expected one). Pass only shape."
                )
            shape = batch_size
        super().__init__(() if shape is None else shape, as_device(device), None)
        self._specs = {}
        self._locked = False
        for k, v in {**(spec_dict or {}), **kwargs}.items():
            self.set(k, v)

    # ------------------------------------------------------------------ entries
    def _node(self, path: tuple[str, ...], where: str) -> Composite:
        """The Composite holding ``path[-1]``, or ``KeyError``."""
        node: Composite = self
        for k in path[:-1]:
            child = node._specs.get(k)
            if not isinstance(child, Composite):
                raise self._missing(path, where)
            node = child
        return node

    def _missing(self, path: tuple[str, ...], where: str) -> KeyError:
        available = self.keys(include_nested=True, leaves_only=True)
        return KeyError(
            f"{where}: key {_show(path)!r} not found (available keys: {available})."
            " Check the key or add the entry."
        )

    def set(self, name: NestedKey, spec: TensorSpec | Mapping[str, Any]) -> Composite:
        """Sets an entry; a nested key creates the missing intermediate Composites.

        Raises:
            RuntimeError: the composite is locked.
            ValueError: the spec shape does not start with the composite shape.

        Examples:
            >>> from tdrl.specs import Unbounded
            >>> spec = Composite(shape=(2,))
            >>> _ = spec.set(("a", "b"), Unbounded(shape=(2, 3)))
            >>> spec["a"].shape
            torch.Size([2])
        """
        path = _path(name, "Composite.set")
        node: Composite = self
        for k in path[:-1]:
            child = node._specs.get(k)
            if child is None:
                child = Composite(shape=node.shape, device=node.device)
                node._set_one(k, child, path)
            elif not isinstance(child, Composite):
                raise KeyError(
                    f"Composite.set: key {k!r} of {_show(path)!r} holds a leaf (got"
                    f" {type(child).__name__}; expected a Composite). Delete it first."
                )
            node = child
        node._set_one(path[-1], spec, path)
        return self

    def _set_one(self, k: str, spec: Any, path: tuple[str, ...]) -> None:
        if self._locked:
            raise RuntimeError(
                f"Composite.set: cannot set key {_show(path)!r} on a locked Composite (got"
                " is_locked=True; expected an unlocked spec). Call unlock_() first."
            )
        if isinstance(spec, Mapping):
            spec = Composite(spec, shape=self.shape, device=self.device)
        if not isinstance(spec, TensorSpec):
            raise TypeError(
                f"Composite.set: value for key {_show(path)!r} is not a spec (got"
                f" {type(spec).__name__}; expected a TensorSpec). Wrap it in a spec."
            )
        if spec.shape[: self.ndim] != self.shape:
            raise ValueError(
                f"Composite.set: shape of key {_show(path)!r} does not start with the composite"
                f" shape (got {tuple(spec.shape)}; expected ({', '.join(map(str, self.shape))},"
                " ...)). Expand the entry to the batch shape."
            )
        if self.device is not None and spec.device != self.device:
            spec = spec.to(self.device)
        self._specs[k] = spec

    def __setitem__(self, key: NestedKey, spec: TensorSpec | Mapping[str, Any]) -> None:
        self.set(key, spec)

    def __getitem__(self, idx: Any) -> Any:
        """An entry (str / tuple-of-str key) or the composite indexed on its batch dims.

        Examples:
            >>> from tdrl.specs import Unbounded
            >>> spec = Composite(obs=Unbounded(shape=(4, 3)), shape=(4,))
            >>> spec["obs"].shape, spec[0]["obs"].shape
            (torch.Size([4, 3]), torch.Size([3]))
        """
        if not is_key(idx):
            return self._index(idx)
        path = _path(idx, "Composite.__getitem__")
        node: TensorSpec = self
        for i, k in enumerate(path):
            if not isinstance(node, Composite):
                if hasattr(node, "keys"):  # a StackedComposite resolves the rest of the key
                    return node[path[i:]]
                raise self._missing(path, "Composite.__getitem__")
            if k not in node._specs:
                raise self._missing(path, "Composite.__getitem__")
            node = node._specs[k]
        return node

    def get(self, key: NestedKey, default: Any = _MISSING) -> Any:
        """The entry at ``key``, or ``default`` when absent (KeyError without default).

        Examples:
            >>> Composite().get("x", None) is None
            True
        """
        try:
            return self[key]
        except KeyError:
            if default is _MISSING:
                raise
            return default

    def __contains__(self, key: object) -> bool:
        if not is_key(key):
            return False
        try:
            self[key]
        except KeyError:
            return False
        return True

    def __delitem__(self, key: NestedKey) -> None:
        path = _path(key, "Composite.__delitem__")
        node = self._node(path, "Composite.__delitem__")
        if path[-1] not in node._specs:
            raise self._missing(path, "Composite.__delitem__")
        if node._locked:
            raise RuntimeError(
                f"Composite.__delitem__: cannot delete key {_show(path)!r} on a locked Composite"
                " (got is_locked=True; expected an unlocked spec). Call unlock_() first."
            )
        del node._specs[path[-1]]

    def pop(self, key: NestedKey, default: Any = _MISSING) -> Any:
        """Removes and returns the entry at ``key`` (``default`` if absent and given).

        Examples:
            >>> from tdrl.specs import Unbounded
            >>> spec = Composite(a=Unbounded())
            >>> _ = spec.pop("a"); len(spec)
            0
        """
        if key not in self:
            if default is _MISSING:
                raise self._missing(_path(key, "Composite.pop"), "Composite.pop")
            return default
        out = self[key]
        del self[key]
        return out

    def __len__(self) -> int:
        return len(self._specs)

    def __iter__(self) -> Iterator[str]:
        return iter(self._specs)

    def keys(
        self,
        include_nested: bool = False,
        leaves_only: bool = False,
        *,
        is_leaf: Callable[[type], bool] | None = None,
        step_mdp_static_only: bool = False,
    ) -> list[NestedKey]:
        """Entry keys; nested ones as tuples when ``include_nested`` (like TensorDict).

        Args:
            include_nested: also list the keys inside nested Composites.
            leaves_only: list only the entries ``is_leaf`` accepts.
            is_leaf: reads a spec class, says whether it counts as a leaf (default: every
                class but Composite). Nested Composites are walked either way.
            step_mdp_static_only: TorchRL's filter for ``step_mdp_static`` composites; tdrl
                composites never are (``step_mdp_static=True`` is refused), so it changes
                nothing, as in TorchRL for such composites.

        Examples:
            >>> from tdrl.specs import Unbounded
            >>> spec = Composite(a=Unbounded(), b={"c": Unbounded()})
            >>> spec.keys(), spec.keys(True), spec.keys(True, True)
            (['a', 'b'], ['a', 'b', ('b', 'c')], ['a', ('b', 'c')])
            >>> spec.keys(leaves_only=True, is_leaf=lambda cls: True)
            ['a', 'b']
        """
        return [k for k, _ in self.items(include_nested, leaves_only, is_leaf=is_leaf)]

    def items(
        self,
        include_nested: bool = False,
        leaves_only: bool = False,
        *,
        is_leaf: Callable[[type], bool] | None = None,
        step_mdp_static_only: bool = False,
    ) -> list[tuple[NestedKey, TensorSpec]]:
        """``(key, spec)`` pairs with the same arguments as :meth:`keys`.

        Examples:
            >>> from tdrl.specs import Unbounded
            >>> [k for k, _ in Composite(a={"b": Unbounded()}).items(True, True)]
            [('a', 'b')]
        """
        leaf = _not_composite if is_leaf is None else is_leaf
        out: list[tuple[NestedKey, TensorSpec]] = []
        for k, v in self._specs.items():
            if not leaves_only or leaf(type(v)):
                out.append((k, v))
            if include_nested and isinstance(v, Composite):
                for sub, spec in v.items(True, leaves_only, is_leaf=leaf):
                    out.append(((k, *_path(sub, "")), spec))
        return out

    def values(
        self,
        include_nested: bool = False,
        leaves_only: bool = False,
        *,
        is_leaf: Callable[[type], bool] | None = None,
        step_mdp_static_only: bool = False,
    ) -> list[TensorSpec]:
        """Entry specs with the same arguments as :meth:`keys`.

        Examples:
            >>> from tdrl.specs import Unbounded
            >>> len(Composite(a=Unbounded(), b=Unbounded()).values())
            2
        """
        return [v for _, v in self.items(include_nested, leaves_only, is_leaf=is_leaf)]

    def update(self, dict_or_spec: Composite | Mapping[str, Any]) -> Composite:
        """Sets every entry of ``other``; nested Composites are merged recursively.

        Examples:
            >>> from tdrl.specs import Unbounded
            >>> spec = Composite(a={"b": Unbounded()})
            >>> spec.update({"a": {"c": Unbounded()}}).keys(True, True)
            [('a', 'b'), ('a', 'c')]
        """
        for k, v in dict_or_spec.items():
            if isinstance(v, Mapping):
                v = Composite(v, shape=self.shape, device=self.device)
            mine = self._specs.get(k) if isinstance(k, str) else None
            if isinstance(v, Composite) and isinstance(mine, Composite):
                mine.update(v)
            else:
                self.set(k, v)
        return self

    def empty(self) -> Composite:
        """A Composite with the same shape and device and no entries.

        Examples:
            >>> Composite(shape=(3,)).empty().shape
            torch.Size([3])
        """
        return Composite(shape=self.shape, device=self.device)

    def _tree(self) -> Composite:
        """A copy of the nested structure that shares the leaf specs."""
        out = self.empty()
        for k, v in self._specs.items():
            out._specs[k] = v._tree() if isinstance(v, Composite) else v
        return out

    def select(self, *keys: NestedKey) -> Composite:
        """A new Composite with only ``keys`` (leaf specs are shared, not copied).

        Examples:
            >>> from tdrl.specs import Unbounded
            >>> spec = Composite(a=Unbounded(), b={"c": Unbounded(), "d": Unbounded()})
            >>> spec.select("a", ("b", "c")).keys(True, True)
            ['a', ('b', 'c')]
        """
        out = self.empty()
        for key in keys:
            path = _path(key, "Composite.select")
            value = self[path]
            src, dst = self, out
            for k in path[:-1]:
                src = src._specs[k]  # type: ignore[assignment]
                if k not in dst._specs:
                    dst._specs[k] = src.empty()
                dst = dst._specs[k]  # type: ignore[assignment]
            dst._specs[path[-1]] = value._tree() if isinstance(value, Composite) else value
        return out

    def exclude(self, *keys: NestedKey) -> Composite:
        """A new Composite without ``keys`` (absent keys are ignored; leaves are shared).

        Examples:
            >>> from tdrl.specs import Unbounded
            >>> Composite(a=Unbounded(), b=Unbounded()).exclude("a").keys()
            ['b']
        """
        out = self._tree()
        for key in keys:
            if key in out:
                del out[key]
        return out

    # ------------------------------------------------------------------ values
    def _build(self, method: str, shape: ShapeLike | None) -> TensorDict:
        data = {k: getattr(v, method)(shape) for k, v in self._specs.items()}
        return TensorDict(data, batch_size=self._full_shape(shape), device=self.device)

    def rand(self, shape: ShapeLike | None = None) -> TensorDict:
        """A TensorDict of random values, batch size ``(*shape, *self.shape)``.

        Examples:
            >>> from tdrl.specs import Categorical
            >>> Composite(a=Categorical(3, shape=(2,)), shape=(2,)).rand((5,)).batch_size
            torch.Size([5, 2])
        """
        return self._build("rand", shape)

    def zero(self, shape: ShapeLike | None = None) -> TensorDict:
        """A TensorDict of zeros (see :meth:`TensorSpec.zero`).

        Examples:
            >>> from tdrl.specs import Unbounded
            >>> Composite(a=Unbounded(shape=(2,))).zero()["a"].tolist()
            [0.0, 0.0]
        """
        return self._build("zero", shape)

    def one(self, shape: ShapeLike | None = None) -> TensorDict:
        """A TensorDict of ones (see :meth:`TensorSpec.one`).

        Examples:
            >>> from tdrl.specs import Unbounded
            >>> Composite(a=Unbounded(shape=(2,))).one()["a"].tolist()
            [1.0, 1.0]
        """
        return self._build("one", shape)

    def is_in(self, val: Any) -> bool:
        """Whether every entry of the spec is in ``val`` and inside its spec (extra keys ignored).

        Examples:
            >>> from tdrl.specs import Bounded
            >>> spec = Composite(a=Bounded(0.0, 1.0))
            >>> spec.is_in(spec.rand()), spec.is_in(TensorDict(a=torch.tensor(2.0)))
            (True, False)
        """
        if not isinstance(val, TensorDictBase):
            return False
        get = _getter(val)
        for k, spec in self._specs.items():
            value = get(k, None)
            if value is None or not spec.is_in(value):
                return False
        return True

    def _walk_check(self, td: Any, key: Any, method: str) -> None:
        prefix = () if key is None else _path(key, f"Composite.{method}")
        if not isinstance(td, TensorDictBase):
            raise SpecError(
                f"Composite.{method}: value{'' if key is None else f' for key {key!r}'} is not a"
                f" TensorDict (got {type(td).__name__}; expected a TensorDict). Pass a TensorDict."
            )
        get = _getter(td)
        for k, spec in self._specs.items():
            path = (*prefix, k)
            value = get(k, None)
            if value is None:
                raise SpecError(
                    f"Composite.{method}: key {_show(path)!r} is missing (got keys"
                    f" {list(td.keys())}; expected every key of the spec). Add the entry."
                )
            getattr(spec, method)(value, key=_show(path))

    def _meta_ok(self, td: Any) -> bool:
        if not isinstance(td, TensorDictBase):
            return False
        get = _getter(td)
        return all(spec._meta_ok(get(k, None)) for k, spec in self._specs.items())

    def assert_is_in(self, value: Any, key: Any = None) -> None:
        """Raises a :class:`~tdrl.errors.SpecError` naming the first bad or missing key.

        Examples:
            >>> from tdrl.specs import Bounded
            >>> Composite(a={"b": Bounded(0.0, 1.0)}).assert_is_in(TensorDict(a={}))
            Traceback (most recent call last):
            ...
            tdrl.errors.SpecError: Composite.assert_is_in: key ('a', 'b') is missing ...
        """
        self._walk_check(value, key, "assert_is_in")

    def check_shape_dtype(self, td: Any, key: Any = None) -> None:
        """Metadata-only check of every entry (see :meth:`TensorSpec.check_shape_dtype`).

        Examples:
            >>> from tdrl.specs import Unbounded
            >>> spec = Composite(a=Unbounded(shape=(2,)))
            >>> spec.check_shape_dtype(spec.zero())
        """
        if not self._meta_ok(td):  # the fast path builds no key or message
            self._walk_check(td, key, "check_shape_dtype")

    def project(self, val: TensorDictBase) -> TensorDictBase:
        """A new TensorDict whose spec entries are projected (other entries kept, input intact).

        Examples:
            >>> from tdrl.specs import Bounded
            >>> spec = Composite(a=Bounded(0.0, 1.0))
            >>> spec.project(TensorDict(a=torch.tensor(3.0)))["a"].item()
            1.0
        """
        out = val.clone(recurse=False)
        get = _getter(val)
        for k, spec in self._specs.items():
            value = get(k, None)
            if value is not None:
                out.set(k, spec.project(value))
        return out

    # ------------------------------------------------------------------ shapes
    def _apply(self, shape: torch.Size, fn: Any, device: Any = _MISSING) -> Composite:
        out = Composite(shape=shape, device=self.device if device is _MISSING else device)
        for k, v in self._specs.items():
            out._specs[k] = fn(v)
        return out

    def expand(self, *shape: Any) -> Composite:
        """Prepends dims to the composite and all entries (trailing dims must match).

        Examples:
            >>> from tdrl.specs import Unbounded
            >>> spec = Composite(a=Unbounded(shape=(3,))).expand(2)
            >>> spec.shape, spec["a"].shape
            (torch.Size([2]), torch.Size([2, 3]))
        """
        new = self._expanded_shape(shape_from_args(shape), "Composite.expand")
        n = self.ndim
        return self._apply(new, lambda v: v.expand(*new, *v.shape[n:]))

    def squeeze(self, dim: int | None = None) -> Composite:
        """Removes size-1 batch dims of the composite (and of its entries).

        Examples:
            >>> from tdrl.specs import Unbounded
            >>> Composite(a=Unbounded(shape=(1, 3)), shape=(1,)).squeeze()["a"].shape
            torch.Size([3])
        """
        if dim is None:
            dims = [i for i, s in enumerate(self.shape) if s == 1]
        else:
            d = norm_dim(dim, self.ndim, "Composite.squeeze")
            dims = [d] if self.shape[d] == 1 else []

        def fn(v: TensorSpec) -> TensorSpec:
            for d in reversed(dims):
                v = v.squeeze(d)
            return v

        shape = torch.Size(s for i, s in enumerate(self.shape) if i not in dims)
        return self._apply(shape, fn)

    def unsqueeze(self, dim: int) -> Composite:
        """Inserts a size-1 batch dim at ``dim`` (in the composite and its entries).

        Examples:
            >>> from tdrl.specs import Unbounded
            >>> Composite(a=Unbounded(shape=(3,))).unsqueeze(0)["a"].shape
            torch.Size([1, 3])
        """
        d = norm_dim(dim, self.ndim + 1, "Composite.unsqueeze")
        shape = torch.Size((*self.shape[:d], 1, *self.shape[d:]))
        return self._apply(shape, lambda v: v.unsqueeze(d))

    def _index(self, idx: Any) -> Composite:
        where = "Composite.__getitem__"
        idx = expand_ellipsis(idx, self.ndim)
        shape = index_shape(self.shape, idx, self.device, where)
        return self._apply(shape, lambda v: v[idx])

    # ------------------------------------------------------------------ copies
    def to(self, dest: DeviceLike | torch.dtype) -> Composite:
        """A copy on another device (or with every tensor leaf cast to a dtype).

        Examples:
            >>> from tdrl.specs import Unbounded
            >>> Composite(a=Unbounded(), device="cpu").to(torch.float64)["a"].dtype
            torch.float64
        """
        if isinstance(dest, torch.dtype):
            return self._apply(self.shape, lambda v: v if isinstance(v, NonTensor) else v.to(dest))
        device = as_device(dest)
        return self._apply(self.shape, lambda v: v.to(device), device=device)

    def clone(self) -> Composite:
        """A deep copy (unlocked).

        Examples:
            >>> from tdrl.specs import Unbounded
            >>> spec = Composite(a=Unbounded())
            >>> spec.clone() == spec, spec.clone()["a"] is spec["a"]
            (True, False)
        """
        return self._apply(self.shape, lambda v: v.clone())

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self) or not isinstance(other, Composite):
            return False
        if (self.shape, self.device) != (other.shape, other.device):
            return False
        if set(self._specs) != set(other._specs):
            return False
        return all(v == other._specs[k] for k, v in self._specs.items())

    __hash__ = None  # type: ignore[assignment]

    # ------------------------------------------------------------------ keys
    def flatten_keys(self, sep: str = ".") -> Composite:
        """A flat Composite whose leaf keys join the nested keys with ``sep``.

        Examples:
            >>> from tdrl.specs import Unbounded
            >>> Composite(a={"b": Unbounded()}).flatten_keys().keys()
            ['a.b']
        """
        out = self.empty()
        for key, spec in self.items(True, True):
            out._specs[sep.join(_path(key, ""))] = spec
        return out

    def unflatten_keys(self, sep: str = ".") -> Composite:
        """The inverse of :meth:`flatten_keys` (intermediate nodes take the root shape).

        Examples:
            >>> from tdrl.specs import Unbounded
            >>> Composite({"a.b": Unbounded()}).unflatten_keys().keys(True, True)
            [('a', 'b')]
        """
        out = self.empty()
        for key, spec in self._specs.items():
            out.set(tuple(key.split(sep)), spec)
        return out

    def __repr__(self) -> str:
        lines = []
        for k, v in self._specs.items():
            body = repr(v).replace("\n", "\n    ")
            lines.append(f"    {k}: {body},")
        tail = f"    shape={self.shape}, device={self.device})"
        return "\n".join(["Composite(", *lines, tail])
