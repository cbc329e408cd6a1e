"""Write ``tools/torchrl_api.json``: the TorchRL 0.14.1 API that tdrl promises to accept.

Run it with a Python that has TorchRL installed, never with tdrl's venv (TorchRL is not a tdrl
dependency, and tdrl never imports this script; the API test loads it only for
``encode_default``, which needs no TorchRL)::

    python -m venv /tmp/trl-venv && /tmp/trl-venv/bin/pip install torch==2.13.0
    /tmp/trl-venv/bin/pip install torch==2.13.0 torchrl==0.14.1 gymnasium
    /tmp/trl-venv/bin/python tools/gen_torchrl_api.py

``tests/compat/test_torchrl_api.py`` compares the JSON with tdrl and
``tools/torchrl_api_report.py`` prints the gaps and the coverage figure.

Scope rule (review changes to ``SCOPE`` against it):

1. Only public names (``__all__``) of ``torchrl.envs``, ``torchrl.data``,
   ``torchrl.data.datasets``, ``torchrl.modules``, ``torchrl.objectives``,
   ``torchrl.objectives.value``, ``torchrl.objectives.value.functional`` and
   ``torchrl.collectors``. Names TorchRL keeps only in submodules (``torchrl.data.replay_buffers.
   Sampler``, ``torchrl.collectors.utils.split_trajectories``, ``torchrl.weight_update``) are not
   checked here.
2. A name is in scope when tdrl already exports a TorchRL name (tdrl.envs <-> torchrl.envs,
   tdrl.specs and tdrl.data <-> torchrl.data, tdrl.modules <-> torchrl.modules, tdrl.objectives(.value
   (.functional)) <-> torchrl.objectives(.value(.functional)), tdrl.collectors <-> torchrl.collectors),
   when issue 13 names it, or when it belongs to a family tdrl claims: transforms of the kinds tdrl
   has (observation shape/dtype/device/image, reward shaping, key selection, counters), the listed
   losses and their target updaters, the four value estimators and their functional forms, every
   spec class, storages/samplers/writers.
3. Out of scope: deprecated aliases (``TD0Estimate``, ``EGreedyWrapper``, ... ; ``CompositeSpec`` and
   ``SyncDataCollector`` no longer exist in 0.14.1), LLM/tokenizer/VLA pieces, simulator wrappers
   other than gymnasium, PettingZoo and VMAS (Brax, DMControl, Isaac, ...), Atari- or pretrained-vision-
   specific transforms (EndOfLife, R3M, VIP, VC1), model-based/planning/Dreamer parts, Ray/remote
   services, weight *updaters* (replaced by weight sync schemes), estimators and losses tdrl does
   not claim (VTrace, MultiAgentGAE, CrossQ, ...). Issue 17 brought the PettingZoo and VMAS
   wrappers, TorchRL's agent grouping (``MarlGroupMapType``, ``check_marl_grouping``), the mixers
   and ``QMixerLoss`` into scope; issue 24 the offline datasets (Minari, D4RL), ``BCLoss``,
   ``TD3BCLoss``, the decision-transformer model, actors and losses, ``Reward2GoTransform`` and
   ``TargetReturn``.
4. Members: the ``__init__`` of each class plus the listed public methods/properties; for enums the
   listed members. A TorchRL name whose module maps to tdrl.data but that is a spec maps to
   tdrl.specs (see ``SPEC_NAMES``).

The ``"allow"`` list of an existing JSON is kept on rerun (entries ``{"name", "param", "reason"}``);
``SEED_ALLOW`` entries are added when missing.
"""

from __future__ import annotations

import enum
import inspect
import json
import math
import re
from pathlib import Path
from typing import Any

OUT = Path(__file__).with_name("torchrl_api.json")
TORCHRL_VERSION = "0.14.1"

TDRL_MODULE = {
    "torchrl.envs": "tdrl.envs",
    "torchrl.data": "tdrl.data",
    "torchrl.data.datasets": "tdrl.data.datasets",
    "torchrl.modules": "tdrl.modules",
    "torchrl.objectives": "tdrl.objectives",
    "torchrl.objectives.value": "tdrl.objectives.value",
    "torchrl.objectives.value.functional": "tdrl.objectives.value.functional",
    "torchrl.collectors": "tdrl.collectors",
}

