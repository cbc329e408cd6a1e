"""gymnasium spaces as tdrl specs, and codecs that move values between numpy and torch.

A codec is built once per space: it holds the spec and converts gymnasium values (numpy arrays,
python scalars, dicts, tuples) to tensors or TensorDicts (``decode``) and actions back
(``encode``) without looking at the space again on the hot path.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from tensordict import TensorDict, TensorDictBase

from tdrl.specs import (
    Binary,
    Bounded,
    Categorical,
    Composite,
    MultiCategorical,
    OneHot,
    TensorSpec,
    Unbounded,
)

__all__ = ["Codec", "make_codec", "space_to_spec"]


def torch_dtype(dtype: Any) -> torch.dtype:
    """The torch dtype of a numpy dtype (``np.float32`` -> ``torch.float32``)."""
    return torch.from_numpy(np.empty(0, dtype=np.dtype(dtype))).dtype


class Codec:
    """Converts one space's values; ``spec`` has the env batch dims in front."""

    spec: TensorSpec

    def decode(self, value: Any) -> Any:
        """numpy/python value -> tensor (or TensorDict for Dict/Tuple spaces)."""
        raise NotImplementedError

    def encode(self, value: Any) -> Any:
        """tensor (or TensorDict) -> the value gymnasium's ``step`` expects."""
        raise NotImplementedError


def _host(value: torch.Tensor) -> np.ndarray:
    """``value.numpy(force=True)``; the plain ``numpy()`` first (a third of the cost) for the
    usual cpu tensor without grad."""
    try:
        return value.numpy()
    except (RuntimeError, TypeError):
        return value.numpy(force=True)


def _full_range(low: torch.Tensor, high: torch.Tensor, dtype: torch.dtype) -> bool:
    """Whether the bounds are the dtype's whole range (TorchRL reads such a Box as unbounded)."""
    info = torch.finfo(dtype) if dtype.is_floating_point else torch.iinfo(dtype)
    return bool((low == info.min).all() and (high == info.max).all())


class _BoxCodec(Codec):
    def __init__(self, space: Any, batch: torch.Size, device: torch.device | None) -> None:
        self.np_dtype = np.dtype(space.dtype)
        dtype = torch_dtype(self.np_dtype)
        # a scalar Box becomes a (1,) entry, as in TorchRL
        self.scalar = len(space.shape) == 0
        shape = (*batch, *(space.shape or (1,)))
        low = torch.as_tensor(np.asarray(space.low, dtype=np.float64)).reshape(space.shape or (1,))
        high = torch.as_tensor(np.asarray(space.high, dtype=np.float64)).reshape(low.shape)
        # TorchRL: unbounded only when every bound is infinite (or the dtype's whole range);
        # a Box with some infinite bounds (CartPole's) is Bounded, its infinite bounds kept
        unbounded = bool(torch.isinf(low).all() and torch.isinf(high).all())
        if unbounded or _full_range(low, high, dtype):
            self.spec = Unbounded(shape=shape, device=device, dtype=dtype)
        else:
            self.spec = Bounded(low, high, shape=shape, device=device, dtype=dtype)

    def decode(self, value: Any) -> torch.Tensor:
        # np.array copies: an env that reuses its output buffer cannot rewrite past data.
        out = torch.from_numpy(np.array(value, dtype=self.np_dtype))
        return out.unsqueeze(-1) if self.scalar else out

    def encode(self, value: torch.Tensor) -> np.ndarray:
        # a copy: gymnasium may keep or change the array, which must not reach the action the
        # caller's data holds (nor see it change later)
        array = _host(value).astype(self.np_dtype, copy=True)
        return array.squeeze(-1) if self.scalar else array


