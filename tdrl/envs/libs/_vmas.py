"""VmasWrapper and VmasEnv: VMAS's vectorised multi-agent scenarios as tdrl envs."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase

from tdrl.envs.core import EnvBase, MarlGroupMapType
from tdrl.envs.libs._action_check import first_outside
from tdrl.envs.libs._vmas_groups import GroupPlan, import_vmas, resolve_group_map
from tdrl.specs import Composite

__all__ = ["VmasEnv", "VmasWrapper"]

GroupMap = MarlGroupMapType | Mapping[str, Sequence[str]] | None

# EnvBase options a wrapper accepts besides device and batch_size.
_BASE_OPTIONS = (
    "run_type_checks",
    "allow_done_after_reset",
    "spec_locked",
    "auto_reset",
    "validate",
)
# Options of vmas.make_env that VmasEnv forwards there (every other keyword goes to the scenario).
_VMAS_OPTIONS = (
    "dict_spaces",
    "multidiscrete_actions",
    "clamp_actions",
    "grad_enabled",
    "terminated_truncated",
)


class _VmasScenarios:
    """``available_envs``: the names of VMAS's scenarios (vmas is imported on first access)."""

    def __get__(self, obj: Any, owner: Any) -> list[str]:
        vmas = import_vmas("VmasWrapper.available_envs")
        return [*vmas.scenarios, *vmas.mpe_scenarios, *vmas.debug_scenarios]