SPEC_COMMON = ("rand", "zero", "one", "is_in", "project", "encode", "to_numpy", "expand")
SPEC_COMMON += ("squeeze", "unsqueeze", "to", "clone", "assert_is_in", "type_check", "device")
DISCRETE = ("to_one_hot", "to_categorical", "to_one_hot_spec", "to_categorical_spec")
DISCRETE += ("update_mask", "n")
SPEC_NAMES = {
    "TensorSpec": SPEC_COMMON,
    "Binary": SPEC_COMMON,
    "Bounded": SPEC_COMMON,
    "BoundedContinuous": (),
    "Categorical": SPEC_COMMON + DISCRETE,
    "Choice": (),
    "Composite": (
        *SPEC_COMMON,
        "keys",
        "items",
        "values",
        "set",
        "update",
        "empty",
        "is_empty",
        "lock_",
        "unlock_",
        "__getitem__",
        "__len__",
        "shape",
    ),
    "MultiCategorical": SPEC_COMMON,
    "MultiOneHot": SPEC_COMMON,
    "NonTensor": SPEC_COMMON,
    "OneHot": SPEC_COMMON + DISCRETE,
    "Stacked": (),
    "StackedComposite": (),
    "Unbounded": SPEC_COMMON,
    "UnboundedContinuous": (),
    "UnboundedDiscrete": (),
}

SPEC_PROPS = ("action_spec", "observation_spec", "reward_spec", "done_spec", "state_spec")
SPEC_PROPS += (*tuple(f"full_{s}" for s in SPEC_PROPS), "input_spec", "output_spec")
SPEC_PROPS += ("action_spec_unbatched", "observation_spec_unbatched")
ENV_MEMBERS = ("reset", "step", "rollout", "set_seed", "rand_action", "rand_step")
ENV_MEMBERS += ("step_and_maybe_reset", "fake_tensordict", "close", "append_transform", "to")
ENV_MEMBERS += (*SPEC_PROPS, "action_keys", "reward_keys", "done_keys", "action_key")
ENV_MEMBERS += ("reward_key", "done_key", "batch_size", "device", "batch_locked")
TRANSFORM_MEMBERS = ("clone", "forward", "inv", "transform_observation_spec")
TRANSFORM_MEMBERS += ("transform_reward_spec", "transform_input_spec", "transform_action_spec")
TRANSFORM_MEMBERS += ("transform_done_spec", "transform_state_spec", "transform_output_spec")
TRANSFORM_MEMBERS += ("parent", "container", "in_keys", "out_keys", "in_keys_inv", "out_keys_inv")

ENVS: dict[str, tuple[str, ...]] = {
    "EnvBase": ENV_MEMBERS,
    "EnvCreator": (),
    "GymEnv": (),
    "GymWrapper": (),
    "PendulumEnv": ("gen_params",),
    "SerialEnv": (),
    "ParallelEnv": (),
    "check_env_specs": (),
    "step_mdp": (),
    "make_composite_from_td": (),
    "ExplorationType": ("DETERMINISTIC", "RANDOM", "MODE", "MEAN", "MEDIAN"),
    "exploration_type": (),
    "set_exploration_type": (),
    "Transform": TRANSFORM_MEMBERS,
    "ObservationTransform": (),
    "Compose": ("append", "insert", "__getitem__", "__len__"),
    "TransformedEnv": ("append_transform", "insert_transform", "transform"),
    "ObservationNorm": ("init_stats",),
    "VecNorm": ("freeze", "unfreeze"),
    "PettingZooWrapper": (),
    "PettingZooEnv": (),
    "VmasWrapper": (),
    "VmasEnv": (),
    "MarlGroupMapType": ("ALL_IN_ONE_GROUP", "ONE_GROUP_PER_AGENT"),
    "check_marl_grouping": (),
}
ENVS.update(
    dict.fromkeys(
        (
            "ActionMask CatFrames CatTensors ClipTransform DTypeCastTransform DeviceCastTransform"
            " DoubleToFloat ExcludeTransform FlattenObservation FrameSkipTransform GrayScale"
            " InitTracker NoopResetEnv RenameTransform Resize RewardClipping RewardScaling"
            " RewardSum SelectTransform StepCounter TensorDictPrimer ToTensorImage"
            " UnsqueezeTransform SqueezeTransform PermuteTransform CenterCrop Crop BinarizeReward"
            " SignTransform TrajCounter Reward2GoTransform TargetReturn"
        ).split(),
        (),
    )
)

