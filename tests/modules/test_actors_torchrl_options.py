"""Actor/SafeModule take tensordict's TensorDictModule options, as TorchRL forwards them."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from tdrl.modules import Actor, SafeModule


class _Two(torch.nn.Module):
    def forward(self, x):
        return x * 2

    def half(self, x, scale=1.0):
        return x / 2 * scale


def test_actor_calls_the_method_given_with_its_kwargs():
    td = TensorDict(observation=torch.full((3, 2), 4.0), batch_size=[3])
    actor = Actor(_Two(), method="half", method_kwargs={"scale": 3.0})
    torch.testing.assert_close(actor(td)["action"], torch.full((3, 2), 6.0))
    assert Actor(_Two())(td.clone())["action"].eq(8.0).all()


def test_actor_strict_refuses_a_missing_input():
    with pytest.raises(KeyError):
        Actor(_Two(), strict=True)(TensorDict(batch_size=[]))
    assert Actor(_Two(), get_kwargs={}).strict is False  # accepted; the default is lenient


def test_safe_module_maps_outputs_to_inputs_by_name():
    module = SafeModule(
        lambda a: a + 1, in_keys={"obs": "a"}, out_keys=["out"], out_to_in_map=False
    )
    td = module(TensorDict(obs=torch.zeros(2), batch_size=[]))
    assert td["out"].eq(1.0).all()
    with pytest.raises(TypeError):
        Actor(_Two(), not_an_option=True)
