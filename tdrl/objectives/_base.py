"""LossModule: per-instance keys, value-estimator factory, target-parameter helpers."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from collections.abc import Callable, Iterator
from typing import Any, ClassVar

import torch
from tensordict import TensorDict, TensorDictBase, TensorDictParams
from tensordict.nn import InteractionType, TensorDictModule, set_interaction_type
from tensordict.utils import NestedKey
from torch import nn
from torch.nn.parameter import UninitializedParameter

from tdrl.modules import ExplorationType, RecurrentModuleBase, set_recurrent_mode
from tdrl.objectives._mask import AUTO_LOSS_MASK_KEYS, resolve_mask_key
from tdrl.objectives.value import (
    GAE,
    MultiAgentGAE,
    TD0Estimator,
    TD1Estimator,
    TDLambdaEstimator,
    ValueEstimators,
)

__all__ = ["LossModule", "normalize_key"]

_ESTIMATORS: dict[ValueEstimators, type] = {
    ValueEstimators.TD0: TD0Estimator,
    ValueEstimators.TD1: TD1Estimator,
    ValueEstimators.TDLambda: TDLambdaEstimator,
    ValueEstimators.GAE: GAE,
    ValueEstimators.MAGAE: MultiAgentGAE,
}


def normalize_key(key: NestedKey) -> NestedKey:
    """``("a",)`` -> ``"a"``; nested tuples are flattened.

    Examples:
        >>> normalize_key(("agents", ("action",)))
        ('agents', 'action')
    """
    flat: list[str] = []

    def _walk(k: Any) -> None:
        if isinstance(k, str):
            flat.append(k)
        else:
            for part in k:
                _walk(part)

    _walk(key)
    return flat[0] if len(flat) == 1 else tuple(flat)


class LossModule(nn.Module):
    """Base class of tdrl losses.

    A loss reads a batch and returns a TensorDict of ``loss_*`` terms (sum them to backpropagate)
    plus detached diagnostics, with TorchRL's keys and shapes. The only entry ``forward`` writes
    into the batch is the per-sample TD error of losses with a ``priority`` key
    (``"td_error"``: DQN, DDPG, TD3, SAC, REDQ, CQL, IQL and their discrete forms), as
    TorchRL's losses do, so that TorchRL's pattern
    ``loss(batch); buffer.update_tensordict_priority(batch)`` works; as in TorchRL, the
    output itself carries it only for DDPG (and a batch mean for discrete CQL). Subclasses declare:

    - ``Keys``: a frozen dataclass of the data keys they read and write (per instance: change them
      with ``set_keys``);
    - ``default_value_estimator`` and ``_value_network_for_estimator()`` when they use one;
    - networks as submodules, and targets with ``_make_target(name)``.

    As in TorchRL, ``forward`` and every public method whose name ends in ``loss`` (e.g.
    ``TD3Loss.actor_loss``) run under ``set_recurrent_mode(True)``: recurrent modules of the
    networks process whole sequences (time is the last batch dim). ``forward`` also runs
    under ``set_exploration_type(loss.deterministic_sampling_mode)`` (``DETERMINISTIC`` by
    default, as TorchRL): a policy called inside it acts deterministically and exploration
    modules add no noise, whatever block the caller is in. The losses that sample actions
    (SAC, REDQ, CQL, the PPO family's entropy estimate, ...) draw them explicitly with
    ``rsample``, as TorchRL's losses do inside their own ``RANDOM`` blocks. The networks' parameters
    are exposed as TorchRL does: ``loss.<network>_params`` (live) and
    ``loss.target_<network>_params`` (the target copy when the loss keeps one, else the live
    parameters detached: e.g. ``ClipPPOLoss.target_critic_network_params`` for GAE).

    Examples:
        >>> import dataclasses
        >>> class Half(LossModule):
        ...     @dataclasses.dataclass(frozen=True)
        ...     class Keys:
        ...         value: str = "value"
        ...     def forward(self, td):
        ...         return TensorDict({"loss_half": td[self.tensor_keys.value].mean() / 2}, [])
        >>> loss = Half().set_keys(value=("agents", "value"))
        >>> loss.tensor_keys.value
        ('agents', 'value')
    """

    @dataclasses.dataclass(frozen=True)
    class Keys:
        """The data keys a loss reads and writes (overridden by each loss)."""

    default_value_estimator: ClassVar[ValueEstimators | None] = None
    #: The exploration type ``forward`` runs under (TorchRL's attribute and default).
    deterministic_sampling_mode: ExplorationType = ExplorationType.DETERMINISTIC
    estimator_key_names: ClassVar[tuple[str, ...]] = (
        "advantage",
        "value_target",
        "value",
        "reward",
        "done",
        "terminated",
    )
    # The loss_mask_key setting, the mask entries it names and their top-level names.
    _loss_mask_key: Any = "auto"
    _mask_keys: tuple[NestedKey, ...] = AUTO_LOSS_MASK_KEYS
    _mask_heads: tuple[str, ...] = ("collector", "shifted_valid")

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for name, value in list(vars(cls).items()):
            if callable(value) and (name == "forward" or _is_loss_method(name)):
                setattr(cls, name, _in_sequence_mode(value))

    def __init__(self) -> None:
        super().__init__()
        self._keys = type(self).Keys()
        self._value_estimator: nn.Module | None = None
        self._targets: dict[str, str] = {}
        self._pending_targets: list[str] = []
        self._gamma: float | None = None

    def _torchrl_options(
        self,
        *,
        gamma: float | None = None,
        priority_key: NestedKey | None = None,
        reduction: str | None = None,
        **unsupported: tuple[Any, Any],
    ) -> None:
        """Applies the TorchRL arguments tdrl honours and rejects the others.

        ``gamma`` becomes the value estimator's discount, ``priority_key`` the ``priority``
        key; ``reduction`` must be ``None``/``"mean"``; every ``name=(value, default)`` of
        ``unsupported`` must be at its default.
        """
        where = f"{type(self).__name__}.__init__"
        if reduction not in (None, "mean"):
            raise ValueError(
                f"{where}: reduction={reduction!r} is not supported (got {reduction!r}; expected "
                "None or 'mean'). Compute per-sample terms from the returned 'td_error'."
            )
        for name, (value, default) in unsupported.items():
            if value is not default and not (type(value) is type(default) and value == default):
                raise ValueError(
                    f"{where}: {name}={value!r} is not supported by tdrl (got {value!r}; "
                    f"expected the default {default!r}). Leave {name} at its default."
                )
        if gamma is not None:
            self._gamma = float(gamma)
        if priority_key is not None:
            self.set_keys(priority=priority_key)

    # ---------------------------------------------------------------- validity masks
    @property
    def loss_mask_key(self) -> Any:
        """The batch entry that marks the positions counted in the loss terms.

        ``"auto"`` (default, as TorchRL): the validity masks written by tdrl and TorchRL,
        ``("collector", "mask")`` (split trajectories: False = padding) and
        ``"shifted_valid"`` (False = a bootstrapped target that crosses an episode boundary),
        ANDed when both are present. A nested key: that entry only (``("auto",)`` names an
        entry called ``"auto"``). ``None``: no masking. Masked positions are left out of every
        ``loss_*`` term (a NaN there reaches neither the value nor the gradient); the
        diagnostics are not masked, as in TorchRL. A mask is boolean, True = valid, shaped
        like the batch (a trailing unit dim is allowed).

        Examples:
            >>> from tdrl.objectives import DQNLoss
            >>> from tdrl.testing import make_action_value_net
            >>> loss = DQNLoss(make_action_value_net(), action_space="one_hot")
            >>> loss.loss_mask_key
            'auto'
            >>> loss.loss_mask_key = ("my_masks", "valid")
        """
        return self._loss_mask_key

    @loss_mask_key.setter
    def loss_mask_key(self, value: Any) -> None:
        where = f"{type(self).__name__}.loss_mask_key"
        self._loss_mask_key, self._mask_keys, self._mask_heads = resolve_mask_key(value, where)

    # ---------------------------------------------------------------- keys
    @property
    def tensor_keys(self) -> Any:
        """This instance's keys (a frozen dataclass)."""
        return self._keys

    def set_keys(self, **keys: NestedKey) -> LossModule:
        """Changes the data keys this loss reads/writes; returns the loss for chaining.

        Raises:
            KeyError: a name that is not one of this loss's key names.
        """
        valid = {f.name for f in dataclasses.fields(self._keys)}
        unknown = sorted(set(keys) - valid)
        if unknown:
            raise KeyError(
                f"{type(self).__name__}.set_keys: unknown key name(s) {unknown} "
                f"(expected one of {sorted(valid)}). Check the spelling."
            )
        self._keys = dataclasses.replace(
            self._keys, **{k: normalize_key(v) for k, v in keys.items()}
        )
        if self._value_estimator is not None:
            self._forward_keys(self._value_estimator)
        return self

    def _forward_keys(self, estimator: nn.Module) -> None:
        mine = {f.name: getattr(self._keys, f.name) for f in dataclasses.fields(self._keys)}
        shared = {k: v for k, v in mine.items() if k in self.estimator_key_names}
        if shared:
            estimator.set_keys(**shared)  # type: ignore[operator]

    def _priority_output(self, td_error: torch.Tensor) -> torch.Tensor | None:
        """What ``forward``'s output holds under the priority key once the TD error has been
        written into the batch: nothing, as most TorchRL losses (DDPG keeps it)."""
        return None

    # ---------------------------------------------------------------- value estimators
    def _value_network_for_estimator(self) -> TensorDictModule | None:
        """The network the estimator should use to fill missing values (None: values given)."""
        return None

    def _default_hyperparams(self) -> dict[str, Any]:
        return {"gamma": 0.99 if self._gamma is None else self._gamma}

    def make_value_estimator(
        self, value_type: ValueEstimators | str | None = None, **hyperparams: Any
    ) -> LossModule:
        """Builds the value estimator this loss uses (TD0, TD1, TDLambda, GAE or MAGAE).

        Args:
            value_type: the estimator kind (an enum member or its name); the loss's default
                when None.
            **hyperparams: ``gamma``, ``lmbda`` and the estimator's options.

        Returns:
            The loss, for chaining.
        """
        if value_type is None:
            value_type = self.default_value_estimator
        if value_type is None:
            raise ValueError(
                f"{type(self).__name__}.make_value_estimator: this loss uses no value estimator "
                "(got value_type=None and no default)."
            )
        if isinstance(value_type, str):
            try:
                value_type = ValueEstimators[value_type]
            except KeyError:
                raise ValueError(
                    f"{type(self).__name__}.make_value_estimator: unknown estimator "
                    f"{value_type!r} (expected one of {[v.name for v in ValueEstimators]})."
                ) from None
        params = {**self._default_hyperparams(), **hyperparams}
        if value_type in (ValueEstimators.TD0, ValueEstimators.TD1):
            params.pop("lmbda", None)
        else:
            params.setdefault("lmbda", 0.95)
        est = _ESTIMATORS[value_type](value_network=self._value_network_for_estimator(), **params)
        self._value_estimator = est
        self._forward_keys(est)
        return self

    @property
    def value_estimator(self) -> nn.Module:
        """The value estimator (the default one is built on first use)."""
        if self._value_estimator is None:
            self._make_default_estimator()
        assert self._value_estimator is not None
        return self._value_estimator

    @torch.compiler.disable
    def _make_default_estimator(self) -> None:
        # Building modules cannot be traced: under torch.compile this runs eagerly, once.
        self.make_value_estimator()

    # ---------------------------------------------------------------- targets
    def _make_target(self, name: str) -> TensorDictParams:
        """Registers a detached copy of submodule ``name``'s parameters as its target.

        The copy lives in ``self.<name>_target_params`` (buffers: never trained). Use it with
        ``with self.<name>_target_params.to_module(self.<name>): ...``.
        """
        module = getattr(self, name)
        self._targets[name] = f"{name}_target_params"
        if any(isinstance(p, UninitializedParameter) for p in module.parameters()):
            # A lazy network: its target is made once the first forward has built its weights.
            self._pending_targets.append(name)
            setattr(self, f"{name}_target_params", None)
            return None  # type: ignore[return-value]
        params = TensorDict.from_module(module).detach().clone()
        target = TensorDictParams(params, no_convert=True)
        setattr(self, f"{name}_target_params", target)
        return target

    @torch.compiler.disable
    def _materialize_targets(self, tensordict: TensorDictBase) -> None:
        """Builds the targets of lazy networks (runs them once on ``tensordict`` if needed)."""
        for name in list(self._pending_targets):
            module = getattr(self, name)
            if any(isinstance(p, UninitializedParameter) for p in module.parameters()):
                with torch.no_grad():
                    module(tensordict.copy())
            self._pending_targets.remove(name)
            self._make_target(name)

    def target_pairs(self) -> Iterator[tuple[TensorDictBase, TensorDictBase]]:
        """Yields ``(live_params, target_params)`` for every network whose target exists."""
        for name, attr in self._targets.items():
            target = getattr(self, attr)
            if target is not None:
                yield TensorDict.from_module(getattr(self, name)), target

    # ---------------------------------------------------------------- TorchRL parameter names
    def __getattr__(self, name: str) -> Any:
        # ``<network>_params`` / ``target_<network>_params`` as TorchRL names them.
        if name.endswith("_params") and not name.startswith("_"):
            base = name[: -len("_params")]
            target = base.startswith("target_")
            network = base[len("target_") :] if target else base
            module = self.__dict__.get("_modules", {}).get(network)
            if module is not None:
                return self._network_params(network, module, target)
        return super().__getattr__(name)

    def _network_params(self, network: str, module: nn.Module, target: bool) -> TensorDictBase:
        stacked = getattr(module, "params", None)
        ensemble = isinstance(stacked, TensorDictParams)  # a QEnsemble: members stacked
        if not target or network not in self._targets:
            live: TensorDictBase = stacked if ensemble else TensorDict.from_module(module)
            # As TorchRL: a network without a target copy serves its live weights, detached
            # (same storage), as ``target_<network>_params``.
            return live.data if target else live
        params = getattr(self, f"{network}_target_params")
        if params is None:
            raise RuntimeError(
                f"{type(self).__name__}.target_{network}_params: the target of the lazy network "
                f"{network!r} does not exist yet (got no forward call; expected one first). "
                "Call the loss on a batch first."
            )
        return params["params"] if ensemble else params

    @torch.no_grad()
    def reset_targets(self) -> None:
        """Copies the live parameters into every target."""
        for live, target in self.target_pairs():
            target.data.update_(live.data)

    # ---------------------------------------------------------------- torch.compile
    def compile(  # type: ignore[override]
        self,
        *,
        backend: str | Callable[..., Any] = "inductor",
        mode: str | None = None,
        options: dict[str, Any] | None = None,
        fullgraph: bool = False,
        dynamic: bool | None = None,
        **kwargs: Any,
    ) -> None:
        """Compiles this loss's calls with ``torch.compile``, in place (``nn.Module.compile``).

        ``loss(batch)`` then runs the compiled forward; the loss keeps its contract (the same
        ``loss_*`` terms and diagnostics, the ``"td_error"`` write into the batch, targets,
        value estimator, ``state_dict`` keys). tdrl's losses trace without graph breaks
        (``fullgraph=True`` works; a recurrent network breaks the graph at the recurrent
        mode). With inductor, random draws use the eager generator (see ``options``):
        compiled and eager losses draw the same numbers.

        ``tdrl train --compile`` calls it. The whole update step (loss, backward, optimiser
        step, target update) can also be compiled with ``torch.compile(update)``, as TorchRL's
        scripts do: tdrl's losses, value estimators and target updaters trace inside it. With
        a fused Adam, compiling the loss alone measured as fast or faster; whether it pays
        depends on the networks (README's "torch.compile" has the figures).

        Args:
            backend: ``"inductor"`` (generated code), ``"aot_eager"``/``"eager"`` (tracing
                only, to check a loss compiles) or a backend callable.
            mode: an inductor mode (``"max-autotune-no-cudagraphs"``, ...).
            options: inductor options; ``fallback_random`` is True unless given.
            fullgraph: fail on a graph break instead of running that part eagerly.
            dynamic: torch.compile's dynamic-shape setting (batch sizes that change).
            **kwargs: other ``torch.compile`` arguments of this torch (e.g. ``disable``).

        Raises:
            TypeError: an argument ``torch.compile`` does not have.
            ValueError: an unknown backend, mode or inductor option.

        Examples:
            >>> from tdrl.objectives import DQNLoss
            >>> from tdrl.testing import make_action_value_net, make_transition_batch
            >>> loss = DQNLoss(make_action_value_net(), action_space="one_hot")
            >>> batch = make_transition_batch(action="one_hot")
            >>> expected = loss(batch.clone())["loss"]
            >>> loss.compile(backend="eager", fullgraph=True)
            >>> bool(torch.allclose(loss(batch)["loss"], expected)), "td_error" in batch
            (True, True)
        """
        from tdrl.objectives._compile import compile_kwargs

        given = dict(backend=backend, mode=mode, options=options, fullgraph=fullgraph)
        checked = compile_kwargs(
            f"{type(self).__name__}.compile", {**given, "dynamic": dynamic, **kwargs}
        )
        if self._value_estimator is None and self.default_value_estimator is not None:
            self.make_value_estimator()  # built now: fullgraph=True needs no eager call first
        super().compile(**checked)


def _is_loss_method(name: str) -> bool:
    return not name.startswith("_") and name.endswith("loss")


def _in_sequence_mode(method: Callable[..., Any]) -> Callable[..., Any]:
    if getattr(method, "_tdrl_sequence_mode", False):
        return method
    is_forward = method.__name__ == "forward"

    @functools.wraps(method)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        if self._pending_targets and args and isinstance(args[0], TensorDictBase):
            self._materialize_targets(args[0])
        compiling = torch.compiler.is_compiling()
        if compiling and self._value_estimator is None:
            if self.default_value_estimator is not None:
                self._make_default_estimator()  # here (one graph break), not deep inside
        # As TorchRL: forward runs under the loss's deterministic_sampling_mode (policies
        # called inside act deterministically, exploration modules are off); the losses that
        # sample from the actor do so explicitly (rsample), whatever the mode.
        sampling = _sampling_mode(self) if is_forward else contextlib.nullcontext()
        with sampling:
            if compiling and not _holds_recurrent(self):
                # The mode only steers tdrl's recurrent modules, and torch.compile cannot
                # trace the context variable behind it: without them, skip it (no graph
                # break).
                out = method(self, *args, **kwargs)
            else:
                with set_recurrent_mode(True):
                    out = method(self, *args, **kwargs)
        if is_forward:
            _write_priority(self, args[0] if args else kwargs.get("tensordict"), out)
        return out

    wrapper._tdrl_sequence_mode = True  # type: ignore[attr-defined]
    return wrapper


def _sampling_mode(loss: Any) -> set_interaction_type:
    """The ``set_interaction_type`` block of ``loss.deterministic_sampling_mode``."""
    mode = loss.deterministic_sampling_mode
    if isinstance(mode, ExplorationType):
        return set_interaction_type(mode.interaction_type)
    if isinstance(mode, InteractionType | str):
        return set_interaction_type(mode)
    raise TypeError(
        f"{type(loss).__name__}.forward: deterministic_sampling_mode is not an exploration type"
        f" (got {mode!r}; expected an ExplorationType member, e.g."
        " ExplorationType.DETERMINISTIC). Set it to one."
    )


def _holds_recurrent(loss: nn.Module) -> bool:
    """Whether ``loss`` holds a recurrent module (those read the global recurrent mode)."""
    from tdrl.objectives._ensemble import QEnsemble  # _ensemble imports this file

    for module in loss.modules():
        # A QEnsemble runs a copy of its module kept outside its submodules.
        inner = module._base[0].modules() if isinstance(module, QEnsemble) else ()
        if any(isinstance(m, RecurrentModuleBase) for m in (module, *inner)):
            return True
    return False


def _write_priority(loss: Any, tensordict: Any, out: Any) -> None:
    """Moves the loss's TD error from its output into its input batch (TorchRL's ``priority``
    key); the output keeps what ``loss._priority_output`` gives (nothing for most losses)."""
    key = getattr(loss.tensor_keys, "priority", None)
    if key is None or not isinstance(out, TensorDictBase):
        return
    error = out.get(key, None)
    if error is None:
        return
    if isinstance(tensordict, TensorDictBase):
        tensordict.set(key, error)
    shown = loss._priority_output(error)
    if shown is None:
        out.del_(key)
    elif shown is not error:
        out.set(key, shown)