RB_MEMBERS = ("add", "extend", "sample", "__len__", "__getitem__", "__iter__", "append_transform")
RB_MEMBERS += ("insert_transform", "empty", "update_priority", "state_dict", "load_state_dict")
RB_MEMBERS += ("dumps", "loads", "write_count", "storage", "sampler", "writer", "transform")
STORAGE_MEMBERS = ("set", "get", "__len__", "state_dict", "load_state_dict")
DATA: dict[str, tuple[str, ...]] = {
    "ReplayBuffer": RB_MEMBERS,
    "TensorDictReplayBuffer": (*RB_MEMBERS, "update_tensordict_priority"),
    "PrioritizedReplayBuffer": RB_MEMBERS,
    "TensorDictPrioritizedReplayBuffer": (*RB_MEMBERS, "update_tensordict_priority"),
    "Storage": STORAGE_MEMBERS,
    "TensorStorage": STORAGE_MEMBERS,
    "LazyTensorStorage": STORAGE_MEMBERS,
    "LazyMemmapStorage": STORAGE_MEMBERS,
    "ListStorage": STORAGE_MEMBERS,
    "RandomSampler": (),
    "SamplerWithoutReplacement": (),
    "PrioritizedSampler": ("update_priority",),
    "SliceSampler": (),
    "SliceSamplerWithoutReplacement": (),
    "PrioritizedSliceSampler": ("update_priority",),
    "Writer": (),
    "RoundRobinWriter": (),
    "TensorDictRoundRobinWriter": (),
    "TensorDictMaxValueWriter": (),
    "MultiStep": (),
}
DATA.update(SPEC_NAMES)

EXPLORATION = ("step",)
RNN = ("set_recurrent_mode", "make_tensordict_primer", "recurrent_mode")
MODULES: dict[str, tuple[str, ...]] = {
    "ActorCriticOperator": ("get_policy_operator", "get_value_operator", "get_critic_operator"),
    "ActorValueOperator": ("get_policy_operator", "get_value_operator"),
    "ActorCriticWrapper": ("get_policy_operator", "get_value_operator"),
    "EGreedyModule": EXPLORATION,
    "AdditiveGaussianModule": EXPLORATION,
    "OrnsteinUhlenbeckProcessModule": EXPLORATION,
    "LSTMModule": RNN,
    "GRUModule": RNN,
    "ReparamGradientStrategy": ("PassThrough", "RelaxedOneHot"),
}
MODULES.update(
    dict.fromkeys(
        (
            "Actor ProbabilisticActor ValueOperator QValueActor QValueModule MLP ConvNet"
            " MultiAgentMLP MultiAgentConvNet NormalParamExtractor TanhModule RandomPolicy Delta"
            " IndependentNormal MaskedCategorical MaskedOneHotCategorical OneHotCategorical"
            " TanhDelta TanhNormal TruncatedNormal set_recurrent_mode recurrent_mode QMixer"
            " VDNMixer DecisionTransformer DTActor OnlineDTActor DecisionTransformerInferenceWrapper"
        ).split(),
        (),
    )
)

