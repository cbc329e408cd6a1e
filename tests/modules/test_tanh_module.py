"""TanhModule: tanh squashing of network outputs into the action box."""

from __future__ import annotations

import math

import pytest
import torch
from tensordict import TensorDict

from tdrl.modules import TanhModule
from tdrl.specs import Bounded, Composite, Unbounded


@pytest.mark.parametrize("key", ["action", ("agents", "action")])
@pytest.mark.parametrize("batch", [(), (2, 3)])
def test_formula_and_keys(key: str | tuple[str, str], batch: tuple[int, ...]) -> None:
    x = torch.randn(*batch, 4, dtype=torch.float64)
    td = TensorDict({key: x}, batch_size=batch)
    TanhModule([key], ["out"], low=-2.0, high=1.0)(td)
    expected = [-2.0 + 3.0 * (math.tanh(v) + 1.0) / 2.0 for v in x.flatten().tolist()]
    torch.testing.assert_close(td["out"].flatten(), torch.tensor(expected, dtype=torch.float64))
    torch.testing.assert_close(td[key], x)  # the input stays when out_keys differ


def test_defaults_in_place_and_spec_bounds() -> None:
    td = TensorDict(action=torch.tensor([0.5, -30.0]))
    TanhModule(["action"])(td)
    torch.testing.assert_close(td["action"], torch.tensor([math.tanh(0.5), -1.0]))
    spec = Bounded(torch.tensor([0.0, -4.0]), torch.tensor([2.0, 4.0]), shape=(2,))
    out = TanhModule("action", spec=spec)(TensorDict(action=torch.zeros(2)))["action"]
    torch.testing.assert_close(out, torch.tensor([1.0, 0.0]))


def test_composite_spec_per_key() -> None:
    spec = Composite(a=Bounded(-3.0, 0.0, shape=()), b=Bounded(0.0, 3.0, shape=()))
    mod = TanhModule(["a", "b"], spec=spec)
    td = mod(TensorDict(a=torch.zeros(()), b=torch.zeros(())))
    assert (td["a"].item(), td["b"].item()) == (-1.5, 1.5)
    assert set(mod.state_dict()) == {"a_low", "a_high", "b_low", "b_high"}


def test_clamp_keeps_values_off_the_bounds() -> None:
    x = torch.tensor([50.0, -50.0])
    eps = torch.finfo(torch.float32).resolution
    plain = TanhModule(["x"])(TensorDict(x=x.clone()))["x"]
    clamped = TanhModule(["x"], clamp=True)(TensorDict(x=x.clone()))["x"]
    assert plain.tolist() == [1.0, -1.0]
    torch.testing.assert_close(clamped, torch.tensor([1.0 - eps, -1.0 + eps]))


def test_errors() -> None:
    with pytest.raises(ValueError, match="differ in length"):
        TanhModule(["a", "b"], ["c"])
    with pytest.raises(ValueError, match="high < low"):
        TanhModule(["a"], low=1.0, high=0.0)
    with pytest.raises(ValueError, match="disagrees with the spec"):
        TanhModule(["a"], spec=Bounded(-1.0, 1.0, shape=()), low=-2.0)
    with pytest.raises(TypeError, match="has no bounds"):
        TanhModule(["a"], spec=Unbounded(shape=()))