class _DiscreteCodec(Codec):
    def __init__(
        self, space: Any, batch: torch.Size, device: torch.device | None, categorical: bool
    ) -> None:
        self.n = int(space.n)
        self.start = int(space.start)
        self.categorical = categorical
        self.scalar = len(batch) == 0
        if categorical:
            self.spec = Categorical(self.n, shape=batch, device=device)
        else:  # int64 one-hot, as TorchRL maps a Discrete space
            self.spec = OneHot(self.n, shape=(*batch, self.n), device=device, dtype=torch.int64)

    def decode(self, value: Any) -> torch.Tensor:
        index = torch.as_tensor(np.asarray(value, dtype=np.int64) - self.start)
        return index if self.categorical else F.one_hot(index, self.n)

    def encode(self, value: torch.Tensor) -> Any:
        if self.scalar:  # one env: a python list is the cheapest host copy of a few values
            if self.categorical:
                return int(value) + self.start
            row = value.tolist()
            return row.index(max(row)) + self.start  # argmax (the first maximum)
        # numpy's argmax on a host copy is several times cheaper than torch's on tiny tensors.
        array = _host(value)
        index = array if self.categorical else array.argmax(-1)
        return index.astype(np.int64) + self.start


class _MultiDiscreteCodec(Codec):
    """MultiDiscrete: MultiOneHot/MultiCategorical, or, when every ``nvec`` entry is the same
    ``n``, ``k`` stacked discrete entries (``OneHot`` ``[*B, k, n]`` / ``Categorical`` ``[*B, k]``)
    as TorchRL maps it."""

    def __init__(
        self, space: Any, batch: torch.Size, device: torch.device | None, categorical: bool
    ) -> None:
        nvec = np.asarray(space.nvec)
        if nvec.ndim != 1:
            raise TypeError(
                f"GymWrapper: MultiDiscrete spaces must have a flat nvec (got nvec of shape "
                f"{nvec.shape}; expected 1 dim). Flatten the space with a gymnasium wrapper."
            )
        self.start = np.asarray(space.start, dtype=np.int64)
        self.categorical = categorical
        self.n = int(nvec[0]) if len(set(nvec.tolist())) == 1 else None
        k = len(nvec)
        self.spec: TensorSpec
        if self.n is not None:
            n = self.n
            self.spec = (
                Categorical(n, shape=(*batch, k), device=device)
                if categorical
                else OneHot(n, shape=(*batch, k, n), device=device, dtype=torch.int64)
            )
            return
        self.index_spec = MultiCategorical(nvec.tolist(), shape=(*batch, k), device=device)
        self.spec = self.index_spec if categorical else self.index_spec.to_one_hot_spec()
        if not categorical:
            self.spec = self.spec.to(torch.int64)

    def decode(self, value: Any) -> torch.Tensor:
        index = torch.as_tensor(np.asarray(value, dtype=np.int64) - self.start)
        if self.categorical:
            return index
        if self.n is not None:
            return F.one_hot(index, self.n)
        return self.index_spec.to_one_hot(index).to(torch.int64)

    def encode(self, value: torch.Tensor) -> np.ndarray:
        if not self.categorical:
            if self.n is not None:
                return value.numpy(force=True).argmax(-1).astype(np.int64) + self.start
            value = self.spec.to_categorical(value)  # type: ignore[attr-defined]
        return value.cpu().numpy().astype(np.int64) + self.start


class _MultiBinaryCodec(Codec):
    def __init__(self, space: Any, batch: torch.Size, device: torch.device | None) -> None:
        self.np_dtype = np.dtype(space.dtype)
        shape = (*batch, *space.shape)
        self.spec = Binary(shape=shape, device=device, dtype=torch_dtype(self.np_dtype))

    def decode(self, value: Any) -> torch.Tensor:
        return torch.from_numpy(np.array(value, dtype=self.np_dtype))

    def encode(self, value: torch.Tensor) -> np.ndarray:
        return value.numpy(force=True).astype(self.np_dtype, copy=False)


