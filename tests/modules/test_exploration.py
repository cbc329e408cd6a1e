"""Tests of the exploration type and of the exploration modules."""

from __future__ import annotations

import math

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import InteractionType, set_interaction_type

from tdrl.envs.transforms import InitTracker, TransformedEnv
from tdrl.modules import (
    AdditiveGaussianModule,
    EGreedyModule,
    ExplorationType,
    OrnsteinUhlenbeckProcessModule,
    exploration_type,
    set_exploration_type,
)
from tdrl.specs import Bounded, Categorical, Composite, OneHot, Unbounded
from tdrl.testing import CountingEnv

BATCHES = [(), (2, 3)]
NON_RANDOM = [ExplorationType.DETERMINISTIC, ExplorationType.MODE, ExplorationType.MEAN]


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)


class TestExplorationType:
    def test_default_is_random(self) -> None:
        assert exploration_type() is ExplorationType.RANDOM

    def test_nesting_restores(self) -> None:
        with set_exploration_type("DETERMINISTIC"):
            with set_exploration_type(ExplorationType.MEAN):
                assert exploration_type() is ExplorationType.MEAN
            assert exploration_type() is ExplorationType.DETERMINISTIC
        assert exploration_type() is ExplorationType.RANDOM

    def test_decorator_reentrant(self) -> None:
        @set_exploration_type(ExplorationType.MODE)
        def inner(depth: int) -> list[ExplorationType]:
            here = [exploration_type()]
            return here + inner(depth - 1) if depth else here

        assert inner(2) == [ExplorationType.MODE] * 3
        assert exploration_type() is ExplorationType.RANDOM

    def test_sets_tensordict_interaction_type(self) -> None:
        with set_exploration_type(ExplorationType.DETERMINISTIC):
            from tensordict.nn import interaction_type

            assert interaction_type() is InteractionType.DETERMINISTIC
        with set_interaction_type(InteractionType.MEAN):
            assert exploration_type() is ExplorationType.MEAN

    def test_unknown(self) -> None:
        with pytest.raises(ValueError, match="unknown exploration type"):
            set_exploration_type("greedy")


def _discrete_td(batch: tuple[int, ...], one_hot: bool, mask: torch.Tensor, n: int) -> TensorDict:
    n_draws = 2000
    shape = (*batch, n_draws)
    action = (
        torch.zeros(*shape, n, dtype=torch.bool)
        if one_hot
        else torch.zeros(shape, dtype=torch.int64)
    )
    if one_hot:
        action[..., 0] = True
    return TensorDict(action=action, action_mask=mask.expand(*shape, n), batch_size=shape)


