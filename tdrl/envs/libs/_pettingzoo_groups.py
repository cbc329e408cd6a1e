"""PettingZoo agents in groups: the specs of a group and the numpy->torch conversion of its values.

The agents of a group share one node of the data, stacked along an agent dim in the order of the
group map: ``(group, "observation")`` is ``[n, *obs_shape]``, ``(group, "reward")`` ``[n, 1]``.
Every agent of a group must have the same observation and action spaces.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Mapping, Sequence
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase

from tdrl.envs.libs._action_check import ActionCheck
from tdrl.envs.libs._gym_spaces import Codec, make_codec, torch_dtype
from tdrl.specs import Categorical, Composite, TensorSpec, Unbounded

__all__ = ["AgentGroup", "GroupLayout", "Values", "flag_spec", "import_pettingzoo"]

Values = Mapping[str, Any]
"""Per-agent values of one kind (observations, infos, ...), keyed by agent name."""


def import_pettingzoo() -> Any:
    """Imports pettingzoo, with an actionable error when it is missing."""
    try:
        import pettingzoo
    except ImportError as err:  # pragma: no cover - pettingzoo is a test dependency
        raise ImportError(
            f"PettingZooWrapper.__init__: pettingzoo cannot be imported (got {err}; expected "
            "pettingzoo>=1.24). Install it with `pip install tdrl[pettingzoo]`."
        ) from err
    return pettingzoo


def flag_spec(shape: tuple[int, ...], device: torch.device | None) -> Categorical:
    """A boolean flag entry (done leaves, masks), as TorchRL declares them."""
    return Categorical(2, shape=shape, dtype=torch.bool, device=device)


def _zero(space: Any) -> Any:
    """The value stored for an agent the env does not report (decodes to zeros)."""
    from gymnasium import spaces

    if isinstance(space, spaces.Dict):
        return {k: _zero(s) for k, s in space.spaces.items()}
    if isinstance(space, spaces.Tuple):
        return tuple(_zero(s) for s in space.spaces)
    if isinstance(space, spaces.Discrete):
        return int(space.start)
    if isinstance(space, spaces.MultiDiscrete):
        return np.array(space.start, dtype=np.int64)
    return np.zeros(space.shape, dtype=space.dtype)


def _stacker(space: Any) -> Callable[[list[Any]], Any]:
    """Stacks a list of agents' values of ``space`` into one value with a leading agent dim."""
    from gymnasium import spaces

    if isinstance(space, spaces.Dict):
        kids = {k: _stacker(s) for k, s in space.spaces.items()}
        return lambda values: {k: f([v[k] for v in values]) for k, f in kids.items()}
    if isinstance(space, spaces.Tuple):
        parts = [_stacker(s) for s in space.spaces]
        return lambda values: tuple(f([v[i] for v in values]) for i, f in enumerate(parts))
    return np.stack


def _row(value: Any, index: int) -> Any:
    """Agent ``index``'s action out of an encoded group action (arrays, dicts or tuples)."""
    if isinstance(value, dict):
        return {k: _row(v, index) for k, v in value.items()}
    if isinstance(value, tuple):
        return tuple(_row(v, index) for v in value)
    return value[index]


def _info_plan(probe: Values, n: int) -> list[tuple[str, np.dtype, tuple[int, ...]]]:
    """The numeric entries of an agent's info dict: ``(key, numpy dtype, value shape)``."""
    plan = []
    for key, value in probe.items():
        if key == "action_mask":
            continue
        array = np.asarray(value)
        kind = array.dtype.kind
        if kind not in "biuf":
            continue  # strings, dicts and objects have no tensor form
        dtype = {"b": np.bool_, "f": np.float32}.get(kind, np.int64)
        plan.append((str(key), np.dtype(dtype), tuple(array.shape)))
    return plan


