"""ProbabilisticActor as TorchRL 0.14.1 has it: interaction types, spec, composite out keys."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import (
    CompositeDistribution,
    InteractionType,
    TensorDictModule,
    set_interaction_type,
)
from torch import distributions as d
from torch import nn

from tdrl.modules import (
    ExplorationType,
    NormalParamExtractor,
    OneHotCategorical,
    ProbabilisticActor,
    TanhNormal,
    set_exploration_type,
)
from tdrl.specs import Bounded, Composite, OneHot


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)


def _actor(**kw) -> ProbabilisticActor:
    params = TensorDictModule(
        nn.Sequential(nn.Linear(3, 4), NormalParamExtractor()), ["observation"], ["loc", "scale"]
    )
    kw.setdefault("distribution_class", TanhNormal)
    return ProbabilisticActor(params, ["loc", "scale"], **kw)


def _td(batch: int = 50) -> TensorDict:
    return TensorDict(observation=torch.randn(batch, 3), batch_size=[batch])


def _draws_differ(actor: ProbabilisticActor, td: TensorDict) -> bool:
    return not torch.equal(actor(td.clone())["action"], actor(td.clone())["action"])


class TestInteractionType:
    def test_deterministic_outside_any_block(self) -> None:
        # TorchRL: default_interaction_type=DETERMINISTIC, so a bare call does not sample.
        actor = _actor(return_log_prob=True)
        td = _td()
        out = actor(td.clone())
        assert not _draws_differ(actor, td)
        torch.testing.assert_close(out["action"], actor.get_dist(td).deterministic_sample)
        assert actor.default_interaction_type is InteractionType.DETERMINISTIC

    def test_blocks_choose_the_type(self) -> None:
        actor = _actor()
        td = _td()
        with set_exploration_type(ExplorationType.RANDOM):
            assert _draws_differ(actor, td)
        with set_interaction_type(InteractionType.RANDOM):
            assert _draws_differ(actor, td)
        with set_exploration_type(ExplorationType.DETERMINISTIC):
            assert not _draws_differ(actor, td)

    @pytest.mark.parametrize(
        "value", [ExplorationType.RANDOM, InteractionType.RANDOM, "random", "RANDOM", "Random"]
    )
    def test_random_default_samples_outside_blocks(self, value) -> None:
        actor = _actor(default_interaction_type=value)
        td = _td()
        assert actor.default_interaction_type is InteractionType.RANDOM
        assert _draws_differ(actor, td)
        with set_exploration_type(ExplorationType.DETERMINISTIC):  # a block still wins
            out = actor(td.clone())
        torch.testing.assert_close(out["action"], actor.get_dist(td).deterministic_sample)

    @pytest.mark.parametrize("value", [ExplorationType.MODE, "mode", InteractionType.MODE])
    def test_other_defaults(self, value) -> None:
        params = TensorDictModule(nn.Linear(3, 4), ["observation"], ["logits"])
        actor = ProbabilisticActor(
            params, ["logits"], distribution_class=OneHotCategorical, default_interaction_type=value
        )
        td = _td()
        torch.testing.assert_close(actor(td.clone())["action"], actor.get_dist(td).mode)

    @pytest.mark.parametrize("value", ["bogus", 3, None])
    def test_unknown_type_raises(self, value) -> None:
        with pytest.raises(ValueError, match="unknown default_interaction_type"):
            _actor(default_interaction_type=value)


class TestSpec:
    def test_leaf_spec_becomes_composite(self) -> None:
        spec = Bounded(-2.0, 2.0, shape=(2,))
        actor = _actor(spec=spec)
        assert isinstance(actor.spec, Composite) and list(actor.spec.keys()) == ["action"]
        assert isinstance(actor.spec["action"], Bounded)
        assert _actor().spec.is_empty()

    def test_safe_projects_the_written_action(self) -> None:
        # TanhNormal on [-1, 1] given explicitly; the spec is narrower: safe=True clamps.
        spec = Bounded(-0.1, 0.1, shape=(2,))
        kwargs = {"low": -1.0, "high": 1.0}
        td = _td(200)
        with set_exploration_type(ExplorationType.RANDOM):
            raw = _actor(spec=spec, distribution_kwargs=kwargs)(td.clone())["action"]
            safe = _actor(spec=spec, distribution_kwargs=kwargs, safe=True)(td.clone())["action"]
        assert not spec.is_in(raw) and spec.is_in(safe)
        with pytest.raises(ValueError, match="safe=True needs a spec"):
            _actor(safe=True)

    def test_one_hot_actions_are_int64_whatever_the_spec(self) -> None:
        # TorchRL: the action keeps the distribution's dtype (int64 one-hot), not the spec's.
        params = TensorDictModule(nn.Linear(3, 4), ["observation"], ["logits"])
        for dtype in (torch.bool, torch.int64, torch.float32):
            actor = ProbabilisticActor(
                params,
                ["logits"],
                distribution_class=OneHotCategorical,
                spec=OneHot(4, dtype=dtype),
            )
            assert actor(_td())["action"].dtype == torch.int64
            with set_exploration_type(ExplorationType.RANDOM):
                action = actor(_td())["action"]
            assert action.dtype == torch.int64 and action.sum(-1).eq(1).all()
            assert action.argmax(-1).shape == (50,)  # int64: argmax works (not on bool)


class _Split(nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return x[..., :3], x[..., 3:6].abs() + 0.1, x[..., 6:]


class TestCompositeDistribution:
    def _module(self) -> TensorDictModule:
        return TensorDictModule(
            _Split(),
            ["x"],
            [
                ("params", "normal", "loc"),
                ("params", "normal", "scale"),
                ("params", "cat", "logits"),
            ],
        )

    @pytest.mark.parametrize("named", [True, False])
    def test_out_keys_list_the_leaves(self, named) -> None:
        # TorchRL 0.14.1 lists the name_map values (else the distribution_map keys).
        kwargs: dict = {"distribution_map": {"normal": d.Normal, "cat": d.Categorical}}
        if named:
            kwargs["name_map"] = {"normal": ("action", "normal"), "cat": ("action", "cat")}
        actor = ProbabilisticActor(
            self._module(),
            in_keys=["params"],
            distribution_class=CompositeDistribution,
            distribution_kwargs=kwargs,
            return_log_prob=True,
        )
        leaves = [("action", "normal"), ("action", "cat")] if named else ["normal", "cat"]
        params = [("params", "normal", "loc"), ("params", "normal", "scale")]
        params.append(("params", "cat", "logits"))
        lps = [(*k[:-1], f"{k[-1]}_log_prob") for k in leaves] if named else []
        if not named:
            lps = ["normal_log_prob", "cat_log_prob"]
        assert actor.out_keys == params + leaves + lps
        with set_exploration_type(ExplorationType.RANDOM):
            out = actor(TensorDict(x=torch.randn(5, 10), batch_size=[5]))
        for key in leaves + lps:
            assert key in out.keys(include_nested=True)

    def test_missing_distribution_map(self) -> None:
        with pytest.raises(KeyError, match="distribution_map"):
            ProbabilisticActor(
                self._module(), in_keys=["params"], distribution_class=CompositeDistribution
            )