class TestEGreedy:
    @pytest.mark.parametrize("batch", BATCHES)
    @pytest.mark.parametrize("one_hot", [False, True])
    def test_eps_one_respects_data_mask_and_covers_allowed(self, batch, one_hot) -> None:
        n = 5
        mask = torch.tensor([False, True, False, True, True])
        spec = OneHot(n) if one_hot else Categorical(n)
        module = EGreedyModule(spec, eps_init=1.0, action_mask_key="action_mask")
        out = module(_discrete_td(batch, one_hot, mask, n))
        index = out["action"].long().argmax(-1) if one_hot else out["action"]
        assert set(index.unique().tolist()) == {1, 3, 4}
        assert spec.mask is None  # the given spec is left alone

    def test_combines_spec_mask_and_data_mask(self) -> None:
        spec = Categorical(4, mask=torch.tensor([True, True, False, True]))
        module = EGreedyModule(spec, action_mask_key="action_mask")
        data_mask = torch.tensor([False, True, True, True])
        out = module(_discrete_td((), False, data_mask, 4))
        assert set(out["action"].unique().tolist()) == {1, 3}

    def test_spec_mask_alone(self) -> None:
        spec = OneHot(4, mask=torch.tensor([False, False, True, False]))
        td = TensorDict(action=torch.zeros(500, 4, dtype=torch.bool), batch_size=[500])
        assert bool(EGreedyModule(spec)(td)["action"][:, 2].all())

    def test_batched_spec(self) -> None:
        spec = Categorical(3, shape=(4,))
        mask = torch.tensor([[True, False, False]] * 2 + [[False, False, True]] * 2)
        td = TensorDict(action=torch.ones(4, dtype=torch.int64), action_mask=mask, batch_size=[4])
        assert EGreedyModule(spec, action_mask_key="action_mask")(td)["action"].tolist() == [
            0,
            0,
            2,
            2,
        ]

    def test_eps_frequency_and_zero(self) -> None:
        spec = Categorical(1000)
        td = TensorDict(action=torch.full((4000,), -1), batch_size=[4000])
        out = EGreedyModule(spec, eps_init=0.3)(td.clone())
        assert abs((out["action"] != -1).float().mean().item() - 0.3) < 0.04
        out = EGreedyModule(spec, eps_init=0.0, eps_end=0.0)(td.clone())
        assert bool((out["action"] == -1).all())

    def test_annealing(self) -> None:
        module = EGreedyModule(Categorical(2), eps_init=1.0, eps_end=0.2, annealing_num_steps=10)
        module.step()
        assert module.eps.item() == pytest.approx(0.92)
        module.step(4)
        assert module.eps.item() == pytest.approx(0.6)
        module.step(100)
        assert module.eps.item() == pytest.approx(0.2)
        assert "eps" in module.state_dict()

    def test_torchrl_positional_order_and_device(self) -> None:
        # (spec, eps_init, eps_end, annealing_num_steps)
        module = EGreedyModule(Categorical(2), 1.0, 0.5, 5, device="meta")
        assert (module.eps_end, module.annealing_num_steps) == (0.5, 5)
        assert module.eps.device.type == "meta" and module.spec.device.type == "meta"
        with pytest.raises(ValueError, match="eps_end is larger than eps_init"):
            EGreedyModule(Categorical(2), 0.1, 0.5)

    @pytest.mark.parametrize("etype", NON_RANDOM)
    def test_off_unless_random(self, etype) -> None:
        module = EGreedyModule(Categorical(10), eps_init=1.0)
        td = TensorDict(action=torch.zeros(100, dtype=torch.int64), batch_size=[100])
        with set_exploration_type(etype):
            assert bool((module(td)["action"] == 0).all())

    def test_nested_key_per_agent_draws(self) -> None:
        key = ("agents", "action")
        spec = Composite(agents=Composite(action=Categorical(50, shape=(3,)), shape=(3,)))
        module = EGreedyModule(spec, eps_init=0.5, action_key=key)
        td = TensorDict(batch_size=[400])
        td["agents"] = TensorDict(action=torch.full((400, 3), -1), batch_size=[400, 3])
        changed = module(td)["agents", "action"] != -1
        frac = changed.float().mean(0)
        assert bool(((frac > 0.4) & (frac < 0.6)).all())
        assert bool((changed.any(-1) & ~changed.all(-1)).any())  # agents draw separately

    def test_errors(self) -> None:
        with pytest.raises(ValueError, match="must be a probability"):
            EGreedyModule(Categorical(2), eps_init=1.5)
        with pytest.raises(TypeError, match="needs a discrete action spec"):
            EGreedyModule(Bounded(0.0, 1.0, shape=(2,)), action_mask_key="action_mask")
        with pytest.raises(ValueError, match="annealing_num_steps must be positive"):
            EGreedyModule(Categorical(2), annealing_num_steps=0)
        module = EGreedyModule(Categorical(2), action_mask_key="action_mask")
        td = TensorDict(action=torch.zeros(3, dtype=torch.int64), batch_size=[3])
        with pytest.raises(KeyError, match="action mask is missing"):
            module(td)