class AgentGroup:
    """One group of agents: its specs and the conversion of its agents' values to tensors.

    Args:
        name: the group name (the node of the data).
        agents: the agents of the group, in data order.
        env: the PettingZoo env (``observation_space(agent)``/``action_space(agent)``).
        infos: the info dicts of a first reset (the numeric entries become
            ``(group, "info", key)``; ``"action_mask"`` becomes ``(group, "action_mask")``).
        categorical_actions: discrete actions as indices (else int64 one-hot).
        use_mask: add ``(group, "mask")``.
        device: device of the specs.
    """

    def __init__(
        self,
        name: str,
        agents: Sequence[str],
        env: Any,
        infos: Values,
        *,
        categorical_actions: bool,
        use_mask: bool,
        device: torch.device | None,
    ) -> None:
        from gymnasium import spaces

        self.name = name
        self.agents = list(agents)
        self.n = n = len(self.agents)
        obs_space = self._same(env, "observation_space")
        act_space = self._same(env, "action_space")
        self.mask_shape: tuple[int, ...] | None = None
        self.mask_in_obs = isinstance(obs_space, spaces.Dict) and "action_mask" in obs_space.spaces
        if self.mask_in_obs:
            self.mask_shape = tuple(obs_space["action_mask"].shape)
            rest = {k: s for k, s in obs_space.spaces.items() if k != "action_mask"}
            obs_space = spaces.Dict(rest)
        first_info = infos.get(self.agents[0]) or {}
        if self.mask_shape is None and "action_mask" in first_info:
            self.mask_shape = tuple(np.asarray(first_info["action_mask"]).shape)
        self.obs_codec = make_codec(obs_space, (n,), device, False)
        self.act_codec = make_codec(act_space, (n,), device, categorical_actions)
        self._check = ActionCheck(act_space, "PettingZooWrapper", (name, "action"))
        self._discrete = isinstance(act_space, spaces.Discrete)
        self._obs_zero = _zero(obs_space)
        self._stack = _stacker(obs_space)
        self.use_mask = use_mask
        self.info_plan = _info_plan(first_info, n)
        self.device = device
        self.action_key = (name, "action")

    def _same(self, env: Any, method: str) -> Any:
        found = [getattr(env, method)(a) for a in self.agents]
        for agent, space in zip(self.agents[1:], found[1:]):
            if space != found[0]:
                raise ValueError(
                    f"PettingZooWrapper.__init__: the agents of group {self.name!r} have different "
                    f"{method.replace('_', ' ')}s (got {found[0]} for {self.agents[0]!r} and "
                    f"{space} for {agent!r}; expected one space per group). Pass a group_map that "
                    "separates them, e.g. MarlGroupMapType.ONE_GROUP_PER_AGENT."
                )
        return found[0]

    # ------------------------------------------------------------------ specs
    def observation_spec(self) -> Composite:
        """``observation`` (+ ``action_mask``, ``mask``, ``info``) of shape ``[n]``."""
        n, dev = self.n, self.device
        spec = Composite(observation=self.obs_codec.spec, shape=(n,), device=dev)
        if self.mask_shape is not None:
            spec["action_mask"] = flag_spec((n, *self.mask_shape), dev)
        if self.use_mask:
            spec["mask"] = flag_spec((n,), dev)
        if self.info_plan:
            info: dict[str, TensorSpec] = {
                key: Unbounded(shape=(n, *shape), dtype=torch_dtype(dt), device=dev)
                for key, dt, shape in self.info_plan
            }
            spec["info"] = Composite(info, shape=(n,), device=dev)
        return spec

    def action_spec(self) -> Composite:
        return Composite(action=self.act_codec.spec, shape=(self.n,), device=self.device)

    def reward_spec(self) -> Composite:
        reward = Unbounded(shape=(self.n, 1), device=self.device)
        return Composite(reward=reward, shape=(self.n,), device=self.device)

    def done_spec(self) -> Composite:
        leaves = {
            k: flag_spec((self.n, 1), self.device) for k in ("done", "terminated", "truncated")
        }
        return Composite(leaves, shape=(self.n,), device=self.device)

    # ------------------------------------------------------------------ conversion
    def actions(self, action: torch.Tensor | TensorDictBase, acting: Container[str]) -> list[Any]:
        """The per-agent values PettingZoo expects, from the group's action entry.

        Raises:
            ValueError: the action of an agent of ``acting`` is outside its action space.
        """
        encoded = self.act_codec.encode(action)
        self._check(encoded, self.agents, acting)
        if self._discrete:
            return encoded.tolist()  # type: ignore[no-any-return]
        if isinstance(encoded, np.ndarray):
            encoded = np.array(encoded)  # the env may keep the array: never alias the caller's
            return list(encoded)
        return [_row(encoded, i) for i in range(self.n)]

    def entries(self, obs: Values, infos: Values, acting: Sequence[bool]) -> dict[str, Any]:
        """Observation, action mask, mask and info entries; zeros for unreported agents."""
        values = [obs.get(a, None) for a in self.agents]
        stacked = self._stack([self._obs_zero if v is None else v for v in values])
        out: dict[str, Any] = {"observation": self.obs_codec.decode(stacked)}
        if self.mask_shape is not None:
            out["action_mask"] = self._action_mask(values, infos, acting)
        if self.use_mask:
            out["mask"] = torch.from_numpy(np.array(acting, dtype=bool))
        if self.info_plan:
            out["info"] = self._infos(infos)
        return out

    def _action_mask(self, obs: list[Any], infos: Values, acting: Sequence[bool]) -> torch.Tensor:
        # Agents that do not act next may take any action (it is ignored): all true, as TorchRL.
        mask = np.ones((self.n, *(self.mask_shape or ())), dtype=np.bool_)
        for i, agent in enumerate(self.agents):
            if not acting[i]:
                continue
            source = obs[i] if self.mask_in_obs else infos.get(agent)
            if source is not None and "action_mask" in source:
                mask[i] = np.asarray(source["action_mask"]) != 0
        return torch.from_numpy(mask)

    def _infos(self, infos: Values) -> TensorDictBase:
        data = {}
        for key, dtype, shape in self.info_plan:
            array = np.zeros((self.n, *shape), dtype=dtype)
            for i, agent in enumerate(self.agents):
                value = (infos.get(agent) or {}).get(key)
                if value is not None:
                    array[i] = value
            data[key] = torch.from_numpy(array)
        return TensorDict._new_unsafe(data, batch_size=(self.n,))

    def flags(self, terms: Values, truncs: Values) -> tuple[list[bool], list[bool]]:
        """``terminated``/``truncated`` of every agent; unreported agents: true."""
        term = [bool(terms.get(a, True)) for a in self.agents]
        return term, [bool(truncs.get(a, True)) for a in self.agents]

    def rewards(self, rewards: Values) -> torch.Tensor:
        """``[n, 1]`` float32 rewards; agents without a reward get 0."""
        values = [rewards.get(a, 0.0) for a in self.agents]
        return torch.from_numpy(np.array(values, dtype=np.float32).reshape(self.n, 1))


