"""Transform / Compose / TransformedEnv mechanics: specs, parents, resets, steps and errors."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from tdrl.envs import (
    CartPoleEnv,
    CatTensors,
    Compose,
    DeviceCastTransform,
    DoubleToFloat,
    EnvBase,
    InitTracker,
    ObservationNorm,
    ObservationTransform,
    RenameTransform,
    RewardScaling,
    RewardSum,
    StepCounter,
    Transform,
    TransformedEnv,
    UnsqueezeTransform,
    check_env_specs,
)
from tdrl.errors import SpecError
from tdrl.specs import Composite, Unbounded
from tdrl.testing import CountingEnv, NestedCountingEnv, TransformTestEnv


class AddTen(Transform):
    """A stateless value transform (in place by default)."""

    def _apply_transform(self, value):
        return value + 10


class Negate(Transform):
    """Negates an action on its way to the env: the outer action is the inner one negated."""

    def _inv_apply_transform(self, value):
        return -value


class WithBuffer(Transform):
    def __init__(self):
        super().__init__(in_keys="observation", out_keys="shifted")
        self.register_buffer("shift", torch.zeros(1))

    def _apply_transform(self, value):
        return value + self.shift


def test_specs_are_cached_and_rebuilt_when_the_transforms_change():
    env = TransformedEnv(TransformTestEnv((2,)), StepCounter())
    spec = env.full_observation_spec
    assert env.full_observation_spec is spec
    assert "episode_reward" not in spec
    env.append_transform(RewardSum())
    assert "episode_reward" in env.full_observation_spec
    env.insert_transform(0, InitTracker())
    assert [type(t).__name__ for t in env.transform] == ["InitTracker", "StepCounter", "RewardSum"]
    removed = env.transform.pop(1)
    assert "step_count" not in env.full_observation_spec and removed.container is None
    del env.transform[0]
    assert "is_init" not in env.full_observation_spec
    check_env_specs(env)


def test_base_env_specs_are_untouched():
    base = TransformTestEnv((2,))
    before = base.full_observation_spec.clone()
    TransformedEnv(base, Compose(AddTen(in_keys="observation"), StepCounter(3)))
    assert base.full_observation_spec == before
    assert "truncated" in base.done_keys and "step_count" not in base.observation_keys


def test_parent_is_the_env_up_to_the_transform():
    base = TransformTestEnv((2,))
    first, second = StepCounter(), RewardSum()
    assert first.parent is None and first.container is None
    env = TransformedEnv(base, Compose(first, Compose(second)))
    assert first.parent is base and first.container is env
    parent = second.parent
    assert "step_count" in parent.full_observation_spec
    assert "episode_reward" not in parent.full_observation_spec
    td = parent.rollout(2)  # running the parent runs the transforms before `second`
    assert td["next", "step_count"][0].flatten().tolist() == [1, 2]
    assert env.transform[1].parent is parent  # a nested Compose's parent is its first leaf's


def test_transform_cannot_join_two_envs_but_a_copy_can():
    import copy

    t = StepCounter()
    first = TransformedEnv(CountingEnv(), t)
    with pytest.raises(ValueError, match="StepCounter already belongs to another TransformedEnv"):
        TransformedEnv(CountingEnv(), t)
    clone = copy.deepcopy(t)
    assert clone.container is None
    TransformedEnv(CountingEnv(), clone)
    del first
    TransformedEnv(CountingEnv(), t)  # the first env is gone: the transform is free again


def test_compose_indexing_and_type_checks():
    a, b = StepCounter(), RewardSum()
    c = Compose(a, Compose(b))
    assert c[0] is a and isinstance(c[1], Compose) and c[1][0] is b
    assert c.leaves() == [a, b] and len(c[:1]) == 1 and list(c) == [a, c[1]]
    with pytest.raises(TypeError, match="expected a Transform"):
        Compose(lambda td: td)
    with pytest.raises(TypeError, match="expected a Transform"):
        c.append("nope")


def test_setting_a_spec_is_refused():
    env = TransformedEnv(CountingEnv(), StepCounter())
    with pytest.raises(RuntimeError, match="computed from the base env"):
        env.observation_spec = Unbounded(shape=(1,))


@pytest.mark.parametrize("batch", [(), (2, 3)])
def test_partial_reset_does_not_transform_kept_rows_twice(batch):
    env = TransformedEnv(TransformTestEnv(batch, max_steps=2), AddTen(in_keys="observation"))
    base = TransformTestEnv(batch, max_steps=2)
    torch.manual_seed(0)
    td = env.rollout(7, break_when_any_done=False)
    torch.manual_seed(0)
    ref = base.rollout(7, break_when_any_done=False)
    torch.testing.assert_close(td["observation"], ref["observation"] + 10)
    torch.testing.assert_close(td["next", "observation"], ref["next", "observation"] + 10)


def test_kept_rows_come_from_the_input_not_from_the_env():
    env = TransformedEnv(TransformTestEnv((2,)), AddTen(in_keys="observation", out_keys="o10"))
    td = env.step_mdp(env.step(env.rand_action(env.reset())))
    td["o10"] = torch.full((2, 3), -1.0)
    td["_reset"] = torch.tensor([[True], [False]])
    out = env.reset(td)
    assert out["o10"][0].tolist() == [10.5, 10.5, 10.5] and out["o10"][1].eq(-1).all()
    assert out["observation"][1].tolist() == [1.5, 2.5, -0.5]


def test_inverse_transforms_act_on_a_copy():
    class Recorder(CountingEnv):
        def _step(self, td):
            self.seen = td["action"].clone()
            return super()._step(td)

    env = TransformedEnv(Recorder(batch_size=(2,)), Negate(in_keys_inv="action"))
    td = env.reset()
    td["action"] = torch.full((2, 1), 0.25)
    with pytest.raises(SpecError):  # -0.25 is outside [0, 1]: the env's own check sees it
        env.base_env.validate = True
        env.step(td.clone())
    env.base_env.validate = False
    out = env.step(td)
    assert env.base_env.seen.eq(-0.25).all() and out["action"].eq(0.25).all()


def test_renamed_inverse_key_changes_the_action_spec():
    env = TransformedEnv(CountingEnv(), Negate(in_keys_inv="action", out_keys_inv="push"))
    assert env.action_keys == ["push"]
    td = env.rand_step()
    assert "push" in td.keys() and "action" not in td.keys()


def test_entries_the_policy_writes_under_next_survive_the_step():
    env = TransformedEnv(CountingEnv(), StepCounter())
    td = env.rand_action(env.reset())
    td["next"] = TensorDict(memo=torch.ones(3), observation=torch.full((1,), 9.0))
    out = env.step(td)
    assert out["next", "memo"].eq(1).all()
    assert out["next", "observation"].item() == 1.0  # the env's own entries win


def test_missing_key_in_the_specs_names_transform_key_and_available_keys():
    with pytest.raises(KeyError, match=r"AddTen.in_keys: key 'obs'.*available keys.*observation"):
        TransformedEnv(CountingEnv(), AddTen(in_keys="obs"))
    with pytest.raises(KeyError, match=r"Negate.in_keys_inv: key 'act'.*available keys.*action"):
        TransformedEnv(CountingEnv(), Negate(in_keys_inv="act"))


def test_forward_takes_keys_as_given_and_reports_missing_keys():
    t = AddTen(in_keys="observation")
    td = TensorDict(observation=torch.zeros(2), next=TensorDict(observation=torch.ones(2)))
    out = t(td)  # TorchRL: "observation" is the root entry only
    assert out["observation"].eq(10).all() and out["next", "observation"].eq(1).all()
    with pytest.raises(KeyError, match=r"AddTen.forward: key 'observation'.*available keys"):
        t(TensorDict(next=TensorDict(observation=torch.ones(2))))
    both = AddTen(in_keys=["observation", "pixels"])
    with pytest.raises(KeyError, match=r"AddTen.forward: key 'pixels'"):
        both(TensorDict(observation=torch.zeros(2)))


def test_forward_reads_every_input_before_writing():
    t = AddTen(in_keys=["a", "b"], out_keys=["b", "c"])
    out = t(TensorDict(a=torch.zeros(1), b=torch.ones(1)))
    assert out["b"].item() == 10.0 and out["c"].item() == 11.0  # the original "b"


def _sample():
    return TensorDict(
        observation=torch.full((3,), 1.0),
        reward=torch.full((1,), 1.0),
        next=TensorDict(observation=torch.full((3,), 2.0), reward=torch.full((1,), 2.0)),
    )


@pytest.mark.parametrize(
    ("transform", "key", "root", "nxt"),
    [
        (RewardScaling(0.0, 10.0, in_keys=[("next", "reward")]), "reward", 1.0, 20.0),
        (RewardScaling(0.0, 10.0), "reward", 10.0, 2.0),
        (
            ObservationNorm(1.0, 2.0, in_keys=["observation", ("next", "observation")]),
            "observation",
            3.0,
            5.0,
        ),
        (ObservationNorm(1.0, 2.0, in_keys=[("next", "observation")]), "observation", 1.0, 5.0),
    ],
)
def test_explicit_next_keys_are_mapped_once(transform, key, root, nxt):
    # TorchRL: obs * scale + loc and reward * scale + loc, each named entry exactly once
    out = transform(_sample())
    assert out[key].unique().tolist() == [root] and out["next", key].unique().tolist() == [nxt]


def test_explicit_next_keys_for_key_transforms():
    td = _sample().apply(lambda x: x.double())
    out = DoubleToFloat(in_keys=[("next", "observation")])(td)
    assert out["next", "observation"].dtype == torch.float32
    assert out["observation"].dtype == torch.float64
    cat = CatTensors([("next", "observation"), ("next", "reward")], ("next", "obs_r"))
    out = cat(_sample())
    assert out["next", "obs_r"].tolist() == [2.0, 2.0, 2.0, 2.0]
    assert set(out.keys(True, True)) == {"observation", "reward", ("next", "obs_r")}
    out = RenameTransform([("next", "reward")], [("next", "r")])(_sample())
    assert set(out["next"].keys()) == {"observation", "r"} and "reward" in out.keys()


@pytest.mark.parametrize(
    "transform",
    [
        RewardScaling(0.0, 10.0, in_keys=[("next", "reward")]),
        ObservationNorm(1.0, 2.0, in_keys=["observation", ("next", "observation")]),
    ],
)
def test_explicit_next_keys_inside_an_env_are_refused(transform):
    # TorchRL raises a KeyError on the first step; an env's transform names entries as the env
    # produces them (its "next" entries are mapped by the step, the root ones by the reset).
    with pytest.raises(KeyError, match=r"in_keys: key \('next', .*is not in the specs"):
        TransformedEnv(CountingEnv(), transform)


def test_plain_keys_inside_an_env_map_root_and_next_once():
    env = TransformedEnv(CountingEnv(max_steps=9), ObservationNorm(1.0, 2.0, out_keys="n"))
    td = env.rollout(3)
    assert td["n"].flatten().tolist() == [1.0, 3.0, 5.0]  # 0, 1, 2 -> x * 2 + 1
    assert td["next", "n"].flatten().tolist() == [3.0, 5.0, 7.0]
    env = TransformedEnv(CountingEnv(max_steps=9), RewardScaling(0.0, 10.0))
    assert env.rollout(2)["next", "reward"].flatten().tolist() == [10.0, 10.0]


def test_spec_that_disagrees_with_the_data_is_reported_once_on_first_use():
    class WrongSpec(Transform):
        def _apply_transform(self, value):
            return value.repeat_interleave(2, -1)

        def _transform_spec(self, spec):
            return spec  # claims the shape does not change

    class Undeclared(Transform):
        def _call(self, td):
            td["surprise"] = torch.zeros(td.batch_size)
            return td

    env = TransformedEnv(CountingEnv(batch_size=(2,)), WrongSpec(in_keys="observation"))
    with pytest.raises(
        SpecError, match=r"WrongSpec._reset.*'observation'.*got shape \(2, 2\).*available keys"
    ):
        env.reset()
    env = TransformedEnv(CountingEnv(), Undeclared(in_keys="observation"))
    with pytest.raises(SpecError, match=r"Undeclared._reset.*writes 'surprise'.*no spec declares"):
        env.reset()


def test_missing_data_at_step_names_the_transform():
    class Drops(Transform):
        def _step(self, td, nxt):
            return nxt.exclude("observation")

    env = TransformedEnv(TransformTestEnv(), Compose(Drops(), AddTen(in_keys="observation")))
    with pytest.raises(KeyError, match=r"AddTen._call: key 'observation' is missing"):
        env.rand_step()


def test_stateful_transform_outside_an_env():
    with pytest.raises(
        RuntimeError, match=r"StepCounter.forward: this transform only works inside an env"
    ):
        StepCounter()(TensorDict(observation=torch.zeros(1)))
    t = StepCounter()
    with pytest.raises(RuntimeError, match=r"StepCounter._reset.*not part of an env"):
        t._reset_mask(
            TensorDict(_reset=torch.ones(1, dtype=torch.bool)), "step_count", torch.zeros(1)
        )


def test_state_dict_round_trip_and_seed_and_close():
    env = TransformedEnv(CountingEnv(), WithBuffer())
    env.transform.shift.fill_(3.0)
    other = TransformedEnv(CountingEnv(), WithBuffer())
    other.load_state_dict(env.state_dict())
    assert other.reset()["shifted"].item() == 3.0
    assert env.set_seed(5) == CountingEnv().set_seed(5) and env.base_env.seed == 5
    env.close()
    assert env.base_env.is_closed


def test_the_base_env_never_sees_its_entries_transformed():
    class Recorder(TransformTestEnv):
        def _step(self, td):
            self.seen = td.clone()
            return super()._step(td)

    env = TransformedEnv(Recorder((2,)), UnsqueezeTransform(-1, in_keys="observation"))
    env.rollout(3, break_when_any_done=False)
    assert "observation" not in env.base_env.seen.keys()
    assert env.base_env.seen["pixels"].shape == (2, 6, 8, 3)


def test_nested_transformed_envs_and_builtin_env():
    inner = TransformedEnv(CartPoleEnv(batch_size=(4,)), StepCounter(5))
    env = TransformedEnv(inner, RewardSum())
    check_env_specs(env)
    td = env.rollout(8, break_when_any_done=False)
    assert td["next", "step_count"].max() <= 5
    assert "TransformedEnv" in repr(env) and "StepCounter" in repr(inner)


def test_nested_groups_keep_their_values_on_partial_reset():
    env = TransformedEnv(
        NestedCountingEnv(batch_size=(2,), max_steps=50),
        Compose(
            StepCounter(),
            RewardSum(),
            InitTracker(),
            AddTen(in_keys=("nested_2", "observation"), out_keys=("nested_2", "o10")),
        ),
    )
    td = env.reset()
    for _ in range(2):
        td = env.step_mdp(env.step(env.rand_action(td)))
    before = td.clone()
    td[("nested_2", "_reset")] = torch.tensor([[False], [True]])
    out = env.reset(td)
    for key in before.keys(True, True):
        if key[0] == "nested_2" if isinstance(key, tuple) else False:
            assert out[key][0].equal(before[key][0]), key
        else:
            assert out[key].equal(before[key]), key
    assert out["nested_2", "o10"][1].item() == 10.0 and out["nested_2", "step_count"][1].item() == 0


def test_clone_is_detached_and_shares_tensors():
    env = TransformedEnv(CountingEnv(), Compose(ObservationNorm(1.0, 2.0, out_keys="n")))
    norm = env.transform[0]
    twin = norm.clone()
    assert norm.container is env and twin.container is None and twin.parent is None
    assert twin.loc is norm.loc and twin.in_keys == norm.in_keys
    twin.in_keys.append("other")  # the key lists are the clone's own
    assert norm.in_keys == ["observation"]
    other = TransformedEnv(CountingEnv(), norm.clone())  # free to join another env
    assert other.rollout(2)["next", "n"].flatten().tolist() == [3.0, 5.0]
    composed = env.transform.clone()
    assert isinstance(composed, Compose) and composed[0] is not norm
    assert composed[0].loc is norm.loc and composed.container is None


def test_unknown_public_attributes_come_from_the_base_env():
    env = TransformedEnv(CountingEnv(max_steps=7), StepCounter())
    assert env.max_steps == 7  # CountingEnv's attribute, not the TransformedEnv's
    with pytest.raises(AttributeError, match=r"neither the env nor its base env.*'nope'"):
        _ = env.nope
    with pytest.raises(AttributeError, match=r"private names and dunders are not forwarded"):
        _ = env._not_there


class _ScaledEnv(EnvBase):
    """Batch-unlocked, unbatched env whose reset reads a (possibly batched) ``scale`` input."""

    batch_locked = False

    def __init__(self) -> None:
        super().__init__(batch_size=())
        self.observation_spec = Composite(x=Unbounded(shape=(2,)), scale=Unbounded(shape=()))
        self.state_spec = Composite(scale=Unbounded(shape=()))
        self.action_spec = Unbounded(shape=(1,))
        self.reward_spec = Unbounded(shape=(1,))

    def _reset(self, tensordict):
        if tensordict is None or "scale" not in tensordict.keys():
            tensordict = TensorDict(scale=torch.ones(()))
        scale = tensordict["scale"]
        x = scale[..., None].expand(*scale.shape, 2) * torch.tensor([1.0, 2.0])
        return TensorDict(
            x=x,
            scale=scale,
            done=torch.zeros(*scale.shape, 1, dtype=torch.bool),
            terminated=torch.zeros(*scale.shape, 1, dtype=torch.bool),
            batch_size=scale.shape,
        )

    def _step(self, tensordict):
        scale = tensordict["scale"]
        return TensorDict(
            x=tensordict["x"] + tensordict["action"],
            scale=scale,
            reward=torch.zeros(*scale.shape, 1),
            done=torch.zeros(*scale.shape, 1, dtype=torch.bool),
            terminated=torch.zeros(*scale.shape, 1, dtype=torch.bool),
            batch_size=scale.shape,
        )

    def _set_seed(self, seed):
        return seed


def test_full_reset_hands_the_input_to_the_base_env_as_torchrl():
    # TorchRL's pendulum tutorial: env.reset(env.gen_params(batch_size=[10])) on a TransformedEnv
    env = TransformedEnv(_ScaledEnv(), AddTen(in_keys="x", out_keys="x10"))
    assert env.batch_locked is False
    td = env.reset(TensorDict(scale=torch.tensor([1.0, 3.0, 5.0]), batch_size=[3]))
    assert td.batch_size == (3,)
    torch.testing.assert_close(td["x"], torch.tensor([[1.0, 2.0], [3.0, 6.0], [5.0, 10.0]]))
    torch.testing.assert_close(td["x10"], td["x"] + 10)
    out = env.rollout(2, auto_reset=False, tensordict=td)
    assert out.batch_size == (3, 2)
    assert env.reset()["x10"].tolist() == [11.0, 12.0]
    kept = env.reset(TensorDict(scale=torch.tensor(2.0)), set_state=False)
    assert kept["x"].tolist() == [1.0, 2.0]  # set_state=False: the input's states are ignored
    with pytest.raises(ValueError, match=r"TransformedEnv.reset: unsupported arguments"):
        env.reset(set_state=True)


def test_transformed_env_torchrl_arguments():
    add = AddTen(in_keys="observation", out_keys="o10")
    env = TransformedEnv(CountingEnv(), add, True, device="cpu")
    assert isinstance(env.transform[0], DeviceCastTransform)  # the base env has no device
    assert env.device == torch.device("cpu")
    assert env.rollout(2)["next", "o10"].device == torch.device("cpu")
    inner = TransformedEnv(CountingEnv(), AddTen(in_keys="observation", out_keys="a"))
    outer = TransformedEnv(inner, AddTen(in_keys="a", out_keys="b"), auto_unwrap=False)
    assert outer.rollout(1)["next", "b"].item() == 21.0
    with pytest.raises(NotImplementedError, match="cache_specs=False is not supported"):
        TransformedEnv(CountingEnv(), None, False)
    with pytest.raises(NotImplementedError, match="auto_unwrap=True is not supported"):
        TransformedEnv(CountingEnv(), auto_unwrap=True)


def test_observation_transform_defaults_to_observation_and_pixels():
    class Half(ObservationTransform):
        def _apply_transform(self, value):
            return value / 2

    assert Half().in_keys == ["observation", "pixels"]
    env = TransformedEnv(CountingEnv(max_steps=9), Half(in_keys="observation", out_keys="h"))
    assert env.rollout(2)["next", "h"].flatten().tolist() == [0.5, 1.0]


def test_compose_takes_torchrl_forms():
    a, b = StepCounter(), RewardSum()
    for c in (Compose(a, b), Compose([a, b]), Compose(transforms=[a, b])):
        assert list(c) == [a, b]
    with pytest.raises(TypeError, match=r"Compose.__init__: unexpected keyword arguments"):
        Compose(a, order="reversed")
    with pytest.raises(TypeError, match=r"Compose.__init__: expected a Transform"):
        Compose([a, lambda td: td])
