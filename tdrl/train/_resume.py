"""What a run holds besides weights and counters, saved so that ``--resume`` continues exactly:
the envs' states and the collector's next step.

The built-in envs (``tdrl.envs.builtin``) keep their whole state in tensor and generator
attributes (their ``_to`` moves exactly these), so a copy of those attributes and of the
collector's next root is the full simulation state: restored, the resumed run steps the same
episodes with the same random draws as a run that was never stopped. Other envs (gymnasium,
PettingZoo, VMAS, a ``ParallelEnv``'s worker processes, Ray actors) hold state tensors cannot
capture: a resumed run starts fresh episodes there.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import torch
from tensordict import TensorDictBase

from tdrl.collectors import Collector
from tdrl.envs import EnvBase

if TYPE_CHECKING:
    from tdrl.train._eval import EpisodeTracker

__all__ = [
    "ResumingCollector",
    "RunState",
    "check_env_state",
    "check_root",
    "env_state",
    "flat_root",
    "load_env_state",
]

_SEP = "/"


def env_state(env: EnvBase) -> dict[str, torch.Tensor] | None:
    """Copies of a built-in env's tensor attributes and generator states (uint8 tensors);
    None for any other env.

    Examples:
        >>> from tdrl.envs import CartPoleEnv
        >>> sorted(env_state(CartPoleEnv(batch_size=(2,))))[:3]
        ['_false', '_limits', '_rng']
    """
    if not type(env).__module__.startswith("tdrl.envs.builtin."):
        return None
    out: dict[str, torch.Tensor] = {}
    for name, value in vars(env).items():
        if isinstance(value, torch.Tensor):
            out[name] = value.detach().clone()
        elif isinstance(value, torch.Generator):
            out[name] = value.get_state()
    return out


def check_env_state(env: EnvBase, saved: Mapping[str, torch.Tensor], where: str) -> None:
    """Raises ``ValueError`` unless ``saved`` holds exactly ``env``'s state entries, each with
    the current shape and dtype (generator states: valid states)."""
    current = env_state(env)
    if current is None or set(saved) != set(current):
        got, expected = sorted(saved), sorted(current or {})
        raise ValueError(
            f"the {where} state does not fit the env (got entries {got[:6]}; expected "
            f"{expected[:6]})"
        )
    for name, value in saved.items():
        ref = current[name]
        if isinstance(getattr(env, name), torch.Generator):
            try:
                torch.Generator(device=getattr(env, name).device).set_state(value)
            except (RuntimeError, TypeError) as err:
                raise ValueError(f"the {where} generator {name!r} is invalid ({err})") from err
        elif value.shape != ref.shape or value.dtype != ref.dtype:
            raise ValueError(
                f"the {where} entry {name!r} does not fit the env (got {value.dtype} "
                f"{list(value.shape)}; expected {ref.dtype} {list(ref.shape)})"
            )


def load_env_state(env: EnvBase, saved: Mapping[str, torch.Tensor]) -> None:
    """Writes a state from :func:`env_state` back (checked by :func:`check_env_state`)."""
    for name, value in saved.items():
        target = getattr(env, name)
        if isinstance(target, torch.Generator):
            target.set_state(value)
        else:
            with torch.no_grad():
                target.copy_(value)


def flat_root(root: TensorDictBase, env: EnvBase) -> dict[str, torch.Tensor]:
    """The env's entries of a collector's next root (observations, done flags, ...), by
    ``/``-joined key; the policy's outputs kept there are rewritten before they are read."""
    fake = env.fake_tensordict()
    out = {}
    for key, value in root.items(True, True):
        parts = (key,) if isinstance(key, str) else key
        if parts[0] != "next" and isinstance(fake.get(parts, None), torch.Tensor):
            out[_SEP.join(parts)] = value.detach().clone()
    return out


def check_root(env: EnvBase, saved: Mapping[str, torch.Tensor]) -> None:
    """Raises ``ValueError`` unless every saved entry is an entry of ``env``'s data with the
    same shape and dtype."""
    fake = env.fake_tensordict()
    for name, value in saved.items():
        key = tuple(name.split(_SEP))
        ref = fake.get(key, None)
        if (
            not isinstance(ref, torch.Tensor)
            or ref.shape != value.shape
            or ref.dtype != value.dtype
        ):
            got = f"{value.dtype} {list(value.shape)}"
            want = "no such entry" if ref is None else f"{ref.dtype} {list(ref.shape)}"
            raise ValueError(
                f"the collector's next step entry {name!r} does not fit the env (got {got}; "
                f"expected {want})"
            )


