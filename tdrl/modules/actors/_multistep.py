"""MultiStepActorWrapper: run an actor that plans a chunk of actions, one action per env step."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModuleBase
from tensordict.utils import NestedKey, expand_as_right, unravel_key

__all__ = ["MultiStepActorWrapper"]

_CHUNK = "_chunk"


def _last(key: NestedKey) -> str:
    return key if isinstance(key, str) else key[-1]


def _with_last(key: NestedKey, last: str) -> NestedKey:
    return last if isinstance(key, str) else (*key[:-1], last)


def _is_vla_chunk(key: NestedKey) -> bool:
    return isinstance(key, tuple) and len(key) >= 2 and key[-2:] == ("vla_action", "chunk")


def _action_of_chunk(key: NestedKey) -> NestedKey:
    """The env action a chunk key feeds: ``"x_chunk"`` -> ``"x"``, ``(..., "vla_action", "chunk")``
    -> ``"action"``; any other key is its own action."""
    if _is_vla_chunk(key):
        return "action"
    last = _last(key)
    if last.endswith(_CHUNK) and last != _CHUNK:
        return _with_last(key, last[: -len(_CHUNK)])
    return key


def _key_list(value: NestedKey | Sequence[NestedKey] | None) -> list[NestedKey] | None:
    if value is None:
        return None
    if isinstance(value, str | tuple):
        value = [value]
    return [unravel_key(k) for k in value]


class MultiStepActorWrapper(TensorDictModuleBase):
    """Executes an actor's chunk of ``n_steps`` actions one per call (macro actions, chunking).

    The wrapped actor writes each action with an extra time dim right after the tensordict's
    batch dims (``[*batch, n_steps, *action_shape]``). The wrapper keeps that chunk in a cache
    entry and writes its ``counter``-th slice to the action key at every call; it queries the
    actor again only for the rows that start an episode (``init_key`` true, written by
    :class:`~tdrl.envs.InitTracker`) or that consumed ``replan_interval`` actions (``n_steps``
    by default). Key names are TorchRL's:

    - the cache is the chunk key itself when it differs from the action key (``"action_chunk"``
      feeds ``"action"``), else ``"<action>_orig"`` (an actor writing ``"action"`` gets an
      ``"action_orig"`` cache);
    - the step counter is ``init_key`` with its last element replaced by ``"counter"``
      (``"counter"``, int32, shaped as the init key).

    Only the chunk entries of the actor's output are kept: the actor runs on the re-planning
    rows alone, and its other outputs are dropped.

    Args:
        actor: the actor writing the chunks.
        n_steps: the chunk length. ``None`` accepts any length and cycles through the chunk
            (without ``replan_interval``, only a new episode re-queries the actor).

    Keyword Args:
        action_keys: the env's action keys. Defaults to the actions inferred from
            ``chunk_keys`` (``"x_chunk"`` -> ``"x"``, ``(..., "vla_action", "chunk")`` ->
            ``"action"``) or, with no chunk key, the actor's out_keys ending in ``"action"``.
        chunk_keys: the actor's out_keys holding chunks. Defaults to its
            ``(..., "vla_action", "chunk")`` keys, else those ending in ``"_chunk"``, else the
            action keys.
        init_key: the episode-start flag. Defaults to ``"is_init"``.
        keep_dim: keep a time dim of size 1 on the action written. Defaults to ``False``.
        replan_interval: re-query the actor after this many actions, in ``[1, n_steps]``
            (``1`` re-plans every step). Defaults to ``None`` (consume the whole chunk).

    Raises:
        ValueError: ``replan_interval`` out of range, a list ``init_key``, or action and chunk
            key lists of different lengths.
        KeyError: the input lacks ``init_key``.
        RuntimeError: some rows start an episode but others have no cached chunk yet, or the
            chunk length disagrees with ``n_steps``/``replan_interval``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tensordict.nn import TensorDictModule
        >>> plan = TensorDictModule(
        ...     lambda obs: obs.unsqueeze(-2) + torch.arange(3.0).unsqueeze(-1),
        ...     in_keys=["observation"], out_keys=["action"])
        >>> actor = MultiStepActorWrapper(plan, n_steps=3)
        >>> td = TensorDict(observation=torch.zeros(2, 1), is_init=torch.ones(2, 1, dtype=torch.bool),
        ...                 batch_size=[2])
        >>> actions = []
        >>> for _ in range(4):
        ...     td = actor(td)
        ...     actions.append(td["action"][0].item())
        ...     td["is_init"] = torch.zeros(2, 1, dtype=torch.bool)
        >>> actions, td["action_orig"].shape, td["counter"].dtype
        ([0.0, 1.0, 2.0, 0.0], torch.Size([2, 3, 1]), torch.int32)
    """

    def __init__(
        self,
        actor: TensorDictModuleBase,
        n_steps: int | None = None,
        *,
        action_keys: list[NestedKey] | None = None,
        chunk_keys: list[NestedKey] | None = None,
        init_key: NestedKey | None = None,
        keep_dim: bool = False,
        replan_interval: int | None = None,
    ) -> None:
        super().__init__()
        if replan_interval is not None:
            replan_interval = int(replan_interval)
            if replan_interval < 1 or (n_steps is not None and replan_interval > n_steps):
                raise ValueError(
                    "MultiStepActorWrapper.__init__: replan_interval out of range (got"
                    f" {replan_interval}; expected 1 <= replan_interval <= n_steps={n_steps})."
                    " Pass how many cached actions to play before asking the actor again."
                )
        self.actor = actor
        self.n_steps = n_steps
        self.keep_dim = keep_dim
        self.replan_interval = replan_interval
        self._init_key: NestedKey = "is_init"
        self.init_key = init_key
        self._set_keys(*self._resolve_keys(_key_list(chunk_keys), _key_list(action_keys)))

    def _set_keys(self, chunk_keys: list[NestedKey], action_keys: list[NestedKey]) -> None:
        self._chunk_keys, self._action_keys = chunk_keys, action_keys
        # (action key, chunk key in the actor's output, cache key in the tensordict)
        self._routes: list[tuple[NestedKey, NestedKey, NestedKey]] = [
            (a, c, c if c != a else _with_last(a, _last(a) + "_orig"))
            for a, c in zip(action_keys, chunk_keys, strict=True)
        ]

    @property
    def action_keys(self) -> list[NestedKey]:
        """The env action keys written (setting them keeps the chunk keys; None is ignored)."""
        return self._action_keys

    @action_keys.setter
    def action_keys(self, value: NestedKey | list[NestedKey] | None) -> None:
        if value is not None:
            self._set_keys(*self._resolve_keys(self._chunk_keys, _key_list(value)))

    @property
    def chunk_keys(self) -> list[NestedKey]:
        """The actor's chunk keys read (setting them keeps the action keys; None is ignored)."""
        return self._chunk_keys

    @chunk_keys.setter
    def chunk_keys(self, value: NestedKey | list[NestedKey] | None) -> None:
        if value is not None:
            self._set_keys(*self._resolve_keys(_key_list(value), self._action_keys))

    @property
    def init_key(self) -> NestedKey:
        """The episode-start flag read (``"is_init"`` by default; None is ignored)."""
        return self._init_key

    @init_key.setter
    def init_key(self, value: NestedKey | None) -> None:
        if isinstance(value, list):
            raise ValueError(
                f"MultiStepActorWrapper.init_key: only a single init_key can be passed (got"
                f" {value!r}; expected one key such as 'is_init'). Pass the key itself."
            )
        if value is not None:
            self._init_key = unravel_key(value)

    @property
    def counter_key(self) -> NestedKey:
        """The step counter: ``init_key`` with its last element replaced by ``"counter"``."""
        return _with_last(self.init_key, "counter")

    def _resolve_keys(
        self, chunk_keys: list[NestedKey] | None, action_keys: list[NestedKey] | None
    ) -> tuple[list[NestedKey], list[NestedKey]]:
        """TorchRL's defaults: chunk keys from the actor's outputs, actions from the chunks."""
        outs = [unravel_key(k) for k in self.actor.out_keys]
        actor_actions = [k for k in outs if _last(k) == "action"]
        if chunk_keys is None:
            chunk_keys = [k for k in outs if _is_vla_chunk(k)] or [
                k for k in outs if _last(k).endswith(_CHUNK)
            ]
            chunk_keys = chunk_keys or actor_actions
        if not chunk_keys:
            raise ValueError(
                "MultiStepActorWrapper.__init__: no action chunk to dispatch (got an actor with"
                f" out_keys {outs}; expected a key ending in 'action' or '_chunk', or a"
                " (..., 'vla_action', 'chunk') key). Pass chunk_keys= and action_keys=."
            )
        if action_keys is None:
            same = chunk_keys == actor_actions
            action_keys = chunk_keys if same else [_action_of_chunk(k) for k in chunk_keys]
        if len(action_keys) != len(chunk_keys):
            raise ValueError(
                "MultiStepActorWrapper.__init__: action_keys and chunk_keys differ in length"
                f" (got {len(action_keys)} action keys {action_keys} and {len(chunk_keys)} chunk"
                f" keys {chunk_keys}; expected one chunk key per action key). Pass both lists"
                " in the same order."
            )
        return chunk_keys, action_keys

    @property
    def in_keys(self) -> list[NestedKey]:
        """The actor's in_keys and the init key."""
        return [*self.actor.in_keys, self.init_key]

    @property
    def out_keys(self) -> list[NestedKey]:
        """The actor's out_keys, then the action, cache and counter keys it lacks."""
        keys = list(self.actor.out_keys)
        extra = [*self.action_keys, *(cache for _, _, cache in self._routes), self.counter_key]
        for key in extra:
            if key not in keys:
                keys.append(key)
        return keys

    def _replan(self, tensordict: TensorDictBase) -> torch.Tensor:
        """Re-queries the actor on the rows that need it; returns the updated counter."""
        is_init = tensordict.get(self.init_key, None)
        if is_init is None:
            raise KeyError(
                f"MultiStepActorWrapper.forward: the input has no {self.init_key!r} entry (got"
                f" keys {sorted(map(str, tensordict.keys(True, True)))}; expected the episode-start"
                " flag). Add an InitTracker transform to the env or pass init_key=."
            )
        counter = tensordict.get(self.counter_key, None)
        if counter is None:
            counter = is_init.int()
        interval = self.replan_interval if self.replan_interval is not None else self.n_steps
        if interval is not None:
            is_init = is_init | (counter >= interval)
        if not is_init.any():
            return counter
        counter = counter.masked_fill(is_init, 0)
        if tensordict.batch_dims:
            rows = tensordict[is_init.reshape(tensordict.shape)]
        else:
            # An unbatched env: the one row re-plans (TorchRL's mask indexing adds a batch dim
            # there and then refuses the chunk). A shallow copy keeps the actor's other outputs
            # out of the input, as the masked rows do in the batched case.
            rows = tensordict.copy()
        output = self.actor(rows)
        for _, chunk_key, cache_key in self._routes:
            planned = output.get(chunk_key, None)
            cached = tensordict.get(cache_key, None)
            if cached is None:
                if not bool(is_init.all()):
                    raise RuntimeError(
                        "MultiStepActorWrapper.forward: only some rows start an episode but no"
                        f" chunk is cached yet at {cache_key!r} (got {int(is_init.sum())} of"
                        f" {is_init.numel()} rows flagged; expected every row on the first call)."
                        " Reset the whole batch before the first call."
                    )
                if isinstance(cache_key, tuple) and cache_key == chunk_key:
                    # The chunk's whole sub-tensordict (e.g. a VLA's tokens beside its chunk).
                    # TorchRL also takes this branch for an "_orig" cache, whose sub-tensordict
                    # lacks the cache entry, and then raises: tdrl sets the cache entry instead.
                    parent = output.get(cache_key[:-1], None)
                    if parent is not None:
                        tensordict.set(cache_key[:-1], parent)
                        continue
            else:
                planned = torch.masked_scatter(cached, expand_as_right(is_init, cached), planned)
            tensordict.set(cache_key, planned)
        return counter

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Writes the current action of every action key (re-planning where needed)."""
        counter = self._replan(tensordict) + 1
        tensordict.set(self.counter_key, counter)
        for action_key, _, cache_key in self._routes:
            parent = tensordict if isinstance(cache_key, str) else tensordict.get(cache_key[:-1])
            chunk = parent.get(_last(cache_key))
            self._check_chunk(chunk, parent.ndim)
            batch = chunk.shape[: parent.ndim]
            index = (counter - 1).to(torch.long).reshape(batch)
            if self.n_steps is None and self.replan_interval is None:
                index = index.remainder(chunk.shape[parent.ndim])
            trail = chunk.shape[parent.ndim + 1 :]
            index = index.reshape(*batch, 1, *([1] * len(trail))).expand(*batch, 1, *trail)
            action = chunk.gather(parent.ndim, index)
            tensordict.set(action_key, action if self.keep_dim else action.squeeze(parent.ndim))
        return tensordict

    def _check_chunk(self, chunk: torch.Tensor, dim: int) -> None:
        length = chunk.shape[dim] if chunk.ndim > dim else None
        if self.n_steps is not None and length != self.n_steps:
            raise RuntimeError(
                f"MultiStepActorWrapper.forward: the actor's chunk has the wrong length (got shape"
                f" {tuple(chunk.shape)}, length {length} at dim {dim}; expected n_steps="
                f"{self.n_steps} right after the batch dims). Make the actor write"
                " [*batch, n_steps, *action_shape] or fix n_steps."
            )
        if self.replan_interval is not None and (length is None or length < self.replan_interval):
            raise RuntimeError(
                f"MultiStepActorWrapper.forward: replan_interval exceeds the chunk length (got"
                f" replan_interval={self.replan_interval}, chunk shape {tuple(chunk.shape)};"
                f" expected at least {self.replan_interval} actions at dim {dim}). Lower"
                " replan_interval or make the actor plan longer chunks."
            )
