"""PettingZooWrapper and PettingZooEnv: PettingZoo multi-agent envs (parallel and AEC) as tdrl envs."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from tensordict import TensorDictBase

from tdrl.envs.core import EnvBase, MarlGroupMapType, check_marl_grouping, group_by_name
from tdrl.envs.libs._gym_spaces import Codec, make_codec
from tdrl.envs.libs._pettingzoo_aec import AECStepper
from tdrl.envs.libs._pettingzoo_groups import AgentGroup, GroupLayout, import_pettingzoo
from tdrl.envs.libs._pettingzoo_parallel import ParallelStepper
from tdrl.envs.libs._pettingzoo_tasks import available_tasks, make_task_env

__all__ = ["PettingZooEnv", "PettingZooWrapper"]

_BASE_KWARGS = ("device", "batch_size", "allow_done_after_reset", "run_type_checks", "validate")


class _AvailableEnvs:
    """``PettingZooWrapper.available_envs``: the task names :class:`PettingZooEnv` accepts."""

    def __get__(self, obj: Any, owner: Any) -> list[str]:
        return available_tasks()


class PettingZooWrapper(EnvBase):
    """Wraps a PettingZoo ``ParallelEnv`` or ``AECEnv``; agents are stacked by group.

    TorchRL's arguments and layout. Agents are grouped by ``group_map``: by default, for a
    parallel env one group per agent type (``adversary_0, agent_0, agent_1`` ->
    ``{"adversary": [...], "agent": [...]}``, see :func:`~tdrl.envs.core.group_by_name`), for an
    AEC env one group per agent, as TorchRL does. The agents of a group must share their spaces.
    For each group ``g`` of ``n`` agents (batch ``()``):

    - ``(g, "observation")``: ``[n, *obs]`` (a Dict space gives a Composite of its keys;
      spaces map as in :func:`~tdrl.envs.libs.space_to_spec`, discrete observations one-hot).
    - ``(g, "action")``: ``Categorical`` ``[n]`` for a Discrete space (int64 ``OneHot`` ``[n, k]``
      with ``categorical_actions=False``), ``Bounded`` ``[n, *shape]`` for a Box.
    - ``(g, "reward")``: ``[n, 1]`` float32; ``(g, "done"/"terminated"/"truncated")``: ``[n, 1]``.
    - ``(g, "action_mask")``: ``[n, k]`` bool, when the env gives an ``"action_mask"`` (in a Dict
      observation, as classic games do, or in the info dict). The action spec's mask follows it,
      so ``env.rand_action`` and masked policies only pick legal actions.
    - ``(g, "mask")``: ``[n]`` bool with ``use_mask=True``: which agents act at the next step.
    - ``(g, "info", key)``: the numeric entries of the agents' reset info dicts (float32, int64
      or bool, ``[n, *shape]``); entries missing at a step are zeros.
    - ``"state"`` (root) with ``return_state=True``: ``env.state()``.
    - root ``"done"``/``"terminated"``/``"truncated"``: ``[1]``. With ``done_on_any`` they are
      true as soon as one agent's are (TorchRL's default for parallel envs); otherwise the root
      is done when every agent is, terminated when every agent terminated, truncated when done
      and not terminated (the default for AEC envs).

    Agents that leave (PettingZoo drops them from ``env.agents``) or are not in the episode
    yet: their observation, reward and info are zeros, their ``done``, ``terminated`` and
    ``truncated`` are true (as TorchRL's), their ``mask`` false, their ``action_mask`` all true,
    and their actions are not passed to the env. On the step an agent leaves it gets its final
    observation, reward and flags. A parallel step passes the actions of the agents in
    ``env.agents``. An AEC step passes the action of ``env.agent_selection`` only (the rows of
    the others are ignored; ``mask`` tells which agent acts, so ``use_mask=True`` is required),
    observes every agent (``env.observe``) and reads ``env.rewards`` (the reward of that step, for
    every agent: their sum is what ``last()`` accumulates); when the episode goes on, selected
    done agents are then removed with ``env.step(None)``.

    A PettingZoo env resets whole: a root ``"_reset"`` (or a reset without ``_reset`` entries)
    resets it. A reset that only asks for agents that have already left (what
    ``step_and_maybe_reset`` and collectors do while the episode goes on) changes nothing: they
    stay done until the whole env resets (the env is built with ``allow_done_after_reset``
    when agents can leave mid-episode, i.e. without ``done_on_any``). Asking to reset an agent
    still in the episode raises. Stepping after the episode ended raises: reset first.

    Seeding is TorchRL's: ``set_seed(s)`` resets the PettingZoo env with ``env.reset(seed=s)``
    at once (the data of that reset is dropped; a step may follow it), and ``seed=s`` makes the
    reset the wrapper does when it is built a seeded one. The next ``reset`` (a rollout's first)
    continues from the seeded generator: it gives what a second ``reset()`` of the raw env gives
    after ``reset(seed=s)``. ``set_seed`` returns the next seed of the chain (see
    :meth:`~tdrl.envs.core.EnvBase.set_seed`).

    Args:
        env: a ``pettingzoo.ParallelEnv`` or ``pettingzoo.AECEnv``.
        return_state: add the global ``"state"`` (``env.state()``).
        group_map: a ``MarlGroupMapType`` or ``{"group": ["agent", ...]}``.
        use_mask: add ``(g, "mask")`` (required for AEC envs).
        categorical_actions: discrete actions as indices (else int64 one-hot).
        seed: seed of the reset done when the wrapper is built (TorchRL's ``seed``).
        done_on_any: root done when any agent is done (``None``: True for parallel envs,
            False for AEC envs).
        **kwargs: ``device``, ``allow_done_after_reset``, ``run_type_checks``, ``validate``
            (see :class:`~tdrl.envs.core.EnvBase`) and ``batch_size`` (only ``None`` or ``()``).

    Examples:
        >>> from mpe2 import simple_adversary_v3
        >>> env = PettingZooWrapper(simple_adversary_v3.parallel_env(max_cycles=5), seed=0)
        >>> env.group_map
        {'adversary': ['adversary_0'], 'agent': ['agent_0', 'agent_1']}
        >>> data = env.rollout(10)
        >>> data["next", "agent", "observation"].shape, data["next", "done"].nonzero().tolist()
        (torch.Size([5, 2, 10]), [[4, 0]])
        >>> raw = simple_adversary_v3.parallel_env(max_cycles=5)
        >>> _ = raw.reset(seed=3)  # what set_seed(3) does at once
        >>> obs, _ = raw.reset()  # the next reset continues from the seeded generator
        >>> _ = env.set_seed(3)
        >>> bool((env.reset()["agent", "observation"][0].numpy() == obs["agent_0"]).all())
        True
    """

    available_envs = _AvailableEnvs()

    def __init__(
        self,
        env: Any = None,
        return_state: bool = False,
        group_map: MarlGroupMapType | Mapping[str, Sequence[str]] | None = None,
        use_mask: bool = False,
        categorical_actions: bool = True,
        seed: int | None = None,
        done_on_any: bool | None = None,
        **kwargs: Any,
    ) -> None:
        name = type(self).__name__
        base = _base_kwargs(name, kwargs)
        if env is None:
            raise TypeError(
                f"{name}.__init__: no env to wrap (got env=None; expected a pettingzoo "
                "ParallelEnv or AECEnv). Pass PettingZooWrapper(simple_spread_v3.parallel_env())."
            )
        pz = import_pettingzoo()
        if not isinstance(env, (pz.ParallelEnv, pz.AECEnv)):
            raise TypeError(
                f"{name}.__init__: not a PettingZoo env (got {type(env).__name__}; expected a "
                "pettingzoo.ParallelEnv or pettingzoo.AECEnv). Wrap gymnasium envs with GymWrapper."
            )
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or seed < 0):
            raise ValueError(
                f"{name}.__init__: invalid seed (got {seed!r}; expected a non-negative int or "
                "None). Pass e.g. seed=0."
            )
        self.parallel = isinstance(env, pz.ParallelEnv)
        if not self.parallel and not use_mask:
            raise ValueError(
                f"{name}.__init__: AEC envs need use_mask=True (got use_mask=False; expected "
                "True: one agent acts per step and (group, 'mask') tells which). Pass "
                "use_mask=True, or wrap the env's parallel version."
            )
        self.done_on_any = self.parallel if done_on_any is None else bool(done_on_any)
        # agents can leave while the episode goes on: they stay done across partial resets
        base["allow_done_after_reset"] = base.get("allow_done_after_reset") or not self.done_on_any
        super().__init__(**base)
        self.env = env
        self.return_state = bool(return_state)
        self.use_mask = bool(use_mask)
        self.categorical_actions = bool(categorical_actions)
        self.seed: int | None = seed
        self._last: TensorDictBase | None = None
        self._over = True
        self._build(group_map, seed)

    def _build(self, group_map: Any, seed: int | None) -> None:
        env, dev = self.env, self.device
        # one reset (seeded with ``seed``, as TorchRL's) tells which info entries (and action
        # masks in infos) exist
        if self.parallel:
            _, infos = env.reset(seed=seed)
        else:
            env.reset(seed=seed)
            infos = dict(env.infos)
        agents = [str(a) for a in env.possible_agents]
        self.group_map = self._group_map(group_map, agents)
        groups = [
            AgentGroup(
                g,
                members,
                env,
                infos,
                categorical_actions=self.categorical_actions,
                use_mask=self.use_mask,
                device=dev,
            )
            for g, members in self.group_map.items()
        ]
        state = self._state_codec() if self.return_state else None
        self._layout = GroupLayout(
            groups, done_on_any=self.done_on_any, state_codec=state, device=dev
        )
        specs = self._layout.specs()
        self.full_observation_spec = specs["observation"]
        self.full_action_spec = specs["action"]
        self.full_reward_spec = specs["reward"]
        self.full_done_spec = specs["done"]
        self._layout.bind(self.full_action_spec)
        stepper = ParallelStepper if self.parallel else AECStepper
        self._stepper = stepper(env, self._layout, self.return_state)

    def _group_map(self, group_map: Any, agents: list[str]) -> dict[str, list[str]]:
        if group_map is None:
            if self.parallel:
                found = group_by_name(agents)
            else:
                found = MarlGroupMapType.ONE_GROUP_PER_AGENT.get_group_map(agents)
        elif isinstance(group_map, MarlGroupMapType):
            found = group_map.get_group_map(agents)
        else:
            check_marl_grouping(group_map, agents)
            found = {str(g): [str(a) for a in members] for g, members in group_map.items()}
        if self.return_state and "state" in found:
            raise ValueError(
                f"{type(self).__name__}.__init__: a group is named 'state' (got groups "
                f"{sorted(found)}; expected no group named like the root 'state' entry of "
                "return_state=True). Rename the group in group_map."
            )
        return found

    def _state_codec(self) -> Codec:
        from gymnasium import spaces

        space = getattr(self.env, "state_space", None)
        if space is None:
            try:
                value = np.asarray(self.env.state())
            except NotImplementedError as err:
                raise ValueError(
                    f"{type(self).__name__}.__init__: return_state=True but the env has no "
                    f"state (got NotImplementedError from env.state(); expected an array). "
                    "Build the wrapper with return_state=False."
                ) from err
            space = spaces.Box(-np.inf, np.inf, value.shape, value.dtype)
        return make_codec(space, (), self.device, False)

    def maybe_reset(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Resets the env when its episode is over; while it goes on, agents that left stay
        done and there is nothing to reset (``tensordict`` is returned as it is: the partial
        reset of those agents would write the values they already hold)."""
        if not self._over:
            return tensordict
        return super().maybe_reset(tensordict)

    # ------------------------------------------------------------------ hooks
    def _reset(self, tensordict: TensorDictBase | None) -> TensorDictBase:
        if tensordict is not None and self._last is not None and not self._full(tensordict):
            return self._last.select(*self.observation_keys, *self.done_keys).clone()
        out = self._stepper.reset(None)
        self._last, self._over = out, False
        return out

    def _full(self, tensordict: TensorDictBase) -> bool:
        """Whether the ``_reset`` entries ask for a reset of the whole env (see the class doc)."""
        root = tensordict.get("_reset", None)
        flags = [(g, tensordict.get((g.name, "_reset"), None)) for g in self._layout.groups]
        if root is None and all(f is None for _, f in flags):
            return True
        if root is not None and bool(root.any()):
            return True
        asked = [
            (g, i)
            for g, f in flags
            if f is not None
            for i in f.reshape(g.n).nonzero().flatten().tolist()
        ]
        if not asked:
            return False
        last = self._last
        live = [g.agents[i] for g, i in asked if not bool(last.get((g.name, "done"))[i].any())]  # type: ignore[union-attr]
        if live or self._over:
            state = f"{live} are still in the episode" if live else "the episode is over"
            raise ValueError(
                f"{type(self).__name__}.reset: a PettingZoo env cannot reset single agents (got "
                f"_reset true for agents {[g.agents[i] for g, i in asked]} and {state}; expected "
                "only agents that have left, while the episode goes on). Set the root '_reset' "
                "to reset the whole env."
            )
        return False

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        if self._over:
            raise RuntimeError(
                f"{type(self).__name__}.step: the episode is over or has not started (got a "
                "step after the root 'done' or before any reset; expected reset() first). Call "
                "env.reset(), or use step_and_maybe_reset / rollout."
            )
        out = self._stepper.step(tensordict)
        self._last, self._over = out, self._layout.done
        return out

    def _set_seed(self, seed: int | None) -> None:
        # TorchRL resets the env with the seed right away (its data is dropped): the next reset
        # continues from the seeded generator, and a step may follow (the episode has begun).
        self.seed = seed
        self._last, self._over = self._stepper.reset(seed), False

    def _close(self) -> None:
        self.env.close()


class PettingZooEnv(PettingZooWrapper):
    """Builds a PettingZoo env from its task name and wraps it (see :class:`PettingZooWrapper`).

    ``task`` is the env module's name, as TorchRL takes it (``"tictactoe_v3"``,
    ``"multiwalker_v9"``; a registry id such as ``"tictactoe-v3"`` works too), optionally
    prefixed by its family (``"classic/tictactoe_v3"``). MPE envs live in the ``mpe2`` package
    now (pettingzoo's own ``mpe`` only raises): ``mpe`` tasks such as ``"simple_spread_v3"`` are
    ``mpe2.<task>.parallel_env(**kwargs)`` (or ``.env(**kwargs)`` for AEC). The other families
    are built by pettingzoo's registry, ``pettingzoo.make("parallel" or "aec", id, **kwargs)``
    (pettingzoo>=1.27; older versions: the module's ``parallel_env``/``env``). Families are
    searched in the order mpe, classic, butterfly, sisl, atari. ``PettingZooEnv.available_envs``
    lists the names.

    Args:
        task: the task name.
        parallel: build the parallel version (else the AEC one, which needs ``use_mask=True``).
        return_state, group_map, use_mask, categorical_actions, seed, done_on_any: see
            :class:`PettingZooWrapper`.
        **kwargs: ``device``, ``allow_done_after_reset``, ``run_type_checks``, ``validate`` and
            ``batch_size`` go to the wrapper; everything else to the env (``N=2``,
            ``max_cycles=25``, ``continuous_actions=True``, ...).

    Examples:
        >>> env = PettingZooEnv("simple_spread_v3", parallel=True, N=2, seed=0)
        >>> env.group_map, env.full_action_spec["agent", "action"].shape
        ({'agent': ['agent_0', 'agent_1']}, torch.Size([2]))
        >>> game = PettingZooEnv("tictactoe_v3", parallel=False, use_mask=True)
        >>> sorted(game.observation_spec["player_1"].keys())
        ['action_mask', 'mask', 'observation']
    """

    def __init__(
        self,
        task: str,
        parallel: bool,
        return_state: bool = False,
        group_map: MarlGroupMapType | Mapping[str, Sequence[str]] | None = None,
        use_mask: bool = False,
        categorical_actions: bool = True,
        seed: int | None = None,
        done_on_any: bool | None = None,
        **kwargs: Any,
    ) -> None:
        base = {k: kwargs.pop(k) for k in _BASE_KWARGS if k in kwargs}
        env = make_task_env(task, parallel, kwargs)
        self.task = task
        try:
            super().__init__(
                env,
                return_state,
                group_map,
                use_mask,
                categorical_actions,
                seed,
                done_on_any,
                **base,
            )
        except BaseException:
            env.close()
            raise


def _base_kwargs(name: str, kwargs: dict[str, Any]) -> dict[str, Any]:
    unknown = sorted(set(kwargs) - set(_BASE_KWARGS))
    if unknown:
        raise TypeError(
            f"{name}.__init__: unexpected keyword arguments (got {unknown}; expected some of "
            f"{list(_BASE_KWARGS)}). Pass env options to the PettingZoo env itself."
        )
    batch = kwargs.pop("batch_size", None)
    if batch is not None and tuple(batch) != ():
        raise ValueError(
            f"{name}.__init__: a PettingZoo env is one env (got batch_size={tuple(batch)}; "
            "expected None or ()). Batch several envs with SerialEnv or ParallelEnv."
        )
    return dict(kwargs)
