"""set_gym_backend / gym_backend: TorchRL's backend switch, gymnasium only."""

from __future__ import annotations

import types

import gymnasium
import pytest

import tdrl.envs
import tdrl.envs.libs
import tdrl.envs.libs.gym
from tdrl.envs.libs.gym import GymEnv, gym_backend, set_gym_backend


def test_exported_where_torchrl_scripts_import_them():
    for module in (tdrl.envs, tdrl.envs.libs, tdrl.envs.libs.gym):
        assert module.set_gym_backend is set_gym_backend
        assert module.gym_backend is gym_backend
        assert {"set_gym_backend", "gym_backend"} <= set(module.__all__)


@pytest.mark.parametrize(
    "backend", ["gymnasium", gymnasium, lambda: gymnasium], ids=["name", "module", "callable"]
)
def test_gymnasium_as_context_manager_decorator_and_set(backend):
    with set_gym_backend(backend):
        assert gym_backend() is gymnasium
        env = GymEnv("CartPole-v1")
        assert env.rollout(2).batch_size == (2,)

    @set_gym_backend(backend)
    def make_spaces():
        return gym_backend("spaces")

    assert make_spaces() is gymnasium.spaces
    assert make_spaces() is gymnasium.spaces  # a decorator works on every call
    switch = set_gym_backend(backend)
    switch.set()
    assert switch.backend is gymnasium and switch.clone().backend is gymnasium


_LEGACY_GYM = types.ModuleType("gym")


@pytest.mark.parametrize(
    ("backend", "got"),
    [("gym", "'gym'"), (_LEGACY_GYM, "module 'gym'"), ("gymnasium_robotics", "'gymnasium_")],
    ids=["gym-name", "gym-module", "other-name"],
)
def test_other_backends_raise_at_once_naming_them(backend, got):
    with pytest.raises(ValueError, match=rf"tdrl wraps gymnasium only \(got {got}.*'gymnasium'"):
        set_gym_backend(backend)


def test_a_callable_returning_another_backend_raises_when_used():
    switch = set_gym_backend(lambda: _LEGACY_GYM)  # TorchRL calls it when used, not before
    with pytest.raises(ValueError, match="got module 'gym'"), switch:
        pass

    @set_gym_backend(lambda: _LEGACY_GYM)
    def run():
        return "ran"

    with pytest.raises(ValueError, match="gymnasium only"):
        run()
    with pytest.raises(ValueError, match="gymnasium only"):
        set_gym_backend(42)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["spaces", ".spaces", "vector.utils", "wrappers"])
def test_gym_backend_submodules(name):
    assert gym_backend(name).__name__ == "gymnasium." + name.lstrip(".")
