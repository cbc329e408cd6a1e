"""The rollout loop of EnvBase (TorchRL's ``env.rollout`` arguments and semantics)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import torch
from tensordict import TensorDictBase

from tdrl.envs.core._fast import stack_plain
from tdrl.envs.core._row_run import MIN_ROWS, RowRun

if TYPE_CHECKING:
    from tdrl.envs.core._base import EnvBase

__all__ = [
    "action_policy",
    "cast_plan",
    "check_rollout_options",
    "play",
    "play_until_all_done",
    "rollout_policy",
    "set_truncated_last",
    "stack",
    "stop_mode",
]

Policy = Callable[[TensorDictBase], TensorDictBase]

_ROWS_AFTER = 32  # general steps before rows, in a run that may stop early


def check_rollout_options(
    env: EnvBase,
    *,
    out: Any,
    storing_device: Any,
) -> None:
    """Raises for TorchRL rollout options tdrl cannot honour."""
    name = f"{type(env).__name__}.rollout"
    refused = [
        ("out", out, (None,), "the result is a fresh TensorDict; copy it into yours"),
        ("storing_device", storing_device, (None,), "move the result with .to(device)"),
    ]
    for arg, value, accepted, fix in refused:
        if not any(value is a for a in accepted):
            raise ValueError(
                f"{name}: {arg}={value!r} is not supported (got {value!r}; expected "
                f"{' or '.join(map(repr, accepted))}). {fix[0].upper()}{fix[1:]}."
            )


def policy_device(policy: Any) -> torch.device | None:
    """The device of the policy's first parameter (TorchRL's ``auto_cast_to_device``);
    ``None`` for a policy without parameters or that is not a module."""
    parameters = getattr(policy, "parameters", None)
    if not callable(parameters):
        return None
    try:
        return next(iter(parameters())).device  # type: ignore[no-any-return]
    except StopIteration:
        return None


def cast_plan(
    policy_dev: torch.device | None, env_dev: torch.device | None
) -> tuple[torch.device | None, torch.device | None] | None:
    """Where ``rollout(auto_cast_to_device=True)`` moves the data: ``(before the policy,
    before the step)``, ``None`` for "clear the device" (TorchRL's ``clear_device_``), or
    ``None`` altogether when nothing moves (the policy runs where the env's data is).

    Examples:
        >>> cast_plan(torch.device("cpu"), torch.device("cpu")) is None
        True
        >>> cast_plan(torch.device("cuda", 0), torch.device("cpu"))
        (device(type='cuda', index=0), device(type='cpu'))
        >>> cast_plan(None, torch.device("cpu"))
        (None, device(type='cpu'))
    """
    if policy_dev == env_dev or (policy_dev is None and env_dev is None):
        return None
    if policy_dev is not None and env_dev is None and policy_dev.type == "cpu":
        return None  # an env without device holds cpu tensors: the policy's device
    return policy_dev, env_dev


def _move(td: TensorDictBase, device: torch.device | None) -> TensorDictBase:
    if device is None:
        if td.device is not None:
            td.clear_device_()
        return td
    return td if td.device == device else td.to(device)


def rollout_policy(env: EnvBase, policy: Policy, auto_cast_to_device: bool) -> Policy:
    """The policy as ``rollout`` calls it (TorchRL): its output updates its input (a policy
    may return a new TensorDict holding only its outputs), and with ``auto_cast_to_device``
    the input goes to the policy's device and back to the env's (see :func:`cast_plan`)."""
    name = f"{type(env).__name__}.rollout"
    plan = cast_plan(policy_device(policy), env.device) if auto_cast_to_device else None

    def act(td: TensorDictBase) -> TensorDictBase:
        if plan is not None:
            td = _move(td, plan[0])
        out = policy(td)
        if out is not td:
            if not isinstance(out, TensorDictBase):
                raise TypeError(
                    f"{name}: the policy returned {type(out).__name__} (expected a TensorDict: "
                    "its input, or a TensorDict of its outputs). Return the tensordict."
                )
            td.update(out)
        return td if plan is None else _move(td, plan[1])

    return act


def action_policy(env: EnvBase, actions: Iterable[Any]) -> Policy:
    """A policy that writes the next of ``actions`` under the env's first action key."""
    key = env.action_keys[0]
    it = iter(actions)

    def write(td: TensorDictBase) -> TensorDictBase:
        return td.set(key, next(it))

    return write


def play(
    env: EnvBase,
    td: TensorDictBase,
    max_steps: int,
    act: Policy,
    break_when_any_done: bool,
    callback: Callable[..., Any] | None,
) -> TensorDictBase:
    """Runs the steps; returns them stacked (time as the last batch dim).

    An env with a row writer steps straight into the rows of the result (``RowRun``) for as
    long as the policy writes what they can take; the general loop does the rest. Rows pay off
    over many steps only: a run of a known length starts after the first step when it is long
    enough, one that may stop at a done after ``_ROWS_AFTER`` steps of the general loop.
    """
    steps: list[TensorDictBase] = []
    warm = _ROWS_AFTER if break_when_any_done else 1
    if max_steps - warm < MIN_ROWS:
        warm = max_steps  # too short for rows
    td, stopped = _general(env, td, (0, warm, max_steps), act, break_when_any_done, callback, steps)
    if stopped or warm == max_steps:
        return stack(steps)
    # the run starts from the last general step (its row 0)
    count = max_steps - warm + 1
    run = RowRun.start(env, steps[-1], td, count, exact=not break_when_any_done)
    if run is not None:
        td, acted = _rows(run, td, count, act, break_when_any_done, callback)
        if td is None:
            return _join(steps[:-1], run.result())
        steps = steps[:-1] + run.steps()
    else:
        acted = False
    span = (len(steps), max_steps, max_steps)
    _general(env, td, span, act, break_when_any_done, callback, steps, acted)
    return stack(steps)


def _join(head: list[TensorDictBase], rows: TensorDictBase) -> TensorDictBase:
    """The general steps ``head`` stacked before the rows' result."""
    if not head:
        return rows
    return torch.cat([stack(head), rows], 0)  # type: ignore[list-item]


def _general(
    env: EnvBase,
    td: TensorDictBase,
    span: tuple[int, int, int],
    act: Policy,
    stop: bool,
    callback: Callable[..., Any] | None,
    steps: list[TensorDictBase],
    acted: bool = False,
) -> tuple[TensorDictBase, bool]:
    """Steps ``start`` to ``end - 1`` of a rollout of ``max_steps`` (``span``) with the public
    methods (``td`` already holds the policy's output when ``acted``); appends them to
    ``steps``. Returns the next root and whether the rollout stopped at a done."""
    start, end, max_steps = span
    for i in range(start, end):
        if not (acted and i == start):
            td = act(td)
        if stop:
            td = env.step(td)
            steps.append(td)
            if i == max_steps - 1:
                break  # the last step: the rollout ends whatever follows
            root = env._step_mdp(td)
            if env.any_done(root):
                return root, True
            td = root
        elif i == max_steps - 1:
            # TorchRL: the last step is not followed by a reset (nor by the callback)
            steps.append(env.step(td))
            break
        else:
            td, nxt = env.step_and_maybe_reset(td)
            steps.append(td)
            td = nxt
        if callback is not None:
            callback(env, td)
    return td, False


def _rows(
    run: RowRun,
    root: TensorDictBase,
    count: int,
    act: Policy,
    stop: bool,
    callback: Callable[..., Any] | None,
) -> tuple[TensorDictBase | None, bool]:
    """The steps of a row run of at most ``count`` steps, from the second on. Returns ``(None, False)`` when the run
    ended, or the policy's output that the rows cannot take and True (the caller hands
    ``run.steps()`` to the general loop, which steps it)."""
    env, reset, advance = run.env, not stop, run.advance
    # without stops the general loop's roots come from step_and_maybe_reset, which keeps the
    # actions (TorchRL): the rows' roots keep them too
    kept = () if stop else tuple(path[0] for path, _, _ in env._action_paths)
    while True:
        td = act(root)
        # TorchRL resets nothing after the last step, and calls no callback after it
        done = advance(td, reset and run.t < count - 1)
        if done < 0:
            return td, True
        if run.t == count or (stop and done):
            return None, False
        root = run.root()
        for key in kept:
            root._tensordict[key] = td._tensordict[key]  # both plain (RowRun's checks)
        if callback is not None:
            callback(env, root)


def stop_mode(
    env: EnvBase, break_when_any_done: bool | None, break_when_all_done: bool | None
) -> tuple[bool, bool]:
    """``(break_when_any_done, break_when_all_done)`` as TorchRL resolves them: any is the
    default unless all is asked; both at once raise ``TypeError``."""
    every = bool(break_when_all_done)
    anyone = (not every) if break_when_any_done is None else bool(break_when_any_done)
    if anyone and every:
        raise TypeError(
            f"{type(env).__name__}.rollout: break_when_any_done and break_when_all_done are "
            "both True (got both; expected at most one). Pass break_when_any_done=False with "
            "break_when_all_done=True."
        )
    return anyone, every


def play_until_all_done(
    env: EnvBase,
    td: TensorDictBase,
    max_steps: int,
    act: Policy,
    callback: Callable[..., Any] | None,
) -> TensorDictBase:
    """``rollout(break_when_all_done=True)`` (TorchRL): nothing is reset, the run ends after
    the step where every member has been done once, and from its first done on a member's rows
    repeat its last step. The env steps every member (tdrl has no partial steps)."""
    steps: list[TensorDictBase] = []
    active: torch.Tensor | None = None  # [*batch]: the members not done yet
    for i in range(max_steps):
        td = env.step(act(td))
        row = td.copy()
        if active is not None:
            # TensorDicts take torch.where through __torch_function__; torch's stubs list tensors
            row = torch.where(active, row, steps[-1])  # type: ignore[call-overload]
        steps.append(row)
        if i == max_steps - 1:
            break
        td = env._step_mdp_keep(td)
        done = _member_done(env, td)
        active = ~done if active is None else active & ~done
        if not bool(active.any()):
            break
        if callback is not None:
            callback(env, td)
    return stack(steps)


def _member_done(env: EnvBase, root: TensorDictBase) -> torch.Tensor:
    """Whether each member (``[*batch]``) has a done leaf that is true."""
    ndim = len(env.batch_size)
    out = torch.zeros(env.batch_size, dtype=torch.bool, device=root.device)
    for g in env.done_groups:
        done = root.get(g.done)
        out = out | done.reshape(*done.shape[:ndim], -1).any(-1)
    return out


def set_truncated_last(env: EnvBase, data: TensorDictBase) -> None:
    """``set_truncated``: the last step's truncated (and done) leaves become true."""
    groups = [g for g in env.done_groups if g.truncated is not None]
    if not groups:
        raise RuntimeError(
            f"{type(env).__name__}.rollout: set_truncated=True needs a 'truncated' done leaf "
            f"(got done keys {env.done_keys}; expected one ending in 'truncated'). Add it to the "
            "done spec."
        )
    last = (slice(None),) * (data.batch_dims - 1) + (-1,)
    nxt = data.get("next")
    for g in groups:
        trunc = nxt.get(g.truncated).clone()
        trunc[last] = True
        nxt.set(g.truncated, trunc)
        nxt.set(g.done, nxt.get(g.done) | trunc)


def stack(steps: list[TensorDictBase]) -> TensorDictBase:
    """Stacks the steps with time as the last batch dim."""
    dim = steps[0].batch_dims
    out = stack_plain(steps, dim)
    if out is not None:
        return out
    return torch.stack(steps, dim=dim)  # type: ignore[arg-type,return-value]
