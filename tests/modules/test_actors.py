"""Tests of Actor, ValueOperator, ProbabilisticActor, QValueModule/QValueActor, ActorCriticOperator."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule
from torch import nn

from tdrl.modules import (
    MLP,
    Actor,
    ActorCriticOperator,
    ActorCriticWrapper,
    ActorValueOperator,
    ExplorationType,
    IndependentNormal,
    NormalParamExtractor,
    OneHotCategorical,
    ProbabilisticActor,
    QValueActor,
    QValueModule,
    TanhNormal,
    ValueOperator,
    set_exploration_type,
)
from tdrl.specs import Bounded, Categorical, Composite, OneHot, Unbounded

BATCHES = [(), (2, 3)]
KEYS = [("observation", "action"), (("agents", "observation"), ("agents", "action"))]


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)


def _td(batch: tuple[int, ...], key: object = "observation", dim: int = 3) -> TensorDict:
    td = TensorDict(batch_size=batch)
    td.set(key, torch.randn(*batch, dim) * 10)  # type: ignore[arg-type]
    return td


class TestActor:
    @pytest.mark.parametrize("batch", BATCHES)
    @pytest.mark.parametrize(("obs_key", "act_key"), KEYS)
    def test_output_inside_bounded_spec(self, batch, obs_key, act_key) -> None:
        spec = Bounded(-0.5, 0.5, shape=(2,))
        actor = Actor(nn.Linear(3, 2), in_keys=[obs_key], out_keys=[act_key], spec=spec, safe=True)
        out = actor(_td(batch, obs_key))
        assert out[act_key].shape == (*batch, 2)
        assert spec.is_in(out[act_key])
        assert bool((out[act_key].abs() == 0.5).any())  # the net's outputs were clamped

    def test_composite_spec_projects_listed_keys_only(self) -> None:
        class Two(nn.Module):
            def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
                return x * 100, x * 100

        spec = Composite(action=Bounded(-1.0, 1.0, shape=(3,)))
        actor = Actor(Two(), out_keys=["action", "other"], spec=spec, safe=True)
        out = actor(_td((4,)))
        assert spec["action"].is_in(out["action"])
        assert out["other"].abs().max() > 1

    def test_not_safe_by_default(self) -> None:
        # TorchRL: Actor(spec=...) only describes the outputs; safe=True projects them.
        lin = nn.Linear(3, 2)
        actor = Actor(lin, spec=Bounded(-1.0, 1.0, shape=(2,)))
        td = _td((5,))
        torch.testing.assert_close(actor(td)["action"], lin(td["observation"]))
        assert actor.safe is False and td["action"].abs().max() > 1
        assert isinstance(actor.spec, Composite) and list(actor.spec.keys()) == ["action"]
        assert isinstance(actor.spec["action"], Bounded)

    def test_leaf_spec_is_the_action_spec(self) -> None:
        # TorchRL wraps a leaf spec as Composite(action=spec) when "action" is an out key,
        # wherever it sits among the out keys.
        actor = Actor(nn.Linear(3, 4), out_keys=["other", "action"], spec=OneHot(4))
        assert list(actor.spec.keys()) == ["action"]
        with pytest.raises(ValueError, match="one leaf spec for several out keys"):
            Actor(nn.Linear(3, 4), out_keys=["a", "b"], spec=OneHot(4))
        with pytest.raises(ValueError, match="safe=True needs a spec"):
            Actor(nn.Linear(3, 2), safe=True)

    def test_no_spec_keeps_output(self) -> None:
        lin = nn.Linear(3, 2)
        td = _td((5,))
        torch.testing.assert_close(Actor(lin)(td)["action"], lin(td["observation"]))

    def test_kwargs_call(self) -> None:
        actor = Actor(nn.Linear(3, 2), spec=Bounded(-1.0, 1.0, shape=(2,)), safe=True)
        action = actor(observation=torch.full((4, 3), 50.0))
        assert action.shape == (4, 2) and bool((action.abs() <= 1).all())


class TestValueOperator:
    def test_default_out_keys(self) -> None:
        assert ValueOperator(nn.Linear(3, 1)).out_keys == ["state_value"]
        q = ValueOperator(MLP(5, 1, num_cells=4), in_keys=["observation", "action"])
        assert q.out_keys == ["state_action_value"]
        td = _td((2, 3)).set("action", torch.randn(2, 3, 2))
        assert q(td)["state_action_value"].shape == (2, 3, 1)

    def test_nested_keys(self) -> None:
        v = ValueOperator(
            nn.Linear(3, 1),
            in_keys=[("agents", "observation")],
            out_keys=[("agents", "state_value")],
        )
        assert v(_td((4,), ("agents", "observation")))["agents", "state_value"].shape == (4, 1)


def _prob_actor(spec=None, obs_key="observation", act_key="action", **kw) -> ProbabilisticActor:
    params = TensorDictModule(
        nn.Sequential(MLP(3, 4, num_cells=8), NormalParamExtractor()), [obs_key], ["loc", "scale"]
    )
    kw.setdefault("distribution_class", TanhNormal)
    return ProbabilisticActor(params, ["loc", "scale"], spec=spec, out_keys=[act_key], **kw)


class TestProbabilisticActor:
    @pytest.mark.parametrize("batch", BATCHES)
    @pytest.mark.parametrize(("obs_key", "act_key"), KEYS)
    def test_log_prob_matches_dist(self, batch, obs_key, act_key) -> None:
        actor = _prob_actor(Bounded(-2.0, 3.0, shape=(2,)), obs_key, act_key, return_log_prob=True)
        out = actor(_td(batch, obs_key))
        lp_key = (
            (*act_key[:-1], "action_log_prob") if isinstance(act_key, tuple) else "action_log_prob"
        )
        assert out[lp_key].shape == batch
        dist = actor.get_dist(out)
        torch.testing.assert_close(out[lp_key], dist.log_prob(out[act_key]), atol=1e-4, rtol=1e-4)

    def test_kwargs_call(self) -> None:
        actor = _prob_actor(Bounded(-2.0, 3.0, shape=(2,)))
        outputs = actor(observation=torch.zeros(4, 3))  # one tensor per out key
        assert outputs[actor.out_keys.index("action")].shape == (4, 2)

    def test_default_distribution_is_delta(self) -> None:
        # TorchRL: no distribution_class means a Delta on the "param" entry.
        net = TensorDictModule(nn.Linear(3, 2), ["observation"], ["param"])
        actor = ProbabilisticActor(net, ["param"])
        td = _td((4,))
        out = actor(td.clone())
        torch.testing.assert_close(out["action"], net.module(td["observation"]))
        assert actor.get_dist(td).log_prob(out["action"]).eq(0).all()

    def test_custom_log_prob_key(self) -> None:
        actor = _prob_actor(return_log_prob=True, log_prob_key="lp")
        assert "lp" in actor(_td((3,))).keys()

    def test_samples_under_random_inside_spec_bounds(self) -> None:
        spec = Bounded(-2.0, 3.0, shape=(2,))
        actor = _prob_actor(spec)
        td = _td((200,))
        with set_exploration_type(ExplorationType.RANDOM):
            a1, a2 = actor(td.clone())["action"], actor(td.clone())["action"]
        assert not torch.equal(a1, a2)
        assert spec.is_in(a1) and a1.max() > 1.0  # the spec's high (3), not TanhNormal's 1
        dist = actor.get_dist(td)
        assert dist.low.item() == -2.0 and dist.high.item() == 3.0

    def test_explicit_bounds_win_over_spec(self) -> None:
        actor = _prob_actor(Bounded(-2.0, 3.0, shape=(2,)), distribution_kwargs={"low": -1.0})
        dist = actor.get_dist(_td((2,)))
        assert dist.low.item() == -1.0 and dist.high.item() == 3.0

    def test_per_dim_bounds(self) -> None:
        spec = Bounded(torch.tensor([-1.0, 0.0]), torch.tensor([1.0, 5.0]))
        actor = _prob_actor(spec)
        with set_exploration_type(ExplorationType.RANDOM):
            assert spec.is_in(actor(_td((100,)))["action"])

    @pytest.mark.parametrize(
        ("etype", "attr"),
        [
            (ExplorationType.DETERMINISTIC, "deterministic_sample"),
            (ExplorationType.MODE, "mode"),
            (ExplorationType.MEAN, "mean"),
        ],
    )
    def test_non_random_types(self, etype, attr) -> None:
        actor = _prob_actor(Bounded(-2.0, 3.0, shape=(2,)))
        td = _td((2, 3))
        with set_exploration_type(etype):
            out = actor(td.clone())
        torch.testing.assert_close(out["action"], getattr(actor.get_dist(td), attr))

    def test_discrete_distribution(self) -> None:
        params = TensorDictModule(nn.Linear(3, 4), ["observation"], ["logits"])
        actor = ProbabilisticActor(
            params,
            ["logits"],
            distribution_class=OneHotCategorical,
            spec=OneHot(4),
            return_log_prob=True,
        )
        out = actor(_td((6,)))
        assert OneHot(4).is_in(out["action"].bool())
        torch.testing.assert_close(
            out["action_log_prob"], actor.get_dist(out).log_prob(out["action"])
        )

    def test_dict_in_keys(self) -> None:
        params = TensorDictModule(
            nn.Sequential(nn.Linear(3, 4), NormalParamExtractor()), ["observation"], ["m", "s"]
        )
        actor = ProbabilisticActor(
            params, {"loc": "m", "scale": "s"}, distribution_class=IndependentNormal
        )
        assert actor(_td((2,)))["action"].shape == (2, 2)


class TestQValue:
    @pytest.mark.parametrize("batch", BATCHES)
    @pytest.mark.parametrize("space", ["one_hot", "categorical"])
    def test_never_picks_masked_action(self, batch, space) -> None:
        n = 5
        values = torch.randn(*batch, 64, n)
        mask = torch.rand(*batch, 64, n) < 0.5
        mask[..., 0] = True
        values = values.masked_fill(~mask, 1e30)  # masked actions look best
        td = TensorDict(action_value=values, action_mask=mask, batch_size=(*batch, 64))
        out = QValueModule(space)(td)
        index = out["action"].long().argmax(-1) if space == "one_hot" else out["action"]
        assert bool(mask.gather(-1, index.unsqueeze(-1)).all())
        best = values.masked_fill(~mask, float("-inf")).max(-1, keepdim=True).values
        torch.testing.assert_close(out["chosen_action_value"], best)

    def test_plus_inf_masked_value(self) -> None:
        td = TensorDict(
            action_value=torch.tensor([[float("inf"), 0.0]]),
            action_mask=torch.tensor([[False, True]]),
            batch_size=[1],
        )
        assert QValueModule("categorical")(td)["action"].item() == 1

    @pytest.mark.parametrize("batch", BATCHES)
    @pytest.mark.parametrize(
        "spec",
        [OneHot(4), OneHot(4, dtype=torch.int64), Categorical(4), Categorical(4, shape=(1,))],
    )
    def test_outputs_match_spec(self, batch, spec) -> None:
        actor = QValueActor(nn.Linear(3, 4), spec=spec)
        out = actor(_td(batch))
        # TorchRL: int64 actions whatever the spec's dtype (OneHot is boolean by default).
        assert out["action"].dtype == torch.int64
        assert spec.is_in(out["action"].to(spec.dtype))
        assert actor.spec["action"] is not None and actor.action_space in ("one_hot", "categorical")
        assert out["action"].shape == (*batch, *spec.shape)
        assert out["chosen_action_value"].shape == (*batch, 1)
        torch.testing.assert_close(
            out["chosen_action_value"], out["action_value"].max(-1, keepdim=True).values
        )

    def test_defaults_without_spec(self) -> None:
        # TorchRL's one-hot actions are int64 when no spec gives the dtype.
        out = QValueActor(nn.Linear(3, 4), action_space="one_hot")(_td((2,)))
        assert out["action"].dtype == torch.int64
        assert out["action"].sum(-1).tolist() == [1, 1]
        out = QValueActor(nn.Linear(3, 4), action_space="categorical")(_td((2,)))
        assert out["action"].dtype == torch.int64 and out["action"].shape == (2,)

    def test_nested_keys_and_composite_spec(self) -> None:
        key = ("agents", "action")
        spec = Composite(agents=Composite(action=OneHot(4)))
        actor = QValueActor(
            nn.Linear(3, 4),
            [("agents", "observation")],
            spec=spec,
            action_key=key,
            action_value_key=("agents", "action_value"),
            action_mask_key=("agents", "action_mask"),
        )
        td = _td((2, 3), ("agents", "observation"))
        td["agents", "action_mask"] = torch.zeros(2, 3, 4, dtype=torch.bool)
        td["agents", "action_mask"][..., 2] = True
        out = actor(td)
        assert bool(out["agents", "action"][..., 2].all())

    @pytest.mark.parametrize("n_agents", [1, 3])
    def test_categorical_group_actions_take_the_spec_shape(self, n_agents) -> None:
        # A group's Composite holds the agent dim: a one-agent group's [B, 1] action has no
        # extra trailing dim, while a flat Categorical of shape [B, 1] keeps its own.
        group = Composite(action=Categorical(4, shape=(2, n_agents)), shape=(2, n_agents))
        spec = Composite(player=group, shape=(2,))
        actor = QValueActor(
            nn.Linear(3, 4),
            [("player", "observation")],
            spec=spec,
            action_key=("player", "action"),
            action_value_key=("player", "action_value"),
        )
        td = TensorDict(
            player=TensorDict(observation=torch.randn(2, n_agents, 3), batch_size=[2, n_agents]),
            batch_size=[2],
        )
        action = actor(td)["player", "action"]
        assert action.shape == (2, n_agents)
        assert spec["player", "action"].is_in(action)
        flat = QValueActor(
            nn.Linear(3, 4), spec=Composite(action=Categorical(4, shape=(2, 1)), shape=(2,))
        )
        assert flat(_td((2,)))["action"].shape == (2, 1)

    def test_cannot_infer_space(self) -> None:
        with pytest.raises(ValueError, match="cannot tell the action space"):
            QValueModule(spec=Unbounded(shape=(3,)))
        with pytest.raises(ValueError, match="cannot tell the action space"):
            QValueModule("discrete")
        for space in ("binary", "mult_one_hot", "multi-categorical"):
            with pytest.raises(NotImplementedError, match="not supported"):
                QValueModule(space)
        with pytest.raises(NotImplementedError, match="var_nums"):
            QValueModule("one_hot", var_nums=2)
        with pytest.raises(ValueError, match="strict_shape"):
            QValueModule("one_hot", strict_shape="yes")

    def test_torchrl_spellings_and_positional_order(self) -> None:
        values = torch.tensor([[1.0, 3.0, 2.0]])
        # (action_space, action_value_key, action_mask_key, out_keys)
        module = QValueModule("one-hot", "q", None, ["act", "q", "best"])
        td = module(TensorDict(q=values, action_mask=torch.tensor([[True, False, True]])))
        assert td["act"].tolist() == [[0, 1, 0]]  # the mask key is None: no mask read
        assert td["best"].tolist() == [[3.0]]
        with pytest.raises(ValueError, match="out_keys must be"):
            QValueModule("one_hot", "q", None, ["act", "values", "best"])

    def test_actor_takes_a_tensordict_module(self) -> None:
        net = TensorDictModule(nn.Linear(3, 4), ["observation"], ["my_values"])
        actor = QValueActor(net, action_space="one-hot", action_value_key="my_values")
        out = actor(_td((2,)))
        torch.testing.assert_close(
            out["chosen_action_value"], out["my_values"].max(-1, keepdim=True).values
        )
        with pytest.raises(KeyError, match="does not write the action values"):
            QValueActor(net, action_space="one_hot")


class TestActorValueOperator:
    def _make(self) -> ActorValueOperator:
        trunk = TensorDictModule(nn.Linear(3, 8), ["observation"], ["hidden"])
        params = TensorDictModule(
            nn.Sequential(nn.Linear(8, 4), NormalParamExtractor()), ["hidden"], ["loc", "scale"]
        )
        policy = ProbabilisticActor(params, ["loc", "scale"], distribution_class=TanhNormal)
        value = ValueOperator(nn.Linear(8, 1), in_keys=["hidden"])
        return ActorValueOperator(trunk, policy, value)

    @pytest.mark.parametrize("batch", BATCHES)
    def test_forward_and_operators(self, batch) -> None:
        op = self._make()
        out = op(_td(batch))
        assert out["action"].shape == (*batch, 2) and out["state_value"].shape == (*batch, 1)
        policy, value = op.get_policy_operator(), op.get_value_operator()
        assert "state_value" not in policy(_td(batch)).keys()
        assert "action" not in value(_td(batch)).keys()
        td = _td(batch)
        torch.testing.assert_close(value(td.clone())["state_value"], op(td.clone())["state_value"])
        assert policy.get_dist(td).batch_shape == batch

    def test_parameters_shared(self) -> None:
        op = self._make()
        trunk_params = set(map(id, op.common_operator.parameters()))
        assert trunk_params <= set(map(id, op.get_policy_operator().parameters()))
        assert trunk_params <= set(map(id, op.get_value_operator().parameters()))
        assert op.get_policy_head() is op.module[1] and op.get_value_head() is op.module[2]


class TestActorCriticOperator:
    def _make(self, value_key: str = "state_action_value") -> ActorCriticOperator:
        trunk = TensorDictModule(nn.Linear(3, 8), ["observation"], ["hidden"])
        policy = Actor(nn.Linear(8, 2), in_keys=["hidden"])
        critic = ValueOperator(
            MLP(10, 1, depth=0), in_keys=["hidden", "action"], out_keys=[value_key]
        )
        return ActorCriticOperator(trunk, policy, critic)

    @pytest.mark.parametrize("batch", BATCHES)
    def test_critic_scores_the_policy_action(self, batch) -> None:
        op = self._make()
        assert isinstance(op, ActorValueOperator)
        td = _td(batch)
        out = op.get_critic_operator()(td.clone())
        trunk, policy, critic = op.module
        hidden = trunk.module(td["observation"])
        action = policy.module(hidden)
        expected = critic.module[0](torch.cat([hidden, action], -1))
        torch.testing.assert_close(out["state_action_value"], expected)
        assert "state_action_value" not in op.get_policy_operator()(td.clone()).keys()

    def test_no_state_value(self) -> None:
        with pytest.raises(RuntimeError, match="get_critic_operator"):
            self._make().get_value_operator()
        with pytest.raises(ValueError, match=r"writes 'state_value'.*ActorValueOperator"):
            self._make("state_value")


def test_actor_critic_wrapper() -> None:
    policy = Actor(nn.Linear(3, 2))
    value = ValueOperator(nn.Linear(3, 1))
    op = ActorCriticWrapper(policy, value)
    td = _td((2,))
    out = op(td.clone())
    torch.testing.assert_close(out["action"], policy.module(td["observation"]))
    torch.testing.assert_close(out["state_value"], value.module(td["observation"]))
    assert op.get_policy_operator() is policy and op.get_policy_head() is policy
    assert op.get_value_operator() is value and op.get_value_head() is value


def test_torchrl_default_keys_and_positional_out_keys() -> None:
    # Actor/ValueOperator: in_keys=None means ["observation"]; ProbabilisticActor's
    # third positional argument is out_keys.
    assert Actor(nn.Linear(3, 2)).in_keys == ["observation"]
    assert Actor(nn.Linear(3, 2)).out_keys == ["action"]
    assert ValueOperator(nn.Linear(3, 1)).out_keys == ["state_value"]
    params = TensorDictModule(
        nn.Sequential(nn.Linear(3, 4), NormalParamExtractor()), ["observation"], ["loc", "scale"]
    )
    actor = ProbabilisticActor(params, ["loc", "scale"], ["act"], distribution_class=TanhNormal)
    out = actor(_td((2,)))
    assert out["act"].shape == (2, 2)


def test_random_policy_and_recurrent_mode_exported() -> None:
    # TorchRL has both in torchrl.modules; they are tdrl's single implementations.
    from tdrl import modules
    from tdrl.envs.core import RandomPolicy
    from tdrl.modules.rnn import recurrent_mode

    assert modules.RandomPolicy is RandomPolicy and modules.recurrent_mode is recurrent_mode
    spec = Bounded(-1.0, 1.0, shape=(3,))
    action = modules.RandomPolicy(spec)(TensorDict(batch_size=[]))["action"]
    assert action.shape == (3,) and spec.is_in(action)
    assert modules.recurrent_mode() is None
    with modules.set_recurrent_mode(True):
        assert modules.recurrent_mode() is True
