"""TransformedEnv: an env seen through a sequence of transforms."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.utils import NestedKey

from tdrl.envs.core import EnvBase
from tdrl.envs.core._fast import all_true, exclude_flat, select_flat, update_flat
from tdrl.envs.transforms._base import Transform
from tdrl.envs.transforms._casts import DeviceCastTransform
from tdrl.envs.transforms._checks import check_transform_output
from tdrl.envs.transforms._compose import Compose, _nodes
from tdrl.envs.transforms._env_up_to import EnvUpTo
from tdrl.envs.transforms._rows import TransformedRows, rows_possible
from tdrl.envs.transforms._utils import SPEC_KINDS, group_mask
from tdrl.specs import Composite, TensorSpec

__all__ = ["TransformedEnv"]

Specs = dict[str, Composite]


def _is_inverse(t: Transform) -> bool:
    return bool(t.in_keys_inv) or type(t)._inv_call is not Transform._inv_call


class TransformedEnv(EnvBase):
    """An env whose data goes through transforms: ``reset``/``step`` outputs forward, actions back.

    The specs are the base env's specs passed through every transform's spec hooks, computed
    once and cached; they are recomputed when a transform is appended, inserted or removed.
    ``reset`` calls the base env's ``reset`` with the ``_reset`` entries and the previous
    values of the base entries no transform writes (the base env keeps them where nothing
    resets), then each transform's ``_reset``, which keeps the rows that do not reset for the
    entries it writes. The result is the final merged data: the EnvBase partial-reset merge
    only adds it to the input. ``step`` maps the actions through the inverse hooks (on a shallow
    copy: the caller's root keeps what the policy wrote), steps the base env and passes its
    ``"next"`` through each transform's ``_step``. The base env never sees its own entries in
    transformed form: base entries that a transform writes (its ``out_keys``) are left out of
    what the base env's ``reset`` and ``step`` get, unless an inverse map restores them. Entries the policy wrote under ``"next"``
    (e.g. a recurrent state) are kept unless the env overwrites them.

    On the first reset and step after the specs were built, each transform's output is checked
    against its specs once (names the transform, the key and the available keys).

    Args:
        base_env: the env to transform (any EnvBase, batched envs included).
        transform: a Transform, a Compose, or ``None`` for none yet.
        cache_specs: must stay ``True``: the specs are cached and recomputed whenever the
            transform list changes (TorchRL's per-access recomputation is not supported).
        auto_unwrap: ``None``/``False``: a TransformedEnv given as ``base_env`` stays nested
            (its transforms run first, the data is what TorchRL's unwrapped chain gives);
            ``True`` (TorchRL's flattening into one TransformedEnv) is not supported.
        device: the device of the data (keyword-only): when it is not the base env's, a
            :class:`DeviceCastTransform` to it comes first.
        batch_size: TorchRL's EnvBase option: None or the base env's batch size (another
            raises ``ValueError``).
        run_type_checks: check every reset and step output of the TransformedEnv against its
            specs (as :class:`EnvBase`).
        spec_locked: accepted as :class:`EnvBase` does (tdrl never locks specs).
        auto_reset: ``False`` only, as :class:`EnvBase`.

    Attributes:
        base_env: the wrapped env.

    Examples:
        >>> from tdrl.envs.transforms import RewardSum, StepCounter
        >>> from tdrl.testing import CountingEnv
        >>> env = TransformedEnv(CountingEnv(batch_size=(2,)), StepCounter(max_steps=2))
        >>> env = env.append_transform(RewardSum())
        >>> td = env.rollout(5)
        >>> td["next", "step_count"][0].flatten().tolist(), td["next", "truncated"][0, -1].item()
        ([1, 2], True)
        >>> sorted(env.state_keys)
        ['episode_reward', 'step_count']
    """

    def __init__(
        self,
        base_env: EnvBase,
        transform: Transform | None = None,
        cache_specs: bool = True,
        *,
        auto_unwrap: bool | None = None,
        device: torch.device | str | None = None,
        batch_size: Sequence[int] | torch.Size | None = None,
        run_type_checks: bool = False,
        spec_locked: bool = True,
        auto_reset: bool = False,
    ) -> None:
        env = base_env
        if not isinstance(env, EnvBase):
            raise TypeError(
                f"TransformedEnv.__init__: base_env must be an EnvBase (got "
                f"{type(env).__name__}). Wrap external simulators with a tdrl.envs.libs wrapper."
            )
        for name, value, ok in (
            ("cache_specs", cache_specs, True),
            ("auto_unwrap", auto_unwrap, False),
        ):
            if value is not None and value != ok:
                raise NotImplementedError(
                    f"TransformedEnv.__init__: {name}={value!r} is not supported (got {value!r}; "
                    f"expected {ok!r} or the default). Drop {name}: specs are recomputed when "
                    "the transforms change, and nested TransformedEnvs run in order."
                )
        if batch_size is not None and torch.Size(batch_size) != env.batch_size:
            raise ValueError(
                f"TransformedEnv.__init__: batch_size differs from the base env's (got "
                f"{tuple(batch_size)}; expected {tuple(env.batch_size)} or None). A "
                "TransformedEnv has its base env's batch size: drop batch_size."
            )
        self.base_env = env
        self._flat: list[Transform] = []
        self._attached: list[Transform] = []
        self._attached_ids: set[int] = set()
        self._mask_memo: tuple[Any, ...] | None = None
        super().__init__(
            batch_size=env.batch_size,
            device=env.device,
            run_type_checks=run_type_checks,
            allow_done_after_reset=env.allow_done_after_reset,
            spec_locked=spec_locked,
            auto_reset=auto_reset,
            validate=env.validate,
        )
        if transform is None:
            transform = Compose()
        elif not isinstance(transform, Transform):
            raise TypeError(
                f"TransformedEnv.__init__: transform must be a Transform (got "
                f"{type(transform).__name__}). Wrap your function in a Transform subclass whose "
                "_call applies it."
            )
        if device is not None and torch.device(device) != env.device:
            given = list(transform) if isinstance(transform, Compose) else [transform]
            transform = Compose(DeviceCastTransform(device), *given)
        # As in TorchRL, env.transform is the transform given (a single one stays single) and
        # the transforms of an env run in eval mode (env.train() switches them).
        transform.eval()
        self._transform: Transform = transform
        self._rebuild()

    @property
    def batch_locked(self) -> bool:  # type: ignore[override]
        """The base env's: a batch-unlocked base env makes the TransformedEnv take any batch."""
        return self.base_env.batch_locked

    # ------------------------------------------------------------------ transforms
    @property
    def transform(self) -> Transform:
        """The transform given, as in TorchRL: a single transform, or a Compose (index it:
        ``env.transform[0]``). ``append_transform``/``insert_transform`` on an env holding a
        single transform replace it by a Compose holding it.

        Examples:
            >>> from tdrl.envs.transforms import StepCounter
            >>> from tdrl.testing import CountingEnv
            >>> t = StepCounter()
            >>> env = TransformedEnv(CountingEnv(), t)
            >>> env.transform is t
            True
            >>> env.append_transform(StepCounter(step_count_key="n")).transform[0] is t
            True
        """
        return self._transform

    @transform.setter
    def transform(self, transform: Transform) -> None:
        """Replaces every transform (TorchRL's setter): the old ones are detached, the new one
        is attached in eval mode and the specs are recomputed."""
        self._check_new(transform, "transform")
        transform.eval()
        self._transform = transform
        self._rebuild()

    def _edit(self, edit: Any) -> None:
        """Runs ``edit`` on the transforms as a Compose: a single transform is first wrapped
        in one (TorchRL). An attached Compose rebuilds the env itself when edited."""
        if isinstance(self._transform, Compose):
            edit(self._transform)
            return
        compose = Compose(self._transform)
        edit(compose)
        self._transform = compose
        self._rebuild()

    def append_transform(self, transform: Transform) -> TransformedEnv:
        """Appends a transform after the existing ones, recomputes the specs, returns ``self``.

        As in TorchRL, an env holding a single transform then holds a Compose of both (the
        transform keeps its place, its parent and its state).

        Examples:
            >>> from tdrl.envs.transforms import StepCounter
            >>> from tdrl.testing import CountingEnv
            >>> env = TransformedEnv(CountingEnv())
            >>> env.append_transform(StepCounter()) is env
            True
            >>> "step_count" in env.observation_keys
            True
        """
        self._check_new(transform, "append_transform")
        self._edit(lambda compose: compose.append(transform))
        return self

    def _check_new(self, transform: Any, method: str) -> None:
        if not isinstance(transform, Transform):
            raise TypeError(
                f"TransformedEnv.{method}: expected a Transform (got {type(transform).__name__})."
                " Wrap your function in a Transform subclass whose _call applies it."
            )

    def insert_transform(self, index: int, transform: Transform) -> TransformedEnv:
        """Inserts a transform before position ``index``, recomputes the specs, returns ``self``.

        Examples:
            >>> from tdrl.envs.transforms import InitTracker, StepCounter
            >>> from tdrl.testing import CountingEnv
            >>> env = TransformedEnv(CountingEnv(), StepCounter())
            >>> env.insert_transform(0, InitTracker()) is env
            True
            >>> [type(t).__name__ for t in env.transform]
            ['InitTracker', 'StepCounter']
        """
        self._check_new(transform, "insert_transform")
        self._edit(lambda compose: compose.insert(index, transform))
        return self

    def _owns(self, t: Transform) -> bool:
        return id(t) in self._attached_ids

    def _reset_masks(self, tensordict: TensorDictBase) -> list[torch.Tensor | None] | None:
        """The ``_reset`` masks of ``tensordict``, computed once per reset for every transform."""
        memo = self._mask_memo
        if memo is not None and memo[0] is tensordict:
            return memo[1]  # type: ignore[no-any-return]
        masks = self._reset_plan.masks(tensordict)
        # every group resets everywhere (e.g. a done single env): no transform needs a mask
        everywhere = masks is not None and all_true(masks)
        self._mask_memo = (tensordict, masks, {}, everywhere)
        return masks

    def _group_mask(
        self,
        tensordict: TensorDictBase,
        key: NestedKey,
        like: torch.Tensor,
        reset_key: NestedKey | None,
    ) -> torch.Tensor | None:
        """``group_mask`` for the transforms, memoised per reset (same group, ndim, device)."""
        masks = self._reset_masks(tensordict)
        if masks is None or self._mask_memo[3]:  # type: ignore[index]
            return None  # every entry resets: transforms skip their torch.where
        group = reset_key if reset_key is not None else self._reset_plan.owner(key)
        memo = self._mask_memo[2]  # type: ignore[index]
        slot = (group, like.ndim, like.device)
        if slot in memo:
            return memo[slot]  # type: ignore[no-any-return]
        found = group_mask(self, tensordict, key, like, reset_key, masks)
        if found is not None and all_true([found]):
            found = None
        memo[slot] = found
        return found

    def _rebuild(self) -> None:
        """Attaches every transform and recomputes the specs through them."""
        nodes = _nodes(self._transform)
        for node in nodes:
            owner = node.container
            if owner is not None and owner is not self:
                raise ValueError(
                    f"TransformedEnv: {type(node).__name__} already belongs to another "
                    "TransformedEnv (got a transform with a container; expected a free one). "
                    "Use a new instance or copy.deepcopy(transform)."
                )
        for old in self._attached:
            if not any(old is n for n in nodes):
                old._detach()
        self._attached = nodes
        self._attached_ids = {id(n) for n in nodes}
        for node in nodes:
            node._attach(self, None)
        self._flat = [n for n in nodes if not isinstance(n, Compose)]
        self._compute_specs()

    def _compute_specs(self) -> None:
        base = self.base_env
        specs: Specs = {k: getattr(base, f"full_{k}_spec").exclude() for k in SPEC_KINDS}
        stages = [specs]
        parents: list[EnvBase] = []
        for i, t in enumerate(self._flat):
            parent = base if i == 0 else EnvUpTo(self, i, specs)
            parents.append(parent)
            t._attach(self, parent)
            t._bind(parent)
            t._check_keys(parent)
            specs = self._transform_specs(t, specs)
            stages.append(specs)
        for node in self._attached:
            if isinstance(node, Compose):
                first = node.leaves()
                node._attach(self, first[0].parent if first else None)
        self._stages = stages
        self._parents = parents
        self._inverse = [t for t in self._flat if _is_inverse(t)]
        self._checked: dict[str, set[int]] = {"reset": set(), "step": set()}
        self._specs = dict(specs)
        device = specs["done"].device
        self.device = device if device is not None else base.device
        self._refresh_keys()
        self._reset_entries = list(dict.fromkeys(["_reset", *self.reset_keys]))
        self._same_actions = self._checks_cover_base()
        self._pass_keys: dict[int, list[NestedKey]] = {}
        self._hidden: dict[int, list[NestedKey]] = {}

    def _transform_specs(self, t: Transform, specs: Specs) -> Specs:
        """The specs after ``t``: its ``transform_output_spec`` and ``transform_input_spec``."""
        new: Specs = {}
        for hook, kinds in (
            ("transform_output_spec", ("observation", "reward", "done")),
            ("transform_input_spec", ("state", "action")),
        ):
            given = Composite(
                {f"full_{k}_spec": specs[k].exclude() for k in kinds}, shape=self.batch_size
            )
            got = getattr(t, hook)(given)
            for kind in kinds:
                out = got.get(f"full_{kind}_spec", None) if isinstance(got, Composite) else got
                if not isinstance(out, Composite):
                    raise TypeError(
                        f"{type(t).__name__}.{hook}: expected a Composite holding a Composite "
                        f"full_{kind}_spec back (got {type(out).__name__}). Return the (changed) "
                        f"spec you were given (transform_{kind}_spec too)."
                    )
                self._check_batch(kind, out)
                new[kind] = out
        return new

    def _checks_cover_base(self) -> Any:
        """The base env's action checks when this env's are the same (so the base env may
        skip its own; they are rebuilt, as a new list, whenever its specs change), else None.

        Same: no inverse transform, the same action entries, shapes and dtypes, no domain
        validation and a base env that steps with ``EnvBase.step``.
        """
        base = self.base_env
        same = (
            not self._inverse
            and type(base).step is EnvBase.step
            and not self.validate
            and not base.validate
            and self.batch_locked == base.batch_locked
            and self._action_checks == base._action_checks
        )
        return base._action_checks if same else None

    def _reset_input_keys(self, n: int) -> list[NestedKey]:
        """What the base env's reset gets: ``_reset`` entries, and the previous values of the
        base entries that none of the first ``n`` transforms writes (those are still in the
        base env's representation, so the base env's own partial-reset merge keeps them)."""
        keys = self._pass_keys.get(n)
        if keys is None:
            base = self.base_env
            written = {k for t in self._flat[:n] for k in t.out_keys}
            entries = [*base.observation_keys, *base.done_keys, *base.state_keys]
            keys = ["_reset", *base.reset_keys, *(k for k in entries if k not in written)]
            keys = list(dict.fromkeys(keys))
            self._pass_keys[n] = keys
        return keys

    def _set_full(self, kind: str, spec: TensorSpec) -> None:
        raise RuntimeError(
            f"TransformedEnv.full_{kind}_spec: the specs of a TransformedEnv are computed from "
            "the base env and the transforms (got an assignment; expected none). Set the spec "
            "on env.base_env, or add a transform that changes it."
        )

    # ------------------------------------------------------------------ running
    def reset(
        self,
        tensordict: TensorDictBase | None = None,
        *,
        set_state: bool | None = None,
        **kwargs: Any,
    ) -> TensorDictBase:
        """Resets the base env, then runs every transform's ``_reset`` (see ``EnvBase.reset``).

        The output is already the merged data of every member: the base env merged its own
        entries and each transform kept the rows that do not reset, so only the input's other
        entries (policy outputs, ...) are added to it. The base env checks its done leaves.
        ``set_state`` and other keyword arguments are those of ``EnvBase.reset``.

        Examples:
            >>> import torch
            >>> from tdrl.envs.transforms import StepCounter
            >>> from tdrl.testing import CountingEnv
            >>> env = TransformedEnv(CountingEnv(batch_size=(2,)), StepCounter())
            >>> td = env.step_mdp(env.rand_step(env.reset()))
            >>> td["_reset"] = torch.tensor([[True], [False]])
            >>> env.reset(td)["step_count"].flatten().tolist()
            [0, 1]
        """
        if kwargs or set_state:
            raise ValueError(
                f"TransformedEnv.reset: unsupported arguments (got "
                f"{sorted(kwargs) + (['set_state=True'] if set_state else [])}; expected "
                "tensordict and set_state=None/False). Put reset inputs in the tensordict."
            )
        if set_state is False and tensordict is not None:
            tensordict = tensordict.select(*self.reset_keys, "_reset", strict=False)
        n = len(self._flat)
        masks = self._reset_masks(tensordict) if tensordict is not None else None
        if masks is None:
            # A full reset hands the input to the base env, as EnvBase.reset does (TorchRL:
            # parameters, e.g. batched for a batch-unlocked env); the transforms reset fully.
            out = self._run_reset(None, n, given=tensordict)
            return self._carry_inputs(tensordict, out) if tensordict is not None else out
        out = self._run_reset(tensordict, n)
        kept = exclude_flat(tensordict, ["next", *self._reset_entries])  # type: ignore[arg-type]
        return update_flat(kept, out)

    def _reset(self, tensordict: TensorDictBase | None) -> TensorDictBase:
        return self._run_reset(tensordict, len(self._flat))

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        return self._run_step(tensordict, len(self._flat))

    def _run_reset(
        self, tensordict: TensorDictBase | None, n: int, given: TensorDictBase | None = None
    ) -> TensorDictBase:
        sub = None
        if tensordict is not None:
            sub = select_flat(tensordict, self._reset_input_keys(n))
        elif given is not None:
            sub = given.exclude("next")
        if sub is not None:
            base_device = self.base_env.device
            if self.device != base_device:
                sub = sub.to(base_device if base_device is not None else "cpu")
        out = self.base_env.reset(sub)
        try:
            for i in range(n):
                t = self._flat[i]
                if i in self._checked["reset"]:
                    out = t._reset(tensordict, out)
                    continue
                before = {k for k in out.keys(True, True)}
                out = t._reset(tensordict, out)
                self._check_output(t, "_reset", i, out, before, ("observation", "done"))
                self._checked["reset"].add(i)
        finally:
            self._mask_memo = None
        return out

    def _step_hidden_keys(self, n: int) -> list[NestedKey]:
        """Base entries that the first ``n`` transforms write (so the root holds them in the
        transformed form) and no inverse map restores: the base env's step does not get them."""
        keys = self._hidden.get(n)
        if keys is None:
            base = self.base_env
            written = {k for t in self._flat[:n] for k in t.out_keys}
            restored = {k for t in self._flat[:n] for k in t.in_keys_inv}
            entries = [*base.observation_keys, *base.done_keys, *base.state_keys]
            keys = [k for k in dict.fromkeys(entries) if k in written and k not in restored]
            self._hidden[n] = keys
        return keys

    def _run_step(self, tensordict: TensorDictBase, n: int) -> TensorDictBase:
        inner = tensordict
        inverse = self._inverse if n == len(self._flat) else self._inverse_up_to(n)
        if inverse:
            inner = tensordict.copy()
            for t in reversed(inverse):
                inner = t._inv_call(inner)
        # TorchRL: the transforms' _step get the root as the inverse maps left it
        root = inner
        hidden = self._step_hidden_keys(n)
        if hidden:
            inner = inner.exclude(*hidden)
        plain = type(tensordict) is TensorDict
        policy_next = tensordict._tensordict.get("next") if plain else tensordict.get("next", None)
        base = self.base_env
        if inner is tensordict and self._same_actions is base._action_checks:
            # step checked these very action entries against the same specs: the base env's
            # step without its check, and without setting "next" (this env's step sets it,
            # and the policy's entries under "next" are added below)
            nxt = base._step(inner)
            base._fill_done(nxt)
            if base.run_type_checks:
                base._type_check(nxt, ("observation", "reward", "done"), "step")
        else:
            nxt = base.step(inner).get("next")
        if isinstance(policy_next, TensorDictBase) and policy_next is not nxt:
            for key in policy_next.keys(True, True):
                if nxt.get(key, None) is None:
                    nxt.set(key, policy_next.get(key))
        checked = self._checked["step"]
        for i in range(n):
            t = self._flat[i]
            if i in checked:
                nxt = t._step(root, nxt)
                continue
            before = {k for k in nxt.keys(True, True)}
            nxt = t._step(root, nxt)
            self._check_output(t, "_step", i, nxt, before, ("observation", "reward", "done"))
            self._checked["step"].add(i)
        return nxt

    def _row_writer(self, nxt: TensorDictBase, root: TensorDictBase) -> TransformedRows | None:
        """Rows when the base env has them and every transform has a row form (see
        ``TransformedRows``)."""
        return TransformedRows.build(self, nxt, root)

    def _rows_possible(self) -> bool:
        return rows_possible(self)

    def _inverse_up_to(self, n: int) -> list[Transform]:
        return [t for t in self._flat[:n] if _is_inverse(t)]

    def _check_output(
        self,
        t: Transform,
        hook: str,
        i: int,
        data: TensorDictBase,
        before: set[NestedKey],
        kinds: tuple[str, ...],
    ) -> None:
        name = f"{type(t).__name__}.{hook}"
        if not isinstance(data, TensorDictBase):
            raise TypeError(f"{name}: expected a TensorDict back (got {type(data).__name__}).")
        stages = self._stages
        lead: tuple[int, ...] = ()
        if not self.batch_locked:  # batched data through a batch-unlocked env
            lead = tuple(data.batch_size[: data.batch_dims - len(self.batch_size)])
        check_transform_output(
            name, data, before, stages[i], stages[i + 1], kinds, t.out_keys, lead
        )

    # ------------------------------------------------------------------ misc API
    def set_seed(self, seed: int | None = None, static_seed: bool = False) -> int | None:
        """Seeds the base env and returns what its ``set_seed`` returns (TorchRL).

        ``static_seed`` goes to the base env: a batched base env then seeds every worker with
        ``seed`` instead of a chain of distinct seeds.

        Examples:
            >>> from tdrl.envs.batched import SerialEnv
            >>> from tdrl.testing import CountingEnv
            >>> env = TransformedEnv(SerialEnv(2, CountingEnv))
            >>> env.set_seed(7, static_seed=True), [e.seed for e in env.base_env.envs]
            (7, [7, 7])
        """
        return self.base_env.set_seed(seed, static_seed=static_seed)

    def _set_seed(self, seed: int | None) -> int | None:
        return self.base_env.set_seed(seed)

    def _to(self, device: torch.device) -> None:
        """Moves the base env and the transforms (TorchRL), then recomputes the specs."""
        self.base_env = self.base_env.to(device)
        self._transform.to(device)
        self._rebuild()

    def _close(self) -> None:
        self.base_env.close()

    # ------------------------------------------------------------------ nn.Module methods
    def _env_children(self) -> list[Any]:
        return [self.base_env, self._transform]

    def train(self, mode: bool = True) -> TransformedEnv:
        """Sets the transforms' training mode (TorchRL: the env and its base env keep theirs);
        returns ``self``. ``eval()`` is ``train(False)``.

        Examples:
            >>> from tdrl.envs.transforms import StepCounter
            >>> from tdrl.testing import CountingEnv
            >>> env = TransformedEnv(CountingEnv(), StepCounter())
            >>> env.transform.training, env.train().transform.training
            (False, True)
        """
        if not isinstance(mode, bool):
            raise ValueError(
                f"TransformedEnv.train: mode must be a bool (got {mode!r}; expected True or "
                "False). Call env.train() or env.eval()."
            )
        self._transform.train(mode)
        return self

    def state_dict(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """The transforms' state (running statistics, normalisation constants): the
        ``state_dict`` of ``env.transform`` (takes ``nn.Module.state_dict``'s arguments).

        As in TorchRL, the keys of a single transform are its own (``"loc"``), those of a
        Compose are prefixed (``"transforms.0.loc"``).

        Examples:
            >>> import torch
            >>> from tdrl.envs.transforms import Compose, Transform
            >>> from tdrl.testing import CountingEnv
            >>> class Shift(Transform):
            ...     def __init__(self):
            ...         super().__init__(in_keys="observation")
            ...         self.register_buffer("shift", torch.ones(1))
            ...     def _apply_transform(self, value):
            ...         return value + self.shift
            >>> dict(TransformedEnv(CountingEnv(), Shift()).state_dict())
            {'shift': tensor([1.])}
            >>> list(TransformedEnv(CountingEnv(), Compose(Shift())).state_dict())
            ['transforms.0.shift']
        """
        return self._transform.state_dict(*args, **kwargs)

    def load_state_dict(self, state_dict: Mapping[str, Any], strict: bool = True) -> Any:
        """Loads what :meth:`state_dict` returned into the transforms.

        Examples:
            >>> from tdrl.envs.transforms import VecNorm
            >>> from tdrl.testing import CountingEnv
            >>> a = TransformedEnv(CountingEnv(), VecNorm("observation", "n", decay=1.0))
            >>> _ = a.rollout(3)
            >>> b = TransformedEnv(CountingEnv(), VecNorm("observation", "n", decay=1.0))
            >>> _ = b.load_state_dict(a.state_dict())
            >>> b.transform.loc["observation"].tolist()
            [1.5]
        """
        return self._transform.load_state_dict(state_dict, strict=strict)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        for k in ("_stages", "_parents"):
            state.pop(k, None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._attached = []
        self._mask_memo = None
        self._rebuild()

    def __getattr__(self, name: str) -> Any:
        """Public attributes the TransformedEnv lacks come from the base env (TorchRL).

        Private names (``_x``) and dunders are never forwarded: they are implementation
        details of each env, and forwarding them would make a missing attribute of the
        TransformedEnv silently read the base env's.

        Examples:
            >>> from tdrl.testing import CountingEnv
            >>> TransformedEnv(CountingEnv(max_steps=7)).max_steps
            7
        """
        base = self.__dict__.get("base_env")
        if name.startswith("_") or base is None:
            raise AttributeError(
                f"{type(self).__name__!r} object has no attribute {name!r} (private names and "
                "dunders are not forwarded to the base env)"
            )
        try:
            return getattr(base, name)
        except AttributeError:
            raise AttributeError(
                f"TransformedEnv: neither the env nor its base env "
                f"{type(base).__name__} has an attribute {name!r}"
            ) from None

    def __repr__(self) -> str:
        inner = repr(self.base_env).replace("\n", "\n    ")
        names = ", ".join(type(t).__name__ for t in self._flat)
        return f"TransformedEnv(\n    env={inner},\n    transforms=[{names}])"