class GroupLayout:
    """All groups of an env: their full specs and the TensorDicts of a reset or a step.

    Root ``done``/``terminated``/``truncated`` aggregate the agents' flags: with ``done_on_any``
    ``any`` of each; otherwise the root is done when every agent is done, terminated when every
    agent terminated, and truncated when it is done without being terminated.
    """

    def __init__(
        self,
        groups: Sequence[AgentGroup],
        *,
        done_on_any: bool,
        state_codec: Codec | None,
        device: torch.device | None,
    ) -> None:
        self.groups = list(groups)
        self.done_on_any = done_on_any
        self.state_codec = state_codec
        self.device = device
        self.where = {a: (g, i) for g in self.groups for i, a in enumerate(g.agents)}
        self._mask_leaves: list[tuple[AgentGroup, Any]] = []
        self.done = False
        """Whether the last output's root ``done`` is true."""

    def specs(self) -> dict[str, Composite]:
        """The full observation, action, reward and done specs (batch ``()``)."""
        dev = self.device
        obs = Composite({g.name: g.observation_spec() for g in self.groups}, shape=(), device=dev)
        if self.state_codec is not None:
            obs["state"] = self.state_codec.spec
        done = Composite(
            {k: flag_spec((1,), dev) for k in ("done", "terminated", "truncated")},
            shape=(),
            device=dev,
        )
        for g in self.groups:
            done[g.name] = g.done_spec()
        return {
            "observation": obs,
            "action": Composite({g.name: g.action_spec() for g in self.groups}, shape=()),
            "reward": Composite({g.name: g.reward_spec() for g in self.groups}, shape=()),
            "done": done,
        }

    def bind(self, action_spec: Composite) -> None:
        """Remembers the action leaves whose mask follows the env's ``action_mask``."""
        self._mask_leaves = []
        for g in self.groups:
            leaf = action_spec[g.action_key]
            if g.mask_shape is not None and hasattr(leaf, "update_mask"):
                if tuple(leaf._mask_shape()) == (g.n, *g.mask_shape):
                    self._mask_leaves.append((g, leaf))

    def output(
        self,
        obs: Values,
        infos: Values,
        acting: set[str],
        *,
        rewards: Values | None = None,
        terms: Values | None = None,
        truncs: Values | None = None,
        state: Any = None,
    ) -> TensorDictBase:
        """The data of a reset (``rewards`` None: every flag false) or of a step."""
        data: dict[str, Any] = {}
        all_term: list[bool] = []
        all_trunc: list[bool] = []
        for g in self.groups:
            entries = g.entries(obs, infos, [a in acting for a in g.agents])
            if rewards is not None:
                entries["reward"] = g.rewards(rewards)
                term, trunc = g.flags(terms or {}, truncs or {})
            else:
                term = trunc = [False] * g.n
            all_term += term
            all_trunc += trunc
            t = np.array(term).reshape(g.n, 1)
            u = np.array(trunc).reshape(g.n, 1)
            entries["done"] = torch.from_numpy(t | u)
            entries["terminated"] = torch.from_numpy(t)
            entries["truncated"] = torch.from_numpy(u)
            data[g.name] = TensorDict._new_unsafe(entries, batch_size=(g.n,))
        root = self._root(all_term, all_trunc)
        self.done = root[0]
        for key, flag in zip(("done", "terminated", "truncated"), root):
            data[key] = torch.from_numpy(np.array([flag]))
        if state is not None:
            data["state"] = self.state_codec.decode(state)  # type: ignore[union-attr]
        out = TensorDict._new_unsafe(data, batch_size=())
        for g, leaf in self._mask_leaves:
            mask = out.get((g.name, "action_mask"))
            leaf.update_mask(mask.clone())  # the spec's copy: the caller owns the output
        if self.device is not None and self.device.type != "cpu":
            out = out.to(self.device)
        return out

    def _root(self, term: list[bool], trunc: list[bool]) -> tuple[bool, bool, bool]:
        done = [a or b for a, b in zip(term, trunc)]
        if self.done_on_any:
            return any(done), any(term), any(trunc)
        all_done, all_term = all(done), all(term)
        return all_done, all_term, all_done and not all_term

    def root_done(self, terms: Values, truncs: Values) -> bool:
        """Whether a step with these flags ends the episode (unreported agents count as done)."""
        term = [bool(terms.get(a, True)) for a in self.where]
        return self._root(term, [bool(truncs.get(a, True)) for a in self.where])[0]