LOSS = ("forward", "make_value_estimator", "set_keys")
OBJECTIVES: dict[str, tuple[str, ...]] = {
    "LossModule": LOSS,
    "DQNLoss": LOSS,
    "DDPGLoss": (*LOSS, "loss_actor", "loss_value"),
    "SACLoss": (*LOSS, "actor_loss", "alpha_loss", "qvalue_v1_loss", "qvalue_v2_loss"),
    "DiscreteSACLoss": (*LOSS, "actor_loss", "alpha_loss", "qvalue_loss"),
    "TD3Loss": (*LOSS, "actor_loss", "value_loss"),
    "PPOLoss": (*LOSS, "loss_critic"),
    "ClipPPOLoss": (*LOSS, "loss_critic"),
    "KLPENPPOLoss": (*LOSS, "loss_critic"),
    "A2CLoss": (*LOSS, "loss_critic"),
    "ReinforceLoss": (*LOSS, "loss_critic"),
    "IQLLoss": (*LOSS, "actor_loss", "qvalue_loss", "value_loss"),
    "DiscreteIQLLoss": (*LOSS, "actor_loss", "qvalue_loss", "value_loss"),
    "CQLLoss": (*LOSS, "actor_loss", "alpha_loss", "q_loss", "cql_loss"),
    "DiscreteCQLLoss": (*LOSS, "value_loss", "cql_loss"),
    "REDQLoss": LOSS,
    "QMixerLoss": LOSS,
    "BCLoss": ("forward", "set_keys"),
    "TD3BCLoss": (*LOSS, "actor_loss", "qvalue_loss"),
    "DTLoss": ("forward", "set_keys"),
    "OnlineDTLoss": ("forward", "set_keys"),
    "TargetNetUpdater": ("step", "init_"),
    "SoftUpdate": ("step", "init_"),
    "HardUpdate": ("step", "init_"),
    "ValueEstimators": ("TD0", "TD1", "TDLambda", "GAE"),
    "distance_loss": (),
    "group_optimizers": (),
}
ESTIMATOR = ("forward", "value_estimate", "set_keys")
VALUE: dict[str, tuple[str, ...]] = {
    "ValueEstimatorBase": ESTIMATOR,
    "TD0Estimator": ESTIMATOR,
    "TD1Estimator": ESTIMATOR,
    "TDLambdaEstimator": ESTIMATOR,
    "GAE": ESTIMATOR,
}
FUNCTIONAL = dict.fromkeys(
    (
        "generalized_advantage_estimate vec_generalized_advantage_estimate td0_return_estimate"
        " td0_advantage_estimate td1_return_estimate td1_advantage_estimate vec_td1_return_estimate"
        " vec_td1_advantage_estimate td_lambda_return_estimate td_lambda_advantage_estimate"
        " vec_td_lambda_return_estimate vec_td_lambda_advantage_estimate"
    ).split(),
    (),
)
COLLECTOR = ("__iter__", "__len__", "shutdown", "set_seed", "update_policy_weights_")
COLLECTOR += ("state_dict", "load_state_dict", "iterator")
COLLECTORS: dict[str, tuple[str, ...]] = {
    "BaseCollector": COLLECTOR,
    "Collector": (*COLLECTOR, "reset", "rollout"),
    "MultiSyncCollector": (*COLLECTOR, "reset"),
    "MultiAsyncCollector": (*COLLECTOR, "reset"),
    "AsyncCollector": (*COLLECTOR, "reset"),
    "RandomPolicy": (),
}

DATASET_MEMBERS = ("sample", "__len__", "__getitem__")
DATASETS: dict[str, tuple[str, ...]] = {
    "MinariExperienceReplay": DATASET_MEMBERS,
    "D4RLExperienceReplay": DATASET_MEMBERS,
}

SCOPE: dict[str, dict[str, tuple[str, ...]]] = {
    "torchrl.envs": ENVS,
    "torchrl.data": DATA,
    "torchrl.data.datasets": DATASETS,
    "torchrl.modules": MODULES,
    "torchrl.objectives": OBJECTIVES,
    "torchrl.objectives.value": VALUE,
    "torchrl.objectives.value.functional": FUNCTIONAL,
    "torchrl.collectors": COLLECTORS,
}

