"""PixelRenderTransform: render() images as "pixels", with their spec."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tdrl.envs import GymEnv, SerialEnv, check_env_specs
from tdrl.envs.transforms import StepCounter, TransformedEnv
from tdrl.record import PixelRenderTransform
from tdrl.specs import NonTensor, Unbounded
from tdrl.testing import TransformContract, TransformTestEnv


class RenderingEnv(TransformTestEnv):
    """TransformTestEnv with a render() drawing its step counters: ``[*B, 4, 5, 3]`` uint8."""

    def render(self):
        t = self._t.reshape(*self.batch_size, 1, 1, 1)
        base = torch.arange(4 * 5 * 3).reshape(4, 5, 3)
        return ((t * 11 + base) % 256).to(torch.uint8).numpy()


class SingleImageEnv(TransformTestEnv):
    """A batched env whose render() returns one ``[4, 5, 3]`` image for the whole batch."""

    def render(self, mode="rgb_array"):
        assert mode == "rgb_array"
        return np.full((4, 5, 3), int(self._t.sum()) % 256, dtype=np.uint8)


class TestPixelRenderContract(TransformContract):
    layouts = ("flat",)
    forward_mode = "raises"  # rendering needs the env

    def make_env(self, layout, batch_size):
        return RenderingEnv(batch_size)

    def make_transform(self, layout):
        return PixelRenderTransform(out_keys=["render"])

    def test_contract_env_specs(self, factory, layout, batch_size):
        if not factory.batched:
            super().test_contract_env_specs(factory, layout, batch_size)
            return
        # a batched env has no render(): tdrl envs do not forward attributes to the workers
        base = factory.build(lambda: self.make_env(layout, batch_size))
        with pytest.raises(ValueError, match=r"cannot render .*no callable 'render'"):
            TransformedEnv(base, self.make_transform(layout))
        base.close()


def _expected(t, batch=()):
    base = torch.arange(4 * 5 * 3).reshape(4, 5, 3)
    return ((torch.as_tensor(t).reshape(*batch, 1, 1, 1) * 11 + base) % 256).to(torch.uint8)


def test_spec_and_data_follow_render():
    env = TransformedEnv(RenderingEnv((2,)), PixelRenderTransform())
    spec = env.observation_spec["pixels"]
    assert isinstance(spec, Unbounded) and spec.shape == (2, 4, 5, 3) and spec.dtype == torch.uint8
    td = env.rollout(3)
    assert torch.equal(td["pixels"][:, 0], _expected([0, 0], (2,)))
    assert torch.equal(td["next", "pixels"][:, 2], _expected([3, 3], (2,)))
    check_env_specs(env)


def test_after_other_transforms_renders_the_base_env():
    env = TransformedEnv(RenderingEnv(), StepCounter()).append_transform(PixelRenderTransform())
    td = env.rollout(2)
    assert torch.equal(td["next", "pixels"][1], _expected(2))


def test_single_image_of_a_batched_env_is_non_tensor_data():
    env = TransformedEnv(SingleImageEnv((3,)), PixelRenderTransform(mode="rgb_array"))
    assert isinstance(env.observation_spec["pixels"], NonTensor)
    td = env.rollout(2)
    image = td[0, 1]["next", "pixels"]
    assert np.asarray(image).shape == (4, 5, 3) and int(np.asarray(image)[0, 0, 0]) == 6


def test_preproc_and_pass_tensordict():
    seen = []

    class StatelessRender(RenderingEnv):
        def draw(self, td, scale=1):
            seen.append(sorted(td.keys()))
            return self.render() * scale

    t = PixelRenderTransform(
        render_method="draw",
        pass_tensordict=True,
        preproc=lambda a: a[:2],
        scale=2,
    )
    env = TransformedEnv(StatelessRender(), t)
    assert env.observation_spec["pixels"].shape == (2, 5, 3)
    td = env.rollout(1)
    assert torch.equal(td["next", "pixels"][0], (_expected(1) * 2)[:2])
    assert "observation" in seen[-1]  # the data of the step it renders


def test_switch_turns_rendering_off_and_on():
    t = PixelRenderTransform(out_keys="render")
    env = TransformedEnv(RenderingEnv(max_steps=50), t)
    td = env.step_mdp(env.step(env.rand_action(env.reset())))
    t.switch()
    assert not t.enabled
    out = env.step(env.rand_action(td))
    assert "render" not in out["next"].keys()
    t.switch("on")
    assert t.enabled and "render" in env.step(env.rand_action(td))["next"].keys()
    with pytest.raises(ValueError, match="unknown mode"):
        t.switch("dim")


def test_errors():
    with pytest.raises(ValueError, match="cannot render"):
        TransformedEnv(TransformTestEnv(), PixelRenderTransform())
    with pytest.raises(ValueError, match="expected one out_key"):
        PixelRenderTransform(out_keys=["a", "b"])

    class NoneRender(RenderingEnv):
        def render(self):
            return None

    with pytest.raises(RuntimeError, match=r"render\(\) returned None"):
        TransformedEnv(NoneRender(), PixelRenderTransform())
    with pytest.raises(RuntimeError, match="PixelRenderTransform"):
        PixelRenderTransform()(TransformTestEnv().reset())


def test_gym_render_mode_rgb_array():
    base = GymEnv("CartPole-v1", render_mode="rgb_array")
    env = base.append_transform(PixelRenderTransform())
    assert env.observation_spec["pixels"].shape == (400, 600, 3)
    env.set_seed(0)
    td = env.rollout(3)
    assert td["next", "pixels"].shape == (3, 400, 600, 3)
    assert torch.equal(td["next", "pixels"][-1], torch.as_tensor(base.env.render()))
    env.close()


def test_gym_vector_env_renders_one_image_per_member():
    env = GymEnv("CartPole-v1", num_envs=2, render_mode="rgb_array")
    env = env.append_transform(PixelRenderTransform())
    assert env.observation_spec["pixels"].shape == (2, 400, 600, 3)
    env.close()


def test_inside_serial_env_workers():
    env = SerialEnv(2, lambda: TransformedEnv(RenderingEnv(), PixelRenderTransform()))
    td = env.rollout(2)
    assert td["next", "pixels"].shape == (2, 2, 4, 5, 3)
    env.close()