class ResumingCollector(Collector):
    """A :class:`Collector` whose first batch continues a saved run: it starts from the saved
    next root, with the env put back in its saved state, instead of from a reset.

    Args:
        *args: as for :class:`Collector`.
        resume: ``(env state, flat root)`` from a checkpoint, or None (a plain Collector).
        **kwargs: as for :class:`Collector`.

    Examples:
        >>> from tdrl.envs import CartPoleEnv
        >>> env = CartPoleEnv(batch_size=(2,))
        >>> first = ResumingCollector(env, frames_per_batch=4)
        >>> _ = first.rollout()
        >>> saved = (env_state(env), flat_root(first.next_root, env))
        >>> rng = torch.get_rng_state()  # the random actions' generator (checkpoints hold it)
        >>> expected = first.rollout()["next", "observation"].clone()
        >>> new_env = CartPoleEnv(batch_size=(2,))  # (seeding itself draws from torch's RNG)
        >>> torch.set_rng_state(rng)
        >>> again = ResumingCollector(new_env, frames_per_batch=4, resume=saved)
        >>> bool((again.rollout()["next", "observation"] == expected).all())
        True
    """

    def __init__(
        self,
        *args: Any,
        resume: tuple[Mapping[str, torch.Tensor], Mapping[str, torch.Tensor]] | None = None,
        **kwargs: Any,
    ) -> None:
        self._resume = resume  # before the base constructor, which may start collecting
        saved_rng = torch.get_rng_state() if resume is not None else None
        super().__init__(*args, **kwargs)
        if saved_rng is not None:
            # what building a collector draws (a dry run of the policy) was drawn when the run
            # built its first one: the resumed run's stream goes on from the checkpoint's
            torch.set_rng_state(saved_rng)

    @property
    def next_root(self) -> TensorDictBase | None:
        """The data the next step starts from (None before the first batch)."""
        return self._root

    def _start(self) -> TensorDictBase:
        root = super()._start()  # the reset also starts the trajectory ids
        if self._resume is None:
            return root
        state, flat = self._resume
        self._resume = None
        load_env_state(self.env, state)
        for name, value in flat.items():
            root.set(tuple(name.split(_SEP)), value.clone())
        return root


class RunState:
    """A trainer's state beyond weights and counters, as ``state`` tensors of a checkpoint:
    ``env/*`` and ``root/*`` (the training env and the collector's next step, saved together
    and only for built-in envs), ``eval_env/*`` and ``tracker/<name>`` (the running returns of
    unfinished episodes).

    Args:
        env: the training env.
        eval_env: the evaluation env.
        trackers: the episode trackers, by name.

    Examples:
        >>> from tdrl.envs import CartPoleEnv
        >>> from tdrl.train import EpisodeTracker
        >>> state = RunState(CartPoleEnv(batch_size=(2,)), CartPoleEnv(), {"r": EpisodeTracker()})
        >>> sorted({key.split("/")[0] for key in state.tensors(None)})
        ['eval_env']
    """

    def __init__(
        self, env: EnvBase, eval_env: EnvBase, trackers: Mapping[str, EpisodeTracker]
    ) -> None:
        self.env, self.eval_env, self.trackers = env, eval_env, trackers

    def tensors(self, root: TensorDictBase | None) -> dict[str, torch.Tensor]:
        """The tensors to save, given the collector's next root (None: no collector yet)."""
        out: dict[str, torch.Tensor] = {}
        for name, tracker in self.trackers.items():
            running = tracker.state()
            if running is not None:
                out[f"tracker/{name}"] = running
        train, evaluation = env_state(self.env), env_state(self.eval_env)
        if root is not None and train is not None:
            out.update({f"env/{k}": v for k, v in train.items()})
            out.update({f"root/{k}": v for k, v in flat_root(root, self.env).items()})
        if evaluation is not None:
            out.update({f"eval_env/{k}": v for k, v in evaluation.items()})
        return out

    def check(self, saved: Mapping[str, torch.Tensor]) -> dict[str, dict[str, torch.Tensor]]:
        """Splits saved tensors by part and checks them against the run; changes nothing.

        Raises:
            ValueError: an entry does not fit the run's envs or trackers.
        """
        parts: dict[str, dict[str, torch.Tensor]] = {}
        for key, value in saved.items():
            head, _, rest = key.partition(_SEP)
            parts.setdefault(head, {})[rest] = value
        unknown = sorted(set(parts) - {"tracker", "env", "root", "eval_env"})
        if unknown:
            raise ValueError(f"unknown state entries {unknown}")
        if "env" in parts:
            check_env_state(self.env, parts["env"], "env")
            check_root(self.env, parts.get("root", {}))
        if "eval_env" in parts:
            check_env_state(self.eval_env, parts["eval_env"], "evaluation env")
        extra = sorted(set(parts.get("tracker", {})) - set(self.trackers))
        if extra:
            raise ValueError(f"unknown episode trackers {extra} (expected {sorted(self.trackers)})")
        for name, running in parts.get("tracker", {}).items():
            self.trackers[name].check_state(running)
        return parts

    def apply(
        self, parts: Mapping[str, Mapping[str, torch.Tensor]]
    ) -> tuple[Mapping[str, torch.Tensor], Mapping[str, torch.Tensor]] | None:
        """Loads the evaluation env and the trackers from :meth:`check`'s parts; returns the
        training env's ``(state, root)`` for :class:`ResumingCollector` (None: none saved)."""
        if "eval_env" in parts:
            load_env_state(self.eval_env, parts["eval_env"])
        for name, running in parts.get("tracker", {}).items():
            self.trackers[name].load_state(running)
        if "env" not in parts:
            return None
        return parts["env"], parts.get("root", {})