# Parameters TorchRL 0.14.1 keeps only to refuse them (it raises when they are set): a TorchRL
# program that runs never passes them, so tdrl need not accept them.
_LOSS_CTOR_KEYS = (
    "TorchRL raises when it is set (deprecated ctor key); the key is set with .set_keys()."
)
_GAMMA = "TorchRL raises TypeError when it is set (deprecated); gamma is given to make_value_estimator()."
_EST_KEYS = (
    "TorchRL raises RuntimeError when it is set (deprecated); the key is set with .set_keys()."
)
REFUSED: dict[str, tuple[tuple[str, str], ...]] = {
    **{
        f"torchrl.objectives.{loss}": (
            *tuple((p, _LOSS_CTOR_KEYS) for p in keys),
            ("gamma", _GAMMA),
        )
        for loss, keys in (
            ("A2CLoss", ("advantage_key", "value_target_key")),
            ("PPOLoss", ("advantage_key", "value_target_key", "value_key")),
            ("ReinforceLoss", ("advantage_key", "value_target_key")),
            ("DQNLoss", ("priority_key",)),
            ("IQLLoss", ("priority_key",)),
            ("DiscreteIQLLoss", ("priority_key",)),
            ("REDQLoss", ("priority_key",)),
            ("SACLoss", ("priority_key",)),
            ("TD3Loss", ("priority_key",)),
            ("ClipPPOLoss", ()),
            ("KLPENPPOLoss", ()),
            ("CQLLoss", ()),
            ("DiscreteCQLLoss", ()),
            ("DDPGLoss", ()),
        )
    },
    "torchrl.objectives.DiscreteSACLoss": (("priority_key", _LOSS_CTOR_KEYS),),
    **{
        f"torchrl.objectives.value.{est}": tuple(
            (p, _EST_KEYS) for p in ("advantage_key", "value_target_key", "value_key")
        )
        for est in (
            "ValueEstimatorBase",
            "GAE",
            "TD0Estimator",
            "TD1Estimator",
            "TDLambdaEstimator",
        )
    },
    **{
        f"torchrl.envs.{env}": (
            (
                "pin_memory",
                "TorchRL raises ValueError when it is true (deprecated for batched envs).",
            ),
            ("allow_step_when_done", "TorchRL raises ValueError when it is true (deprecated)."),
        )
        for env in ("SerialEnv", "ParallelEnv")
    },
    **{
        f"torchrl.data.{rb}.sample": (
            ("include_info", "deprecated alias of return_info in TorchRL."),
        )
        for rb in ("TensorDictReplayBuffer", "TensorDictPrioritizedReplayBuffer")
    },
    "torchrl.objectives.value.functional.td0_return_estimate": (
        (
            "done",
            "deprecated in TorchRL in favour of terminated (a TD(0) return only needs terminated).",
        ),
    ),
    **{
        f"torchrl.collectors.{collector}": (
            (
                "reset_when_done",
                "TorchRL's Collector (also inside each multi-collector worker) raises ValueError when it "
                "is false (deprecated); True is the only value.",
            ),
        )
        for collector in (
            "Collector",
            "MultiSyncCollector",
            "MultiAsyncCollector",
            "AsyncCollector",
        )
    },
}
SEED_ALLOW: list[dict[str, str | None]] = (
    [
        {
            "name": f"torchrl.data.{alias}",
            "param": None,
            "reason": f"alias of {base} with a fixed dtype domain; tdrl has one class per spec "
            f"(DESIGN: no alias classes): use {base}(..., dtype=...).",
        }
        for alias, base in (
            ("UnboundedContinuous", "Unbounded"),
            ("UnboundedDiscrete", "Unbounded"),
            ("BoundedContinuous", "Bounded"),
        )
    ]
    + [
        {"name": name, "param": p, "reason": why}
        for name, pairs in REFUSED.items()
        for p, why in pairs
    ]
    + [
        {
            "name": f"torchrl.data.datasets.{cls}.sample",
            "param": "include_info",
            "reason": "deprecated alias of return_info in TorchRL.",
        }
        for cls in DATASETS
    ]
)

# Abstract bases whose constructor users never call (TensorSpec is a dataclass base whose fields
# are set by each concrete spec): only their members are recorded.
NO_INIT = {"torchrl.data.TensorSpec"}


def _transformed_env_signature(
    base_env, transform=None, cache_specs=True, *, auto_unwrap=None, device=None, **kwargs
):  # type: ignore[no-untyped-def]
    """What ``TransformedEnv.__init__(*args, **kwargs)`` parses by hand (read from its source)."""


# Keyword arguments TorchRL takes through ``**kwargs`` and documents under "Keyword Args" (checked
# against its docstring at generation). GymEnv(num_workers=) is left out: it returns a ParallelEnv
# (DESIGN: no constructor that returns another type).
_GYM_KWARGS = (
    "from_pixels",
    "pixels_only",
    "frame_skip",
    "device",
    "batch_size",
    "allow_done_after_reset",
)
DOCUMENTED_KWARGS = {
    "torchrl.envs.GymEnv": (
        "categorical_action_encoding",
        "num_envs",
        "disable_env_checker",
        *_GYM_KWARGS,
    ),
    "torchrl.envs.GymWrapper": _GYM_KWARGS,
}

# Constructors TorchRL writes as ``(*args, **kwargs)`` and parses by hand: the parsed signature.
SIGNATURE_OVERRIDES = {"torchrl.envs.TransformedEnv": _transformed_env_signature}