class TestAdditiveGaussian:
    @pytest.mark.parametrize("batch", BATCHES)
    def test_inside_spec(self, batch) -> None:
        spec = Bounded(-1.0, 1.0, shape=(2,))
        module = AdditiveGaussianModule(spec, sigma_init=5.0)
        out = module(TensorDict(action=torch.zeros(*batch, 2), batch_size=batch))
        assert spec.is_in(out["action"]) and bool((out["action"] != 0).any())

    def test_noise_statistics_and_annealing(self) -> None:
        module = AdditiveGaussianModule(
            Unbounded(shape=(1,)), 2.0, sigma_end=0.5, annealing_num_steps=3, mean=1.0, std=0.5
        )
        action = module(TensorDict(action=torch.zeros(20000, 1), batch_size=[20000]))["action"]
        assert action.mean().item() == pytest.approx(2.0, abs=0.05)
        assert action.std().item() == pytest.approx(1.0, abs=0.05)
        module.step(2)
        assert module.sigma.item() == pytest.approx(1.0)

    @pytest.mark.parametrize("etype", NON_RANDOM)
    def test_off_unless_random(self, etype) -> None:
        module = AdditiveGaussianModule(Unbounded(shape=(2,)))
        td = TensorDict(action=torch.zeros(4, 2), batch_size=[4])
        with set_exploration_type(etype):
            assert bool((module(td)["action"] == 0).all())

    def test_torchrl_positional_order_lazy_spec_and_device(self) -> None:
        # (spec, sigma_init, sigma_end, annealing_num_steps, mean, std)
        module = AdditiveGaussianModule(None, 2.0, 1.0, 2, 0.0, 1.0, device="meta")
        assert module.sigma.device.type == "meta"
        td = TensorDict(action=torch.zeros(3, 2), batch_size=[3])
        with pytest.raises(RuntimeError, match="spec is not set"):
            module(td)
        module = AdditiveGaussianModule(None, 2.0, 1.0, 2, 0.0, 1.0)
        module.spec = Bounded(-1.0, 1.0, shape=(2,))
        assert module.spec.is_in(module(td)["action"])
        module.step(1)
        assert module.sigma.item() == pytest.approx(1.5)
        with pytest.raises(ValueError, match="sigma_end is larger than sigma_init"):
            AdditiveGaussianModule(Unbounded(shape=(2,)), 0.1, 0.2)