class _NodeCodec(Codec):
    """Dict and Tuple spaces: a Composite whose entries are the sub-spaces (Tuple: "0", "1")."""

    def __init__(
        self, children: dict[str, Codec], batch: torch.Size, device: torch.device | None, is_tuple
    ) -> None:
        self.children = children
        self.batch = batch
        self.is_tuple = is_tuple
        self.spec = Composite({k: c.spec for k, c in children.items()}, shape=batch, device=device)

    def decode(self, value: Any) -> TensorDictBase:
        if self.is_tuple:
            data = {k: c.decode(v) for (k, c), v in zip(self.children.items(), value)}
        else:
            data = {k: c.decode(value[k]) for k, c in self.children.items()}
        return TensorDict._new_unsafe(data, batch_size=self.batch, nested=False)

    def encode(self, value: TensorDictBase) -> Any:
        out = {k: c.encode(value.get(k)) for k, c in self.children.items()}
        return tuple(out.values()) if self.is_tuple else out


def make_codec(
    space: Any,
    batch_size: torch.Size | tuple[int, ...] = (),
    device: torch.device | None = None,
    categorical_action_encoding: bool = False,
) -> Codec:
    """Builds the codec of a gymnasium space (see :func:`space_to_spec` for the mapping)."""
    from gymnasium import spaces

    batch = torch.Size(batch_size)
    cat = categorical_action_encoding
    if isinstance(space, spaces.Box):
        return _BoxCodec(space, batch, device)
    if isinstance(space, spaces.Discrete):
        return _DiscreteCodec(space, batch, device, cat)
    if isinstance(space, spaces.MultiDiscrete):
        return _MultiDiscreteCodec(space, batch, device, cat)
    if isinstance(space, spaces.MultiBinary):
        return _MultiBinaryCodec(space, batch, device)
    if isinstance(space, spaces.Dict):
        kids = {str(k): make_codec(s, batch, device, cat) for k, s in space.spaces.items()}
        return _NodeCodec(kids, batch, device, is_tuple=False)
    if isinstance(space, spaces.Tuple):
        kids = {str(i): make_codec(s, batch, device, cat) for i, s in enumerate(space.spaces)}
        return _NodeCodec(kids, batch, device, is_tuple=True)
    raise TypeError(
        f"space_to_spec: unsupported gymnasium space (got {type(space).__name__}; expected "
        "Box, Discrete, MultiDiscrete, MultiBinary, Dict or Tuple). Wrap the env with a gymnasium "
        "wrapper that maps it to a supported space."
    )


def space_to_spec(
    space: Any,
    batch_size: torch.Size | tuple[int, ...] = (),
    device: torch.device | str | None = None,
    categorical_action_encoding: bool = False,
) -> TensorSpec:
    """The tdrl spec of a gymnasium space, with ``batch_size`` as leading dims.

    Mapping (TorchRL's): ``Box`` -> ``Bounded`` when every bound is finite and the bounds are not
    the dtype's whole range (a 0..255 uint8 image is ``Unbounded``), else ``Unbounded`` (the
    space's dtype is kept; a scalar Box has shape ``(1,)``); ``Discrete(n)`` -> ``OneHot(n)``
    (int64, ``[*B, n]``), or ``Categorical(n)`` (``[*B]``) with ``categorical_action_encoding``;
    ``MultiDiscrete`` -> ``MultiOneHot`` (int64) or ``MultiCategorical``, except when every
    ``nvec`` entry is the same ``n``: ``OneHot(n)`` of shape ``[*B, k, n]`` or ``Categorical(n)``
    of shape ``[*B, k]``; ``MultiBinary`` -> ``Binary`` (int8, as the space); ``Dict`` ->
    ``Composite`` with the same keys; ``Tuple`` -> ``Composite`` with keys ``"0"``, ``"1"``, ...
    Discrete values are shifted by the space's ``start`` so that indices begin at 0.

    Examples:
        >>> from gymnasium import spaces
        >>> space_to_spec(spaces.Discrete(3), batch_size=(4,)).shape
        torch.Size([4, 3])
        >>> spec = space_to_spec(spaces.Dict(pos=spaces.Box(-1.0, 1.0, (2,)), n=spaces.Discrete(5)))
        >>> sorted(spec.keys())
        ['n', 'pos']
    """
    dev = torch.device(device) if device is not None else None
    return make_codec(space, batch_size, dev, categorical_action_encoding).spec