PARAM_KIND = {
    inspect.Parameter.POSITIONAL_ONLY: "positional-only",
    inspect.Parameter.POSITIONAL_OR_KEYWORD: "positional-or-keyword",
    inspect.Parameter.KEYWORD_ONLY: "keyword-only",
    inspect.Parameter.VAR_POSITIONAL: "var-positional",
    inspect.Parameter.VAR_KEYWORD: "var-keyword",
}
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def encode_default(value: Any) -> dict[str, Any]:
    """JSON-safe form of a default: ``value`` when plain (compared), else ``repr`` only."""
    import torch

    if isinstance(value, enum.Enum):
        return {"enum": value.name, "repr": f"{type(value).__name__}.{value.name}"}
    if value is None or isinstance(value, (bool, int, str)):
        return {"value": value}
    if isinstance(value, float):
        return {"value": value} if math.isfinite(value) else {"float": repr(value)}
    if isinstance(value, torch.dtype):
        return {"dtype": str(value)}
    if isinstance(value, type):
        return {"class": f"{value.__module__}.{value.__qualname__}"}
    if isinstance(value, (tuple, list)):
        items = [encode_default(v) for v in value]
        if all(set(i) == {"value"} for i in items):
            return {"value": [i["value"] for i in items]}
    return {"repr": _ADDRESS.sub("", repr(value))}


def _is_forwarding(sig: inspect.Signature) -> bool:
    kinds = [p.kind for p in sig.parameters.values() if p.name not in ("self", "cls")]
    return kinds == [inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD]


def undecorate(func: Any) -> Any:
    """The function a decorator wraps when the decorator hides it behind ``(*args, **kwargs)``."""
    func = inspect.unwrap(func)
    while _is_forwarding(inspect.signature(func)) and getattr(func, "__closure__", None):
        inner = [c.cell_contents for c in func.__closure__ if inspect.isfunction(c.cell_contents)]
        if len(inner) != 1:
            break
        func = inspect.unwrap(inner[0])
    return func


def class_init(cls: type) -> Any:
    """``cls.__init__``, skipping MRO levels that only forward ``(*args, **kwargs)`` to super()."""
    for klass in cls.__mro__:
        init = vars(klass).get("__init__")
        if init is None:
            continue
        if init is object.__init__:
            return None
        init = undecorate(init)
        if not _is_forwarding(
            inspect.signature(init)
        ) or "super().__init__(*args, **kwargs)" not in inspect.getsource(init):
            return init
    return None


def describe_signature(func: Any, drop_first: bool) -> list[dict[str, Any]]:
    """Public parameters of ``func`` (``self``/``cls`` dropped when ``drop_first``)."""
    if func is None:
        return []
    params = list(inspect.signature(undecorate(func)).parameters.values())
    if drop_first and params:
        params = params[1:]
    out = []
    for p in params:
        if p.name.startswith("_"):
            continue
        entry: dict[str, Any] = {"name": p.name, "kind": PARAM_KIND[p.kind], "position": len(out)}
        if p.default is not inspect.Parameter.empty:
            entry["default"] = encode_default(p.default)
        out.append(entry)
    return out


def describe_member(cls: type, name: str) -> dict[str, Any]:
    """Kind and parameters of the class member ``name`` (as TorchRL defines it)."""
    if issubclass(cls, enum.Enum):
        if name not in cls.__members__:
            raise KeyError(f"{cls.__name__}: no enum member {name!r}")
        return {"kind": "enum-member"}
    for klass in cls.__mro__:
        if name in vars(klass):
            raw = vars(klass)[name]
            break
    else:
        raise KeyError(
            f"{cls.__name__}: no class member {name!r} (instance attributes cannot be checked)"
        )
    if isinstance(raw, property):
        return {"kind": "property"}
    if isinstance(raw, staticmethod):
        return {"kind": "staticmethod", "params": describe_signature(raw.__func__, False)}
    if isinstance(raw, classmethod):
        return {"kind": "classmethod", "params": describe_signature(raw.__func__, True)}
    if callable(raw):
        return {"kind": "method", "params": describe_signature(raw, True)}
    return {"kind": "attribute"}