class TestOrnsteinUhlenbeck:
    def _expected(self, prev: torch.Tensor, mod: OrnsteinUhlenbeckProcessModule) -> torch.Tensor:
        drift = (mod.mu - prev) * mod.theta * mod.dt
        return prev + drift + mod.sigma * math.sqrt(mod.dt) * torch.randn_like(prev)

    @pytest.mark.parametrize("batch", BATCHES)
    def test_update_and_reset_where_is_init(self, batch) -> None:
        spec = Unbounded(shape=(2,))
        ou = OrnsteinUhlenbeckProcessModule(spec, sigma=0.5, x0=0.1)
        stored = torch.full((*batch, 2), 3.0)  # TorchRL keeps the noise relative to x0
        is_init = torch.rand(*batch, 1) < 0.5
        td = TensorDict(
            action=torch.zeros(*batch, 2),
            _ou_prev_noise=stored,
            is_init=is_init,
            _ou_steps=torch.full((*batch, 1), 7),
            batch_size=batch,
        )
        torch.manual_seed(1)
        out = ou(td)
        torch.manual_seed(1)
        expected = self._expected(torch.where(is_init, 0.0, stored) + 0.1, ou)
        torch.testing.assert_close(out["_ou_prev_noise"], expected - 0.1)
        torch.testing.assert_close(out["action"], expected)  # eps_init = 1
        torch.testing.assert_close(out["_ou_steps"], torch.where(is_init, 1, 8))

    def test_torchrl_positional_order_and_eps_annealing(self) -> None:
        # (spec, eps_init, eps_end, annealing_num_steps, theta, mu, sigma, dt, x0)
        ou = OrnsteinUhlenbeckProcessModule(Unbounded(shape=(1,)), 0.5, 0.1, 4, 0.3, 0.0, 1.0, 1.0)
        assert (ou.theta, ou.sigma, ou.dt) == (0.3, 1.0, 1.0)
        td = TensorDict(action=torch.zeros(20000, 1), batch_size=[20000])
        out = ou(td)
        # action = eps * noise; the first noise is sigma * sqrt(dt) * N(0, 1)
        torch.testing.assert_close(out["action"], 0.5 * out["_ou_prev_noise"])
        ou.step(2)
        assert ou.eps.item() == pytest.approx(0.5 - 2 * (0.5 - 0.1) / 4)
        ou.step(10)
        assert ou.eps.item() == pytest.approx(0.1)
        with pytest.raises(ValueError, match="eps_end is larger than eps_init"):
            OrnsteinUhlenbeckProcessModule(Unbounded(shape=(1,)), 0.1, 0.5)

    def test_safe_projects_only_when_true(self) -> None:
        spec = Bounded(-0.1, 0.1, shape=(1,))
        kwargs = {"sigma": 10.0, "dt": 1.0}
        td = TensorDict(action=torch.zeros(200, 1), batch_size=[200])
        assert spec.is_in(OrnsteinUhlenbeckProcessModule(spec, **kwargs)(td.clone())["action"])
        loose = OrnsteinUhlenbeckProcessModule(spec, safe=False, **kwargs)(td.clone())["action"]
        assert loose.abs().max().item() > 0.1

    def test_state_travels_in_rollout(self) -> None:
        env = CountingEnv(batch_size=(3,), max_steps=10)
        ou = OrnsteinUhlenbeckProcessModule(env.action_spec, sigma=1.0)

        def policy(td: TensorDict) -> TensorDict:
            return ou(td.set("action", torch.full((3, 1), 0.5)))

        rollout = env.rollout(6, policy)
        assert rollout["_ou_steps"][0, :, 0].tolist() == [1, 2, 3, 4, 5, 6]
        assert bool(((rollout["action"] >= 0) & (rollout["action"] <= 1)).all())
        noise = rollout["_ou_prev_noise"]
        assert not torch.equal(noise[:, 1], noise[:, 0])

    def test_resets_with_init_tracker_in_rollout(self) -> None:
        env = TransformedEnv(CountingEnv(batch_size=(2,), max_steps=3), InitTracker())
        ou = OrnsteinUhlenbeckProcessModule(env.action_spec, sigma=1.0, x0=0.0)

        def policy(td: TensorDict) -> TensorDict:
            return ou(td.set("action", torch.full((2, 1), 0.5)))

        rollout = env.rollout(8, policy, break_when_any_done=False)
        assert rollout["_ou_steps"][0, :, 0].tolist() == [1, 2, 3, 1, 2, 3, 1, 2]

    def test_sigma_annealing(self) -> None:
        ou = OrnsteinUhlenbeckProcessModule(
            Unbounded(shape=(1,)), theta=0.0, sigma=1.0, dt=1.0, sigma_min=0.0, n_steps_annealing=10
        )
        td = TensorDict(
            action=torch.zeros(20000, 1),
            _ou_prev_noise=torch.zeros(20000, 1),
            _ou_steps=torch.full((20000, 1), 5),
            batch_size=[20000],
        )
        assert ou(td)["_ou_prev_noise"].std().item() == pytest.approx(0.5, abs=0.02)

    @pytest.mark.parametrize("etype", NON_RANDOM)
    def test_off_unless_random(self, etype) -> None:
        ou = OrnsteinUhlenbeckProcessModule(Unbounded(shape=(2,)))
        td = TensorDict(action=torch.zeros(4, 2), batch_size=[4])
        with set_exploration_type(etype):
            out = ou(td)
        assert bool((out["action"] == 0).all()) and "_ou_prev_noise" not in out.keys()

    def test_nested_keys(self) -> None:
        ou = OrnsteinUhlenbeckProcessModule(
            Bounded(-1.0, 1.0, shape=(2,)), action_key=("agents", "action")
        )
        td = TensorDict(batch_size=[4])
        td["agents"] = TensorDict(action=torch.zeros(4, 3, 2), batch_size=[4, 3])
        out = ou(td)
        assert out["agents", "_ou_prev_noise"].shape == (4, 3, 2)
        assert out["agents", "_ou_steps"].shape == (4, 3, 1)
