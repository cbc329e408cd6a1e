"""EnvBase: the template-method base class of every tdrl environment."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase

from tdrl.envs.core._checks import EnvChecks
from tdrl.envs.core._fast import all_true, lookup, put, set_next, truthy, update_flat
from tdrl.envs.core._keys import key_tuple
from tdrl.envs.core._module_api import ModuleMethods
from tdrl.envs.core._reset import ResetPlan
from tdrl.envs.core._rollout import (
    action_policy,
    check_rollout_options,
    play,
    play_until_all_done,
    rollout_policy,
    set_truncated_last,
    stop_mode,
)
from tdrl.envs.core._row_run import RowWriter
from tdrl.envs.core._seed import next_seed
from tdrl.envs.core._spec_owner import SpecOwner
from tdrl.envs.core._step_mdp import StepMDP

__all__ = ["EnvBase"]

Policy = Callable[[TensorDictBase], TensorDictBase]


class EnvBase(SpecOwner, EnvChecks, ModuleMethods):
    """Base class of environments: subclasses write ``_reset``, ``_step`` and ``_set_seed``.

    A subclass calls ``super().__init__(batch_size=..., device=...)``, sets its specs, and writes:

    - ``_reset(td)``: returns a TensorDict (batch ``env.batch_size``) with the observations, done
      leaves and state after a reset. ``td`` is ``None`` for a full reset, else it holds the
      ``(*prefix, "_reset")`` masks; the env must reset at least where they are true (it may compute
      values everywhere: the base class keeps the old values where no reset was asked). Envs with
      internal state must only change it where ``_reset`` is true.
    - ``_step(td)``: reads the actions (and state) from ``td`` and returns the next TensorDict with
      observations, rewards and done leaves (``terminated``/``done`` may be given alone).
    - ``_set_seed(seed)``: seeds the env's random generators (``seed`` may be ``None``: seed
      from fresh entropy).

    The public methods validate, fill missing done leaves, handle partial resets and write the
    ``"next"`` entry. Done semantics: ``terminated`` is a true end (do not bootstrap),
    ``truncated`` a cut (bootstrap), ``done`` either.

    Args:
        device: device of the data and specs (``None``: cpu).
        batch_size: leading dims of every entry (``None`` or ``()`` for an unbatched env).
        run_type_checks: check every ``reset``/``step`` output against the observation,
            reward and done specs (``SpecError`` naming the key), as TorchRL does.
        allow_done_after_reset: do not raise when a done leaf is still true after a reset.
        spec_locked: accepted for TorchRL compatibility; tdrl never locks specs (they are
            replaced, not edited, so there is nothing to protect).
        auto_reset: only ``False`` (reset done envs with ``step_and_maybe_reset``).
        validate: also check action bounds/domains in ``step`` (shape and dtype are always
            checked).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tdrl.specs import Bounded, Unbounded
        >>> class Drift(EnvBase):
        ...     def __init__(self):
        ...         super().__init__(batch_size=(2,))
        ...         self.observation_spec = Unbounded(shape=(2, 1))
        ...         self.action_spec = Bounded(-1.0, 1.0, shape=(2, 1))
        ...         self.reward_spec = Unbounded(shape=(2, 1))
        ...         self.done_spec = self.default_done_spec()
        ...     def _reset(self, td):
        ...         return self.full_observation_spec.zero()
        ...     def _step(self, td):
        ...         obs = td["observation"] + td["action"]
        ...         return TensorDict({"observation": obs, "reward": -obs.abs(),
        ...                            "done": obs.abs() > 3}, batch_size=self.batch_size)
        ...     def _set_seed(self, seed):
        ...         pass
        >>> env = Drift()
        >>> env.rollout(5).batch_size
        torch.Size([2, 5])
    """

    batch_locked: bool = True
    """Whether the data must have exactly ``batch_size`` (an env with ``batch_size=()`` may set
    it False, e.g. as a class attribute, to accept data of any batch: the tutorial-style
    stateless env whose parameters come batched in the ``reset`` input)."""

    def __init__(
        self,
        *,
        device: torch.device | str | None = None,
        batch_size: Sequence[int] | torch.Size | None = None,
        run_type_checks: bool = False,
        allow_done_after_reset: bool = False,
        spec_locked: bool = True,
        auto_reset: bool = False,
        validate: bool = False,
    ) -> None:
        if auto_reset:
            raise ValueError(
                f"{type(self).__name__}.__init__: auto_reset=True is not supported (got True; "
                "expected False). Reset done envs with step_and_maybe_reset or a collector."
            )
        self.run_type_checks = bool(run_type_checks)
        self.spec_locked = bool(spec_locked)
        self.batch_size = torch.Size(() if batch_size is None else batch_size)
        self.device = torch.device(device) if device is not None else None
        self.allow_done_after_reset = allow_done_after_reset
        self.validate = validate
        self._closed = False
        self._init_specs()

    # ------------------------------------------------------------------ hooks
    def _reset(self, tensordict: TensorDictBase | None) -> TensorDictBase:
        raise NotImplementedError(f"{type(self).__name__}._reset is not implemented.")

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        raise NotImplementedError(f"{type(self).__name__}._step is not implemented.")

    def _set_seed(self, seed: int | None) -> int | None:
        raise NotImplementedError(f"{type(self).__name__}._set_seed is not implemented.")

    def _close(self) -> None:
        """Hook: release resources (called once by ``close``)."""

    def _row_writer(self, nxt: TensorDictBase, root: TensorDictBase) -> RowWriter | None:
        """Hook: a way to step this env straight into rows of preallocated buffers (the rows of
        SerialEnv/ParallelEnv sub-envs, the steps of a rollout or a collector batch).

        ``nxt`` holds one buffer per ``"next"`` entry that ``step`` returns and ``root`` one per
        root entry that ``reset`` returns, each with one leading dim (the rows) before the
        env's batch dims. An env may return a :class:`RowWriter` whose ``step(td, row,
        reset_row)`` reads the actions from ``td``, writes every ``"next"`` entry into row
        ``row`` of ``nxt`` in place and returns whether the step ended the episode; when it
        did and ``reset_row`` is not None, it also resets and writes every root entry into row
        ``reset_row`` of ``root``; its ``reset(row)`` resets the env into row ``row`` of
        ``root`` (for writers that wrap it, e.g. a TransformedEnv's). It must give exactly the
        data of ``step`` (and of the reset that ``maybe_reset`` runs). ``None`` (the default)
        makes the callers use the public methods.
        """
        return None

    def _rows_possible(self) -> bool:
        """Hook: a cheap test of whether ``_row_writer`` may return a writer (False skips the
        set-up of rows). The default: whether the class overrides ``_row_writer``."""
        return type(self)._row_writer is not EnvBase._row_writer

    def _on_specs_changed(self) -> None:
        self._step_mdp = StepMDP(
            reward_keys=self.reward_keys, done_keys=self.done_keys, action_keys=self.action_keys
        )
        # step_and_maybe_reset's next root keeps the actions (TorchRL's env._step_mdp)
        self._step_mdp_keep = StepMDP(
            reward_keys=self.reward_keys,
            done_keys=self.done_keys,
            action_keys=self.action_keys,
            exclude_action=False,
        )
        done = self.full_done_spec
        shapes = [done[g.done].shape for g in self.done_groups]
        self._reset_plan = ResetPlan(self.done_groups, len(self.batch_size), shapes)
        self._action_checks = [
            (k, self.full_action_spec[k].shape, self.full_action_spec[k].dtype)
            for k in self.action_keys
        ]
        self._action_paths = [(key_tuple(k), s, d) for k, s, d in self._action_checks]
        self._done_fill = [
            (g.done, g.terminated, g.truncated, done[g.done]) for g in self.done_groups
        ]
        self._done_leaf_paths = [key_tuple(g.done) for g in self.done_groups]
        self._done_paths = [
            key_tuple(k)
            for g in self.done_groups
            for k in (g.done, g.terminated, g.truncated)
            if k is not None
        ]

    # ------------------------------------------------------------------ public API
    def set_seed(self, seed: int | None = None, static_seed: bool = False) -> int | None:
        """Seeds the env and returns the next seed of the chain, for the next env to use.

        As in TorchRL, ``_set_seed(seed)`` seeds the env and the next seed is derived from
        ``seed`` by a deterministic hash (``static_seed=True`` returns ``seed`` itself), whatever
        ``_set_seed`` returns; ``None`` seeds from fresh entropy and returns ``None``. Only a
        wrapper whose ``_set_seed`` returns an int other than its input (it already chained the
        seed through the envs it wraps) continues the chain from that value. Batched envs seed
        worker ``i + 1`` with the seed that follows worker ``i``'s: distinct, reproducible seeds.

        Args:
            seed: the seed (a non-negative int), or ``None``.
            static_seed: return ``seed`` unchanged instead of the next seed.

        Examples:
            >>> from tdrl.testing import CountingEnv
            >>> env = CountingEnv()
            >>> nxt = env.set_seed(3)
            >>> env.seed, nxt != 3, nxt == CountingEnv().set_seed(3), env.set_seed(3, True)
            (3, True, True, 3)
        """
        if seed is not None:
            if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
                raise ValueError(
                    f"{type(self).__name__}.set_seed: invalid seed (got {seed!r}; expected a "
                    "non-negative int or None). Pass e.g. env.set_seed(0)."
                )
            seed = int(seed)
        following = self._set_seed(seed)
        if seed is None or static_seed:
            return seed
        if isinstance(following, int) and not isinstance(following, bool) and following != seed:
            return int(following)
        return next_seed(seed)

    def reset(
        self,
        tensordict: TensorDictBase | None = None,
        *,
        set_state: bool | None = None,
        **kwargs: Any,
    ) -> TensorDictBase:
        """Resets the env, fully or partially.

        ``tensordict`` is passed to ``_reset`` (which may read parameters or states from it);
        with ``set_state=False`` only its ``_reset`` entries are (TorchRL: ignore the states
        it holds). ``set_state=True`` and other keyword arguments are not supported (they
        raise).
        Without ``_reset`` entries in ``tensordict`` every member resets. With them, only the true
        entries of each done group are reset (a root ``"_reset"`` applies to every group) and every
        other value of the input is kept. ``_reset`` entries are removed from the output.

        Raises:
            RuntimeError: a done leaf is still true where a reset was asked (unless the env was
                built with ``allow_done_after_reset=True``).

        Examples:
            >>> from tdrl.testing import CountingEnv
            >>> env = CountingEnv(batch_size=(2,))
            >>> sorted(env.reset().keys())
            ['done', 'observation', 'terminated', 'truncated']
        """
        if kwargs or set_state:
            raise ValueError(
                f"{type(self).__name__}.reset: unsupported arguments (got "
                f"{sorted(kwargs) + (['set_state=True'] if set_state else [])}; expected "
                "tensordict and set_state=None/False). Put reset inputs in the tensordict."
            )
        if tensordict is not None:
            self._check_batch_of(tensordict, "reset")
        masks = self._reset_plan.masks(tensordict)
        given = tensordict
        if set_state is False and tensordict is not None:
            given = tensordict.select(*self.reset_keys, "_reset", strict=False)
        out = self._reset(given)
        if self.run_type_checks:
            self._type_check(out, ("observation", "done"), "reset")
        self._fill_done(out)
        if masks is None:
            if tensordict is not None:
                out = self._carry_inputs(tensordict, out)
            self._check_done_after_reset(out, None)
            return out
        base = self._reset_plan.base(tensordict)  # type: ignore[arg-type]
        merged = self._merge_reset(base, out, masks)
        self._check_done_after_reset(merged, masks)
        return merged

    def _merge_reset(
        self, old: TensorDictBase, new: TensorDictBase, masks: list[torch.Tensor | None]
    ) -> TensorDictBase:
        """Hook: the data after a partial reset, from the previous data and the reset output.

        ``old`` is the reset input without ``"next"`` and ``_reset`` entries, ``new`` what
        ``_reset`` returned. The default keeps ``old`` wherever a done group does not reset
        (see ``ResetPlan.merge``). An env whose ``_reset`` already returns the merged full-batch
        data (``TransformedEnv``) overrides it to only add ``new`` to ``old``.
        """
        if all_true(masks):  # e.g. a single env that is done: the reset output wins everywhere
            return update_flat(old, new)
        return self._reset_plan.merge(old, new, masks)

    def _carry_inputs(self, tensordict: TensorDictBase, out: TensorDictBase) -> TensorDictBase:
        extra = tensordict.exclude("next", *out.keys(True, True))
        ResetPlan.strip(extra, self.done_groups)
        if extra.is_empty():
            return out
        extra.update(out)
        return extra

    def step(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Runs one step: checks the actions, calls ``_step`` and writes the result under ``"next"``.

        Entries already present under ``"next"`` that the env does not produce (a recurrent
        policy's next hidden state, for instance) are kept.

        Returns:
            ``tensordict`` itself, holding ``"next"``.

        As in TorchRL, an action of another dtype is taken when it casts exactly (a float 0/1
        one-hot, a float or int32 index, a float64 continuous action): the env steps with it
        cast to its spec's dtype, and ``tensordict`` keeps what was written.

        Raises:
            KeyError: an action key is missing. SpecError: an action has the wrong shape, or a
            dtype it cannot be cast from exactly (or is out of its domain when the env
            validates). The env stays usable.

        Examples:
            >>> from tdrl.testing import CountingEnv
            >>> env = CountingEnv()
            >>> td = env.step(env.rand_action(env.reset()))
            >>> td["next", "observation"]
            tensor([1.])
        """
        return self._step_checked(tensordict, self._check_actions(tensordict))

    def _step_checked(
        self, tensordict: TensorDictBase, inner: TensorDictBase | None = None
    ) -> TensorDictBase:
        """``step`` after the action check: ``_step`` (on ``inner``, the data with the actions
        cast to their specs' dtypes, when given), the done leaves, ``"next"``."""
        plain = type(tensordict) is TensorDict
        preset = tensordict._tensordict.get("next") if plain else tensordict.get("next", None)
        nxt = self._step(tensordict if inner is None else inner)
        self._fill_done(nxt)
        if self.run_type_checks:
            self._type_check(nxt, ("observation", "reward", "done"), "step")
        if preset is not None:
            # Entries the policy already wrote under "next" (e.g. recurrent states) are kept.
            for key in preset.keys(True, True):
                if nxt.get(key, None) is None:
                    nxt.set(key, preset.get(key))
        set_next(tensordict, nxt, plain)
        return tensordict

    def step_mdp(self, next_tensordict: TensorDictBase) -> TensorDictBase:
        """The next root of a stepped TensorDict, with this env's precomputed key plan.

        Examples:
            >>> from tdrl.testing import CountingEnv
            >>> env = CountingEnv()
            >>> nxt = env.step_mdp(env.rand_step(env.reset()))
            >>> "reward" in nxt.keys(), "action" in nxt.keys()
            (False, False)
        """
        return self._step_mdp(next_tensordict)

    def any_done(self, tensordict: TensorDictBase) -> bool:
        """Whether any done leaf of ``tensordict`` is true (reads the root, not ``"next"``)."""
        for g, path in zip(self.done_groups, self._done_leaf_paths):
            if truthy(self._read_done(tensordict, g, path)):
                return True
        return False

    @staticmethod
    def _read_done(tensordict: TensorDictBase, group: Any, path: tuple[str, ...]) -> Any:
        done = lookup(tensordict, path)
        return tensordict.get(group.done) if done is None else done  # get raises the KeyError

    def step_and_maybe_reset(
        self, tensordict: TensorDictBase
    ) -> tuple[TensorDictBase, TensorDictBase]:
        """Steps, builds the next root, and partially resets the done groups that are done.

        Returns:
            ``(tensordict_with_next, next_root)``: the stepped data (its ``"next"`` keeps the
            terminal observation) and the root to feed to the policy at the next step. As in
            TorchRL, that root keeps the actions of the step (``step_mdp`` drops them).

        Examples:
            >>> from tdrl.testing import CountingEnv
            >>> env = CountingEnv(max_steps=1)
            >>> td, root = env.step_and_maybe_reset(env.rand_action(env.reset()))
            >>> bool(td["next", "done"]), bool(root["done"]), root["observation"].item()
            (True, False, 0.0)
        """
        tensordict = self.step(tensordict)
        root = self._step_mdp_keep(tensordict)
        return tensordict, self.maybe_reset(root)

    def maybe_reset(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Partially resets the groups of ``tensordict`` whose ``done`` is true (no-op if none
        is)."""
        any_done = False
        for g, path in zip(self.done_groups, self._done_leaf_paths):
            done = self._read_done(tensordict, g, path)
            if truthy(done):
                any_done = True
                put(tensordict, g.reset_path, done)
        if not any_done:
            return tensordict
        return self.reset(tensordict)

    def rand_action(self, tensordict: TensorDictBase | None = None) -> TensorDictBase:
        """Writes random actions drawn from the action spec (masks honoured) into ``tensordict``.

        Examples:
            >>> from tdrl.testing import CountingEnv
            >>> CountingEnv(batch_size=(3,)).rand_action()["action"].shape
            torch.Size([3, 1])
        """
        shape: tuple[int, ...] = ()
        if tensordict is not None and not self.batch_locked and not self.batch_size:
            shape = tuple(tensordict.batch_size)  # a batch-unlocked env takes the data's batch
        action = self.full_action_spec.rand(shape)
        if tensordict is None:
            return action
        return tensordict.update(action)

    def rand_step(self, tensordict: TensorDictBase | None = None) -> TensorDictBase:
        """``step`` with random actions (resets first when ``tensordict`` is None)."""
        if tensordict is None:
            tensordict = self.reset()
        return self.step(self.rand_action(tensordict))

    def fake_tensordict(self) -> TensorDictBase:
        """Zeros shaped like one step of data: root entries and ``"next"``, from the specs.

        Examples:
            >>> from tdrl.testing import CountingEnv
            >>> sorted(CountingEnv().fake_tensordict().keys())
            ['action', 'done', 'next', 'observation', 'terminated', 'truncated']
        """
        root = self.full_observation_spec.zero()
        root.update(self.full_state_spec.zero())
        root.update(self.full_done_spec.zero())
        nxt = self.full_observation_spec.zero()
        nxt.update(self.full_state_spec.zero())
        nxt.update(self.full_reward_spec.zero())
        nxt.update(self.full_done_spec.zero())
        root.update(self.full_action_spec.zero())
        root.set("next", nxt)
        return root

    def rollout(
        self,
        max_steps: int,
        policy: Policy | None = None,
        callback: Callable[..., Any] | None = None,
        *,
        actions: Iterable[Any] | None = None,
        auto_reset: bool = True,
        auto_cast_to_device: bool = False,
        break_when_any_done: bool | None = None,
        break_when_all_done: bool | None = None,
        return_contiguous: bool | None = False,
        tensordict: TensorDictBase | None = None,
        set_truncated: bool = False,
        out: Any = None,
        trust_policy: bool = False,
        storing_device: Any = None,
        set_state: bool | None = None,
    ) -> TensorDictBase:
        """Plays up to ``max_steps`` steps and returns them stacked with time as the last batch dim.

        TorchRL's arguments and semantics. The result is always a contiguous TensorDict
        (``return_contiguous`` only chooses a layout in TorchRL; the values are the same), and
        ``trust_policy`` has no effect (tdrl never wraps the policy in a module).

        Args:
            max_steps: number of steps.
            policy: callable writing the actions into a TensorDict; random actions when None.
                As in TorchRL, what it returns updates its input, so it may also return a new
                TensorDict holding only its outputs.
            callback: called as ``callback(env, td)`` with the next root after each step but
                the last.
            actions: precomputed actions written under the first action key instead of a
                policy (a sized iterable also bounds the number of steps).
            auto_reset: reset before the first step. Else ``tensordict`` is the start, and its
                done groups that are done are reset first (``maybe_reset``).
            break_when_any_done: stop after the first step where any done leaf is true
                (default, unless ``break_when_all_done``). With False, done groups are
                partially reset and the rollout goes on.
            break_when_all_done: as in TorchRL, nothing is reset and the rollout stops after
                the step where every member has been done; from its first done on, a member's
                rows repeat its last step. Unlike TorchRL, which steps only the members not
                done yet where the env supports partial steps, every member is stepped.
            tensordict: the start data (given to ``reset``; required when ``auto_reset`` is
                False).
            set_truncated: mark the last step truncated (and done).
            set_state: passed to ``reset`` (see there).
            auto_cast_to_device: as in TorchRL, move the data to the device of the policy's
                first parameter before the policy, and back to the env's device before the
                step (a policy without parameters gets the data with its device cleared). A
                no-op when both are the same device.
            out, storing_device: only the defaults are supported; other values raise
                ``ValueError``.

        Returns:
            A TensorDict of batch ``[*env.batch_size, T]``.

        Examples:
            >>> from tdrl.testing import CountingEnv
            >>> CountingEnv(batch_size=(4,), max_steps=3).rollout(10).batch_size
            torch.Size([4, 3])
        """
        check_rollout_options(self, out=out, storing_device=storing_device)
        stop, every = stop_mode(self, break_when_any_done, break_when_all_done)
        if max_steps < 1:
            raise ValueError(
                f"{type(self).__name__}.rollout: max_steps must be at least 1 (got {max_steps!r};"
                " expected a positive number of steps). Pass max_steps >= 1."
            )
        if actions is not None:
            if policy is not None:
                raise ValueError(
                    f"{type(self).__name__}.rollout: both policy and actions were given (got "
                    "two sources of actions; expected one). Pass either of them."
                )
            if hasattr(actions, "__len__"):
                max_steps = min(max_steps, len(actions))  # type: ignore[arg-type]
            policy = action_policy(self, actions)
        elif policy is not None:
            policy = rollout_policy(self, policy, auto_cast_to_device)
        if auto_reset:
            td = (
                self.reset(tensordict)
                if set_state is None
                else self.reset(tensordict, set_state=set_state)
            )
        elif tensordict is None:
            raise ValueError(
                f"{type(self).__name__}.rollout: auto_reset=False needs a start tensordict "
                "(got None; expected the output of env.reset()). Pass tensordict=..."
            )
        else:
            td = self.maybe_reset(tensordict)
        act = policy if policy is not None else self.rand_action
        if every:
            data = play_until_all_done(self, td, max_steps, act, callback)
        else:
            data = play(self, td, max_steps, act, stop, callback)
        if set_truncated:
            set_truncated_last(self, data)
        return data

    def to(self, device: torch.device | str | int) -> EnvBase:
        """Moves the env to ``device`` (its specs, and its data through ``_to``); returns ``self``.

        As in TorchRL, ``env.to(device)`` returns the env itself. The specs move here; the
        env's own tensors (state, constants, generators) move in the ``_to(device)`` hook, which
        envs that can move implement (the built-in envs, ``TransformedEnv``). An env without it
        raises ``NotImplementedError`` instead of producing data on the old device.

        Examples:
            >>> from tdrl.envs.builtin import PendulumV1Env
            >>> env = PendulumV1Env(batch_size=(2,))
            >>> env.to("cpu") is env, env.rollout(3).batch_size
            (True, torch.Size([2, 3]))
        """
        target = torch.device(device)
        if target.type == "cuda" and target.index is None:
            target = torch.device("cuda", torch.cuda.current_device())
        if target == (self.device if self.device is not None else torch.device("cpu")):
            return self
        self._to(target)
        self.device = target
        self._specs = {kind: spec.to(target) for kind, spec in self._specs.items()}
        self._refresh_keys()
        return self

    def _to(self, device: torch.device) -> None:
        """Hook: move the env's own tensors to ``device`` (the specs move in ``to``)."""
        raise NotImplementedError(
            f"{type(self).__name__}.to: this env cannot move to another device (got "
            f"{device}; expected its device {self.device or 'cpu'}). Build the env on that "
            "device (device=...), or implement _to(device) to move its tensors."
        )

    def append_transform(self, transform: Any) -> EnvBase:
        """A ``TransformedEnv`` of this env with ``transform`` (TorchRL); ``self`` is unchanged.

        The transform builds the TransformedEnv (``tdrl.envs.transforms`` sits above this
        layer, so the env cannot name it): any tdrl ``Transform`` or ``Compose`` works.

        Raises:
            TypeError: ``transform`` is not a tdrl Transform (plain callables are not wrapped).

        Examples:
            >>> from tdrl.envs.transforms import StepCounter
            >>> from tdrl.testing import CountingEnv
            >>> env = CountingEnv().append_transform(StepCounter(max_steps=2))
            >>> type(env).__name__, env.rollout(5)["next", "step_count"].flatten().tolist()
            ('TransformedEnv', [1, 2])
        """
        wrap = getattr(transform, "_wrap_env", None)
        if wrap is None:
            raise TypeError(
                f"{type(self).__name__}.append_transform: expected a tdrl Transform (got "
                f"{type(transform).__name__}). Wrap a plain function in a Transform subclass "
                "whose _call applies it."
            )
        return wrap(self)  # type: ignore[no-any-return]

    # ------------------------------------------------------------------ lifecycle
    def close(self, *, raise_if_closed: bool = True) -> None:
        """Releases the env's resources; calling it again does nothing.

        Args:
            raise_if_closed: TorchRL's argument; its base ``close`` never raises either, and
                neither does tdrl's (closing is idempotent whatever the value).
        """
        if self._closed:
            return
        self._closed = True
        self._close()

    @property
    def is_closed(self) -> bool:
        """Whether ``close`` has run."""
        return self._closed

    def __enter__(self) -> EnvBase:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(batch_size={tuple(self.batch_size)}, device={self.device}, "
            f"action_keys={self.action_keys}, reward_keys={self.reward_keys}, "
            f"done_keys={self.done_keys})"
        )