def describe(module_name: str, name: str, members: tuple[str, ...]) -> dict[str, Any]:
    """One JSON entry: the TorchRL name, its tdrl counterpart, kind, signature and members."""
    import importlib

    module = importlib.import_module(module_name)
    if name not in module.__all__:
        raise KeyError(f"{module_name}.{name} is not in {module_name}.__all__")
    obj = getattr(module, name)
    target = (
        "tdrl.specs"
        if module_name == "torchrl.data" and name in SPEC_NAMES
        else TDRL_MODULE[module_name]
    )
    entry: dict[str, Any] = {"name": f"{module_name}.{name}", "tdrl": f"{target}.{name}"}
    if isinstance(obj, type) and issubclass(obj, enum.Enum):
        entry["kind"] = "enum"
    elif isinstance(obj, type):
        entry["kind"] = "class"
        qualified = entry["name"]
        if qualified in SIGNATURE_OVERRIDES:
            entry["params"] = describe_signature(SIGNATURE_OVERRIDES[qualified], False)
        elif qualified not in NO_INIT:
            entry["params"] = describe_signature(class_init(obj), True)
        for kw in DOCUMENTED_KWARGS.get(qualified, ()):
            if not re.search(rf"\b{kw} \(", inspect.getdoc(obj) or ""):
                raise KeyError(f"{qualified}: {kw!r} is not documented in its docstring")
            position = len(entry["params"])
            entry["params"].append(
                {"name": kw, "kind": "keyword-only", "position": position, "documented": True}
            )
    else:
        entry["kind"] = "function"
        entry["params"] = describe_signature(obj, False)
    if members:
        entry["members"] = {m: describe_member(obj, m) for m in members}
    return entry


def merged_allow(previous: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Keep every reviewed allow entry; add the seed entries that are not there yet."""
    allow = list(previous)
    seen = {(a["name"], a["param"]) for a in allow}
    allow += [a for a in SEED_ALLOW if (a["name"], a["param"]) not in seen]
    return sorted(allow, key=lambda a: (a["name"], a["param"] or ""))


def dump(doc: dict[str, Any]) -> str:
    """JSON text with one line per parameter, allow entry and member, so diffs stay readable."""

    def one(value: Any) -> str:
        return json.dumps(value, sort_keys=True)

    def block(entry: dict[str, Any]) -> str:
        lines = [
            f'  {{"name": {one(entry["name"])}, "tdrl": {one(entry["tdrl"])}, "kind": {one(entry["kind"])}'
        ]
        if "params" in entry:
            lines[-1] += ', "params": [' + ("" if entry["params"] else "]")
            lines += [f"    {one(p)}," for p in entry["params"]]
            if entry["params"]:
                lines[-1] = lines[-1].rstrip(",") + "]"
        if "members" in entry:
            lines[-1] += ', "members": {'
            lines += [f"    {one(k)}: {one(v)}," for k, v in entry["members"].items()]
            lines[-1] = lines[-1].rstrip(",") + "}"
        return "\n".join(lines) + "}"

    head = {k: v for k, v in doc.items() if k not in ("allow", "names")}
    text = one(head)[:-1] + ',\n "allow": [\n'
    text += ",\n".join(f"  {one(a)}" for a in doc["allow"]) + '\n ],\n "names": [\n'
    text += ",\n".join(block(e) for e in doc["names"]) + "\n ]\n}\n"
    json.loads(text)  # the hand layout must stay valid JSON
    return text


def main() -> None:
    """Import TorchRL, describe every name in ``SCOPE`` and write ``OUT``."""
    import warnings

    warnings.simplefilter("ignore")
    import torchrl

    if torchrl.__version__ != TORCHRL_VERSION:
        raise SystemExit(
            f"gen_torchrl_api: torchrl {torchrl.__version__} found, {TORCHRL_VERSION} expected"
        )
    previous = json.loads(OUT.read_text())["allow"] if OUT.exists() else []
    names, errors = [], []
    for mod, table in SCOPE.items():
        for name, members in table.items():
            try:
                names.append(describe(mod, name, members))
            except KeyError as err:
                errors.append(str(err))
    if errors:
        raise SystemExit("gen_torchrl_api: SCOPE names what TorchRL lacks:\n" + "\n".join(errors))
    doc = {
        "torchrl_version": TORCHRL_VERSION,
        "generator": "tools/gen_torchrl_api.py",
        "allow": merged_allow(previous),
        "names": sorted(names, key=lambda e: e["name"]),
    }
    OUT.write_text(dump(doc))
    print(f"wrote {OUT} ({len(names)} names, {len(doc['allow'])} allow entries)")


if __name__ == "__main__":
    main()
