"""SafeModule and SafeSequential: TensorDict modules that carry the spec of their outputs."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, cast

from tensordict import TensorDictBase
from tensordict.nn import TensorDictModule, TensorDictModuleBase, TensorDictSequential, dispatch
from tensordict.utils import NestedKey

from tdrl.specs import Composite, TensorSpec

__all__ = ["SafeModule", "SafeSequential"]


def output_spec(
    spec: TensorSpec | None, out_keys: Sequence[NestedKey], where: str, n_keys: int | None = None
) -> Composite:
    """``spec`` as a Composite keyed by the out keys (TorchRL's rule).

    A leaf spec describes the only out key (``n_keys`` counts the keys a leaf may describe:
    e.g. a log-probability key does not count); a Composite may only hold out keys.
    """
    if spec is None:
        return Composite()
    if not isinstance(spec, TensorSpec):
        raise TypeError(
            f"{where}: spec is not a TensorSpec (got {type(spec).__name__}; expected a TensorSpec"
            " or None). Pass a spec such as Bounded(-1.0, 1.0, shape=(2,))."
        )
    if not isinstance(spec, Composite):
        count = len(out_keys) if n_keys is None else n_keys
        if count > 1:
            raise ValueError(
                f"{where}: one leaf spec for several out keys (got {type(spec).__name__} for"
                f" out_keys {list(out_keys)}; expected a Composite keyed by the out keys). Pass"
                " Composite({key: spec, ...})."
            )
        return Composite({out_keys[0]: spec.clone()})
    wanted = {_flat(k) for k in out_keys}
    extra = [k for k in spec.keys(True, True) if _flat(k) not in wanted]
    if extra:
        raise ValueError(
            f"{where}: the spec describes keys the module does not write (got {extra}; expected"
            f" keys among out_keys {list(out_keys)}). Drop them or fix out_keys."
        )
    return cast(Composite, spec.clone())


def projections(spec: Composite) -> list[tuple[NestedKey, TensorSpec]]:
    """``(key, leaf spec)`` for every leaf of ``spec``."""
    return [(k, cast(TensorSpec, spec[k])) for k in spec.keys(True, True)]


def project_outputs(out: TensorDictBase, pairs: list[tuple[NestedKey, TensorSpec]]) -> None:
    """Maps every present entry of ``pairs`` into its spec (``spec.project``), in ``out``."""
    for key, leaf in pairs:
        value = out.get(key, None)
        if value is not None:
            out.set(key, leaf.project(value))


def _flat(key: NestedKey) -> tuple[str, ...]:
    return (key,) if isinstance(key, str) else tuple(cast(Iterable[str], key))


def check_safe(safe: bool, spec: Composite, where: str) -> None:
    if safe and not list(spec.keys(True, True)):
        raise ValueError(
            f"{where}: safe=True needs a spec to project into (got spec=None; expected a spec of"
            " the outputs). Pass spec= or safe=False."
        )


class SafeModule(TensorDictModule):
    """A ``TensorDictModule`` that carries the spec of its outputs and may keep them inside it.

    ``spec`` is kept as a :class:`~tdrl.specs.Composite` keyed by the out keys (a leaf spec
    describes the single out key). With ``safe=True`` every output that has a spec is mapped
    into it with ``spec.project`` after each call (a ``Bounded`` spec clamps); with
    ``safe=False`` (the default, as in TorchRL) outputs are left as the network wrote them.

    Args:
        module: the callable (usually an ``nn.Module``) run on the ``in_keys`` tensors.
        in_keys: keys read.
        out_keys: keys written.
        spec: optional spec of the outputs (a leaf for one out key, or a Composite).
        safe: project the outputs into ``spec`` after each call.
        inplace: ``tensordict.nn.TensorDictModule``'s ``inplace`` (write into the input).
        out_to_in_map, method, method_kwargs, strict, get_kwargs: the other options of
            ``tensordict.nn.TensorDictModule`` (keyword-only), passed on as TorchRL does.

    Raises:
        ValueError: a leaf spec for several out keys, spec keys that are not out keys, or
            ``safe=True`` without a spec.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tdrl.specs import Bounded
        >>> module = SafeModule(
        ...     torch.nn.Linear(3, 2), ["observation"], ["action"],
        ...     spec=Bounded(-1.0, 1.0, shape=(2,)), safe=True,
        ... )
        >>> td = module(TensorDict(observation=torch.full((4, 3), 10.0), batch_size=[4]))
        >>> bool(td["action"].abs().max() <= 1.0), type(module.spec).__name__
        (True, 'Composite')
    """

    def __init__(
        self,
        module: Callable[..., Any],
        in_keys: NestedKey | Sequence[NestedKey],
        out_keys: NestedKey | Sequence[NestedKey],
        spec: TensorSpec | None = None,
        safe: bool = False,
        inplace: bool | str = True,
        *,
        out_to_in_map: bool | None = None,
        method: str | None = None,
        method_kwargs: dict[str, Any] | None = None,
        strict: bool = False,
        get_kwargs: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(
            module,
            in_keys=in_keys,
            out_keys=out_keys,
            inplace=inplace,
            out_to_in_map=out_to_in_map,
            method=method,
            method_kwargs=method_kwargs,
            strict=strict,
            get_kwargs=get_kwargs,
        )
        where = f"{type(self).__name__}.__init__"
        self._spec = output_spec(spec, self.out_keys, where)
        check_safe(safe, self._spec, where)
        self.safe = safe
        self._projections = projections(self._spec) if safe else []

    @property
    def spec(self) -> Composite:
        """The spec of the outputs, keyed by out key."""
        return self._spec

    @dispatch(auto_batch_size=False)
    def forward(
        self,
        tensordict: TensorDictBase,
        *args: Any,
        tensordict_out: TensorDictBase | None = None,
        **kwargs: Any,
    ) -> TensorDictBase:
        """Runs the module, then (``safe=True``) projects the outputs into their spec."""
        out = super().forward(tensordict, *args, tensordict_out=tensordict_out, **kwargs)
        if self._projections:
            project_outputs(out, self._projections)
        return out


class SafeSequential(TensorDictSequential):
    """A ``TensorDictSequential`` whose ``spec`` gathers the output specs of its modules.

    Each module keeps its own behaviour (a :class:`SafeModule` with ``safe=True`` projects
    its outputs); the sequence itself does not project. Modules without a ``spec``
    attribute add nothing to ``spec``.

    Args:
        *modules: the TensorDict modules, run in order.
        partial_tolerant: ``tensordict.nn.TensorDictSequential``'s option (skip modules
            whose inputs are missing).
        inplace: ``tensordict.nn.TensorDictSequential``'s ``inplace``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tdrl.specs import Bounded
        >>> trunk = SafeModule(torch.nn.Linear(3, 4), ["observation"], ["hidden"])
        >>> head = SafeModule(
        ...     torch.nn.Linear(4, 2), ["hidden"], ["action"],
        ...     spec=Bounded(-1.0, 1.0, shape=(2,)), safe=True,
        ... )
        >>> seq = SafeSequential(trunk, head)
        >>> list(seq.spec.keys())
        ['action']
        >>> seq(TensorDict(observation=torch.zeros(5, 3), batch_size=[5]))["action"].shape
        torch.Size([5, 2])
    """

    def __init__(
        self,
        *modules: TensorDictModuleBase,
        partial_tolerant: bool = False,
        inplace: bool | str | None = None,
    ) -> None:
        super().__init__(*modules, partial_tolerant=partial_tolerant, inplace=inplace)
        spec = Composite()
        for module in modules:
            sub = getattr(module, "spec", None)
            if isinstance(sub, Composite):
                for key in sub.keys(True, True):
                    spec[key] = sub[key]
            elif isinstance(sub, TensorSpec) and len(module.out_keys) == 1:
                spec[module.out_keys[0]] = sub
        self._spec = spec

    @property
    def spec(self) -> Composite:
        """The output specs of the modules, keyed by out key."""
        return self._spec