class VmasWrapper(EnvBase):
    """Wraps a VMAS env (``vmas.make_env(...)``) as a tdrl env of batch ``[num_envs]``.

    Agents are stored by group (``group_map``): the agents of group ``g`` share the entries

    - ``(g, "observation")``: ``[num_envs, n_g, ...]`` (a nested entry per key for dict
      observations), and ``(g, "info", key)``: every info value as float32 (``[num_envs, n_g,
      1]`` for a per-agent scalar), both in the observation spec;
    - ``(g, "action")``: ``Bounded`` for continuous actions; for discrete ones ``Categorical``
      (``[num_envs, n_g]``, int64) with ``categorical_actions=True``, else int64 ``OneHot``
      (``[num_envs, n_g, n]``); multi-discrete actions give ``MultiCategorical`` / ``MultiOneHot``;
    - ``(g, "reward")``: ``[num_envs, n_g, 1]``.

    The done entries are shared by all agents, at the root: ``done``, ``terminated`` (the
    scenario ended) and ``truncated`` (VMAS's ``max_steps`` horizon was reached), ``[num_envs,
    1]``. TorchRL's VMAS wrapper has no ``truncated`` and reports the horizon as terminated; tdrl
    keeps the two apart so that value targets bootstrap at the horizon.

    ``reset(td)`` with a root ``"_reset"`` mask resets only those envs (VMAS's ``reset_at`` for
    each, or one vectorised reset when every env is masked) and keeps every other value.
    ``set_seed(s)`` seeds VMAS's own random state (``s % 2**32``; VMAS keeps it apart from
    torch's global generator, shared by every VMAS env of the process), as TorchRL's does:
    nothing is reset, the next reset draws from the seeded state. ``set_seed(None)`` is VMAS's
    ``seed(None)``, i.e. seed 0 (as in TorchRL, and as VMAS builds an env given no seed).

    Args:
        env: a ``vmas.simulator.environment.Environment``.
        categorical_actions: discrete actions as indices instead of one-hot vectors.
        group_map: ``None`` (TorchRL's default: agents named ``<prefix>_<number>`` grouped by
            prefix, a lone ``"agent"`` group called ``"agents"``, else one group ``"agents"``),
            a :class:`~tdrl.envs.MarlGroupMapType`, or a dict ``{group: [agent names]}``
            (checked by :func:`~tdrl.envs.check_marl_grouping`). Agents of one group must have
            the same spaces.
        **kwargs: ``device`` (moves the VMAS env there), ``batch_size`` (only ``[num_envs]``),
            the other :class:`~tdrl.envs.EnvBase` options, and TorchRL's ``from_pixels`` /
            ``pixels_only`` (only False).

    Examples:
        >>> import vmas
        >>> env = VmasWrapper(vmas.make_env("navigation", num_envs=4, seed=0))
        >>> env.group_map
        {'agents': ['agent_0', 'agent_1', 'agent_2', 'agent_3']}
        >>> env.rollout(3)["next", "agents", "reward"].shape
        torch.Size([4, 3, 4, 1])
    """

    libname = "vmas"
    git_url = "https://github.com/proroklab/VectorizedMultiAgentSimulator"
    available_envs = _VmasScenarios()

    def __init__(
        self,
        env: Any = None,
        categorical_actions: bool = True,
        group_map: GroupMap = None,
        **kwargs: Any,
    ) -> None:
        owner = f"{type(self).__name__}.__init__"
        vmas = import_vmas(owner)
        if not isinstance(env, vmas.simulator.environment.Environment):
            raise TypeError(
                f"{owner}: expected a VMAS env (got {type(env).__name__}; expected "
                "vmas.simulator.environment.Environment). Pass VmasWrapper(vmas.make_env(...)) "
                "or build one with VmasEnv(scenario, num_envs=...)."
            )
        device = kwargs.pop("device", None)
        batch = (int(env.num_envs),)
        batch_size = kwargs.pop("batch_size", None)
        if batch_size is not None and tuple(torch.Size(batch_size)) != batch:
            raise ValueError(
                f"{owner}: batch_size differs from the VMAS env's (got {tuple(batch_size)}; "
                f"expected {batch}, its num_envs). Drop batch_size."
            )
        _refuse_options(owner, kwargs)
        super().__init__(device=env.device, batch_size=batch, **kwargs)
        self.env = env
        self.lib = vmas
        self.categorical_actions = bool(categorical_actions)
        names = [agent.name for agent in env.agents]
        self.group_map = resolve_group_map(group_map, names)
        self._build_plans(names)
        if device is not None:
            self.to(device)

    def _build_plans(self, names: list[str]) -> None:
        env, dev = self.env, self.device
        self._names = names
        obs, infos = self._listed(
            *env.get_from_scenario(
                get_observations=True, get_infos=True, get_rewards=False, get_dones=False
            )
        )
        position = {name: i for i, name in enumerate(names)}
        self._plans = []
        for group, members in self.group_map.items():
            idx = [position[a] for a in members]
            spaces = [env.get_agent_action_space(env.agents[i]) for i in idx]
            self._plans.append(
                GroupPlan(
                    group,
                    members,
                    idx,
                    spaces,
                    [obs[i] for i in idx],
                    [infos[i] for i in idx],
                    env.num_envs,
                    dev,
                    self.categorical_actions,
                )
            )
        b = self.batch_size
        obs_spec = Composite(shape=b, device=dev)
        act_spec = Composite(shape=b, device=dev)
        rew_spec = Composite(shape=b, device=dev)
        for plan in self._plans:
            obs_spec[plan.name], act_spec[plan.name], rew_spec[plan.name] = plan.specs()
        self.full_observation_spec = obs_spec
        self.full_action_spec = act_spec
        self.full_reward_spec = rew_spec
        self.full_done_spec = self.default_done_spec()

    # ------------------------------------------------------------------ TorchRL attributes
    @property
    def scenario(self) -> Any:
        """The VMAS scenario (``BaseScenario``) the env runs."""
        return self.env.scenario

    @property
    def num_envs(self) -> int:
        """Number of vectorised envs (the batch size)."""
        return int(self.env.num_envs)

    @property
    def n_agents(self) -> int:
        """Number of agents per env."""
        return len(self._names)

    @property
    def agent_names(self) -> list[str]:
        """Agent names, in VMAS's order."""
        return list(self._names)

    @property
    def agent_names_to_indices_map(self) -> dict[str, int]:
        """Each agent's position in VMAS's agent list."""
        return {name: i for i, name in enumerate(self._names)}

    @property
    def continuous_actions(self) -> bool:
        """Whether the VMAS env takes continuous actions."""
        return bool(self.env.continuous_actions)

    @property
    def max_steps(self) -> int | None:
        """VMAS's horizon (``None``: none), reported as ``truncated``."""
        return self.env.max_steps  # type: ignore[no-any-return]

    @property
    def het_specs(self) -> bool:
        """Whether a group mixes agents of different specs (never: such groups are refused)."""
        return False

    @property
    def het_specs_map(self) -> dict[str, bool]:
        """``het_specs`` per group."""
        return {group: False for group in self.group_map}

    # ------------------------------------------------------------------ conversion
    def _listed(self, *values: Any) -> list[Any]:
        """Per-agent lists, whether VMAS returned lists or dicts by agent name (dict_spaces)."""
        if not self.env.dict_spaces:
            return list(values)
        names = self._names
        return [[v[n] for n in names] if isinstance(v, Mapping) else v for v in values]

    def _output(
        self, obs: Any, infos: Any, rews: Any, flags: tuple[torch.Tensor, ...]
    ) -> TensorDictBase:
        data: dict[str, Any] = {plan.name: plan.read(obs, infos, rews) for plan in self._plans}
        data["done"], data["terminated"], data["truncated"] = flags
        return TensorDict._new_unsafe(data, batch_size=self.batch_size, device=self.device)

    def _reset_flags(self) -> tuple[torch.Tensor, ...]:
        false = torch.zeros((*self.batch_size, 1), dtype=torch.bool, device=self.device)
        return false, false.clone(), false.clone()

    def _step_flags(self, out: Sequence[Any]) -> tuple[torch.Tensor, ...]:
        env = self.env
        if getattr(env, "terminated_truncated", False):  # an option older VMAS lacks
            term, trunc = out[2], out[3]
        elif env.max_steps is None:
            term = out[2]
            trunc = torch.zeros_like(term)
        else:
            trunc = env.steps >= env.max_steps
            # VMAS merged the two; only at the horizon is the scenario asked again.
            term = env.scenario.done().clone() if bool(trunc.any()) else out[2]
        term = term.reshape(-1, 1).to(torch.bool)
        trunc = trunc.reshape(-1, 1).to(torch.bool)
        return term | trunc, term, trunc

    # ------------------------------------------------------------------ hooks
    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        actions: list[Any] = [None] * len(self._names)
        for plan in self._plans:
            plan.split_action(tensordict, actions)
        try:
            out = self.env.step(actions)
        except AssertionError as err:
            raise self._refused(tensordict, err) from err
        obs, rews, infos = self._listed(out[0], out[1], out[-1])
        return self._output(obs, infos, rews, self._step_flags(out))

    def _refused(self, tensordict: TensorDictBase, err: AssertionError) -> ValueError:
        """The error for actions VMAS refused, naming the key, agent and value outside the
        action spec (VMAS's own message names neither)."""
        name = type(self).__name__
        for plan in self._plans:
            found = first_outside(
                self.full_action_spec[plan.action_key], tensordict.get(plan.action_key)
            )
            if found is not None:
                (*rows, agent), value, rule = found
                row = rows[0] if len(rows) == 1 else tuple(rows)
                return ValueError(
                    f"{name}.step: the action of agent {plan.agents[agent]!r} (env {row}) is "
                    f"outside the action spec (got {value!r} at key {plan.action_key!r}; "
                    f"expected {rule}). Keep actions within env.full_action_spec, or build the "
                    "VMAS env with clamp_actions=True."
                )
        return ValueError(
            f"{name}.step: VMAS refused the actions (got AssertionError: {err}; expected "
            "actions inside env.action_spec). Keep actions in their bounds, or build the VMAS "
            "env with clamp_actions=True."
        )

    def _reset(self, tensordict: TensorDictBase | None) -> TensorDictBase:
        mask = None if tensordict is None else tensordict.get("_reset", None)
        env = self.env
        rows = None if mask is None else mask.reshape(-1)
        if rows is not None and not bool(rows.any()):
            return self._zeros()  # nothing to reset: EnvBase keeps every old value
        if rows is None or bool(rows.all()):
            obs, infos = env.reset(return_observations=True, return_info=True)
        else:
            # VMAS resets one env per call; the observations are read once afterwards.
            for i in rows.nonzero().flatten().tolist():
                env.reset_at(i, return_observations=False)
            obs, infos = env.get_from_scenario(
                get_observations=True, get_infos=True, get_rewards=False, get_dones=False
            )
        obs, infos = self._listed(obs, infos)
        return self._output(obs, infos, None, self._reset_flags())

    def _zeros(self) -> TensorDictBase:
        out = self.full_observation_spec.zero()
        out["done"], out["terminated"], out["truncated"] = self._reset_flags()
        return out

    def _set_seed(self, seed: int | None) -> None:
        # None goes to VMAS as it is (its seed 0, TorchRL's set_seed(None)); numpy, which VMAS
        # seeds too, takes seeds below 2**32.
        self.env.seed(None if seed is None else seed % 2**32)

    def _to(self, device: torch.device) -> None:
        self.env.to(device)
        for plan in self._plans:
            plan.device = device

    def render(self, *args: Any, **kwargs: Any) -> Any:
        """Renders the VMAS env: ``self.env.render(*args, **kwargs)``, as TorchRL forwards it.

        Examples:
            >>> from tdrl.envs.libs.vmas import VmasEnv
            >>> env = VmasEnv("balance", num_envs=1, continuous_actions=True, max_steps=5)
            >>> _ = env.reset()
            >>> env.render(mode="rgb_array").shape[-1]
            3
        """
        return self.env.render(*args, **kwargs)

    def _close(self) -> None:
        viewer = getattr(self.env, "viewer", None)
        if viewer is not None:
            viewer.close()


