"""DecisionTransformerInferenceWrapper: a Decision Transformer policy on a context window."""

from __future__ import annotations

import torch
from tensordict import TensorDictBase, unravel_key
from tensordict.nn import TensorDictModuleBase, dispatch
from tensordict.utils import NestedKey

from tdrl.specs import Composite, TensorSpec

__all__ = ["DecisionTransformerInferenceWrapper"]


class DecisionTransformerInferenceWrapper(TensorDictModuleBase):
    """Runs a Decision Transformer policy on a context window and keeps its last action.

    The input holds the last ``T`` steps of ``observation`` ``[*B, T, obs]``, ``action``
    ``[*B, T, act]`` and ``return_to_go`` ``[*B, T, 1]`` (e.g. built in the env by
    ``CatFrames(dim=-2)``). As TorchRL's wrapper, on a shallow copy of the input it zeroes
    every step older than the last ``inference_context`` ones (observation and return) and
    older than the last ``inference_context - 1`` ones (action), shifts the actions one step
    back (the action of the current step is unknown: a zero takes its place), runs the policy,
    and writes the last step's action and return-to-go (``[*B, act]``, ``[*B, 1]``) with the
    observation unmasked. A time dim in the batch is dropped. The input is not changed.

    Args:
        policy: the policy module (reads the three keys, writes the action).
        inference_context: how many of the last steps the policy sees (TorchRL's 5).
        spec: the action spec (or a Composite); default: the policy's ``spec``.
        device: where the spec is moved.

    Change the keys with :meth:`set_tensor_keys`. With ``inference_context=1`` every past
    action is zeroed (TorchRL's slice ``[:-0]`` zeroes none of them).

    Examples:
        >>> from tensordict import TensorDict
        >>> from tensordict.nn import TensorDictModule
        >>> from tdrl.modules import DTActor
        >>> config = DTActor.default_config()
        >>> config.n_embd, config.n_inner = 32, 64
        >>> actor = TensorDictModule(DTActor(4, 2, config),
        ...     in_keys=["observation", "action", "return_to_go"], out_keys=["action"])
        >>> wrapper = DecisionTransformerInferenceWrapper(actor)
        >>> td = TensorDict(observation=torch.randn(1, 20, 4), action=torch.randn(1, 20, 2),
        ...     return_to_go=torch.randn(1, 20, 1), batch_size=[1])
        >>> out = wrapper(td)
        >>> out["action"].shape, out["return_to_go"].shape, out["observation"].shape
        (torch.Size([1, 2]), torch.Size([1, 1]), torch.Size([1, 20, 4]))
    """

    def __init__(
        self,
        policy: TensorDictModuleBase,
        *,
        inference_context: int = 5,
        spec: TensorSpec | None = None,
        device: torch.device | None = None,
    ) -> None:
        if int(inference_context) < 1:
            raise ValueError(
                f"DecisionTransformerInferenceWrapper.__init__: inference_context must be "
                f"positive (got {inference_context}; expected an int >= 1). Pass the number of "
                "steps the policy sees."
            )
        super().__init__()
        self.td_module = policy
        self.observation_key: NestedKey = "observation"
        self.action_key: NestedKey = "action"
        self.out_action_key: NestedKey = "action"
        self.return_to_go_key: NestedKey = "return_to_go"
        self.inference_context = int(inference_context)
        if spec is not None and not isinstance(spec, Composite):
            spec = Composite({self.action_key: spec}, shape=spec.shape[:-1])
        if spec is None:
            spec = getattr(policy, "spec", None)
            spec = spec.clone() if isinstance(spec, Composite) else None
        self._spec = spec.to(device) if spec is not None and device is not None else spec
        self.checked = False

    @property
    def spec(self) -> Composite | None:
        """The output spec (the policy's, or the one given)."""
        return self._spec

    @property
    def in_keys(self) -> list[NestedKey]:  # type: ignore[override]
        return [self.observation_key, self.action_key, self.return_to_go_key]

    @property
    def out_keys(self) -> list[NestedKey]:  # type: ignore[override]
        keys = {*self.td_module.out_keys, *self.in_keys}
        return sorted(keys, key=str)

    def set_tensor_keys(self, **kwargs: NestedKey) -> None:
        """Changes the keys: ``observation``, ``action`` (input), ``return_to_go`` and
        ``out_action`` (the policy's action output, one of its ``out_keys``)."""
        where = "DecisionTransformerInferenceWrapper.set_tensor_keys"
        names = ("observation", "action", "return_to_go", "out_action")
        unknown = sorted(set(kwargs) - set(names))
        if unknown:
            raise TypeError(
                f"{where}: unknown key name(s) {unknown} (expected some of {list(names)}). "
                "Check the spelling."
            )
        out_action = unravel_key(kwargs.get("out_action", self.out_action_key))
        if out_action not in [unravel_key(k) for k in self.td_module.out_keys]:
            raise ValueError(
                f"{where}: out_action {out_action!r} is not an output of the policy (got "
                f"out_keys={self.td_module.out_keys}). Pass out_action=<the policy's action key>."
            )
        self.observation_key = unravel_key(kwargs.get("observation", self.observation_key))
        self.action_key = unravel_key(kwargs.get("action", self.action_key))
        self.return_to_go_key = unravel_key(kwargs.get("return_to_go", self.return_to_go_key))
        self.out_action_key = out_action

    def step(self, frames: int = 1) -> None:
        """No-op (TorchRL's exploration-module interface)."""

    def mask_context(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Writes the masked (and shifted) context into ``tensordict`` and returns it."""
        obs = tensordict.get(self.observation_key).clone()
        action = tensordict.get(self.action_key).clone()
        rtg = tensordict.get(self.return_to_go_key).clone()
        if not rtg.shape[:-1] == obs.shape[:-1] == action.shape[:-1]:
            raise ValueError(
                f"DecisionTransformerInferenceWrapper.mask_context: the context windows differ "
                f"(got observation {tuple(obs.shape)}, action {tuple(action.shape)}, "
                f"return_to_go {tuple(rtg.shape)}; expected the same [*B, T]). Stack the same "
                "number of steps of each."
            )
        k = self.inference_context
        obs[..., :-k, :] = 0
        rtg[..., :-k, :] = 0
        action[..., : max(action.shape[-2] - (k - 1), 0), :] = 0
        action = torch.cat([action[..., 1:, :], torch.zeros_like(action[..., :1, :])], dim=-2)
        tensordict.set(self.observation_key, obs)
        tensordict.set(self.action_key, action)
        tensordict.set(self.return_to_go_key, rtg)
        return tensordict

    @dispatch
    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """The last step's action (and return-to-go) of the policy on the context window."""
        if not self.checked:
            self.set_tensor_keys()
            self.checked = True
        tensordict = tensordict.copy()
        obs = tensordict.get(self.observation_key)
        tensordict = self.td_module(self.mask_context(tensordict))
        out_action = tensordict.get(self.out_action_key)
        if tensordict.ndim == out_action.ndim - 1:  # the time dim is a batch dim: drop it
            tensordict.batch_size = tensordict.batch_size[:-1]
        tensordict.set(self.out_action_key, out_action[..., -1, :])
        tensordict.set(self.return_to_go_key, tensordict.get(self.return_to_go_key)[..., -1, :])
        tensordict.set(self.observation_key, obs)
        return tensordict