def _refuse_options(owner: str, kwargs: dict[str, Any]) -> None:
    """Refuses TorchRL's pixel options at non-default values and unknown keywords."""
    for name in ("from_pixels", "pixels_only"):
        if kwargs.pop(name, False):
            raise ValueError(
                f"{owner}: {name}=True is not supported (got True; expected False). Render "
                "frames with env.env.render(mode='rgb_array') instead."
            )
    unknown = sorted(set(kwargs) - set(_BASE_OPTIONS))
    if unknown:
        raise TypeError(
            f"{owner}: unexpected keyword arguments (got {unknown}; expected device, "
            f"batch_size, from_pixels, pixels_only or {', '.join(_BASE_OPTIONS)}). Pass "
            "scenario options to vmas.make_env, or use VmasEnv."
        )


class VmasEnv(VmasWrapper):
    """Builds a VMAS scenario (``vmas.make_env``) and wraps it (see :class:`VmasWrapper`).

    Args:
        scenario: a scenario name (one of ``VmasEnv.available_envs``) or a ``BaseScenario``.
        num_envs: number of vectorised envs (the batch size).
        continuous_actions: continuous (``Bounded``) or discrete actions.
        max_steps: VMAS's horizon; reaching it sets ``truncated`` (``None``: no horizon).
        categorical_actions: discrete actions as indices instead of one-hot vectors.
        seed: seeds VMAS when the env is built.
        group_map: see :class:`VmasWrapper`.
        scenario_kwargs: options of the scenario (e.g. ``{"n_agents": 3}``).
        **kwargs: ``device`` and the other :class:`VmasWrapper` options; ``vmas.make_env``'s
            own options (``dict_spaces``, ``multidiscrete_actions``, ``clamp_actions``,
            ``grad_enabled``, ``terminated_truncated``); every other keyword is a scenario
            option too, as in TorchRL (giving one both ways raises).

    Examples:
        >>> env = VmasEnv("simple_adversary", num_envs=2, seed=0, max_steps=5)
        >>> env.group_map
        {'adversary': ['adversary_0'], 'agent': ['agent_0', 'agent_1']}
        >>> data = env.rollout(10, break_when_any_done=False)
        >>> data["next", "agent", "observation"].shape, data["next", "truncated"][0, 4].item()
        (torch.Size([2, 10, 2, 10]), True)
    """

    def __init__(
        self,
        scenario: Any,
        *,
        num_envs: int,
        continuous_actions: bool = True,
        max_steps: int | None = None,
        categorical_actions: bool = True,
        seed: int | None = None,
        group_map: GroupMap = None,
        scenario_kwargs: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        owner = f"{type(self).__name__}.__init__"
        vmas = import_vmas(owner)
        if isinstance(num_envs, bool) or not isinstance(num_envs, int) or num_envs < 1:
            raise ValueError(
                f"{owner}: num_envs must be a positive int (got {num_envs!r}; expected >= 1). "
                "Pass e.g. num_envs=32."
            )
        wrapper_keys = ("device", "batch_size", "from_pixels", "pixels_only", *_BASE_OPTIONS)
        wrapper_kwargs = {k: kwargs.pop(k) for k in wrapper_keys if k in kwargs}
        vmas_kwargs = {k: kwargs.pop(k) for k in _VMAS_OPTIONS if k in kwargs}
        options = dict(scenario_kwargs or {})
        twice = sorted(set(options) & set(kwargs))
        if twice:
            raise ValueError(
                f"{owner}: scenario options given twice (got {twice} in scenario_kwargs and as "
                "keywords; expected each once). Keep one of them."
            )
        options.update(kwargs)
        device = wrapper_kwargs.get("device") or "cpu"
        try:
            env = vmas.make_env(
                scenario,
                num_envs=num_envs,
                device=device,
                continuous_actions=continuous_actions,
                max_steps=max_steps,
                seed=seed,
                **vmas_kwargs,
                **options,
            )
        except AssertionError as err:
            raise ValueError(
                f"{owner}: VMAS refused to build the scenario (got AssertionError: {err}; "
                "expected a name of VmasEnv.available_envs or a BaseScenario, with valid "
                "options). Fix the scenario or its options."
            ) from err
        self.scenario_name = scenario if isinstance(scenario, str) else type(scenario).__name__
        self.scenario_kwargs = options
        super().__init__(env, categorical_actions, group_map, **wrapper_kwargs)
