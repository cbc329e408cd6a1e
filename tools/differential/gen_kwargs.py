"""Write ``torchrl_kwargs.json``: where TorchRL 0.14.1 forwards each opaque ``**kwargs``.

``tools/torchrl_api.json`` lists 89 TorchRL signatures whose last parameter is a ``**kwargs``
(or ``**hyperparams``). Reading TorchRL's source, each one is recorded here with the place the
keys go (``forwarded_to``), the TorchRL source line, and the keys TorchRL accepts there
(``accepted``: a list, read from the signature of the callee where there is one, or a sentence
when any key is accepted, e.g. keys passed on to ``gym.make``). ``check`` names how
``tests/compat/test_differential.py`` checks tdrl's counterpart:

- ``"params"``: every accepted key is a parameter of tdrl's callable (or documented by its
  ``**kwargs``, the rule of ``test_torchrl_api.py``), or, when ``via`` names the TorchRL callee
  and tdrl's class has a ``**kwargs`` and derives from tdrl's counterpart of the callee, a
  parameter of that counterpart;
- ``"keys"``: every accepted key is a field of tdrl's key dataclass (``set_keys``);
- ``"estimators"``: every accepted hyperparameter is a parameter of tdrl's estimator class;
- ``"call"``: the behaviour is checked by a call (open-ended forwarding).

Run with TorchRL's Python (never tdrl's)::

    /tmp/trl-venv/bin/python tools/differential/gen_kwargs.py
"""

from __future__ import annotations

import importlib
import inspect
import json
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
API = HERE.parent / "torchrl_api.json"
OUT = HERE / "torchrl_kwargs.json"
SKIP = {"self", "args", "kwargs", "hyperparams"}
ESTIMATORS = {
    "TD0": "TD0Estimator",
    "TD1": "TD1Estimator",
    "TDLambda": "TDLambdaEstimator",
    "GAE": "GAE",
}


def obj(path: str) -> Any:
    module, _, attr = path.rpartition(".")
    try:
        return getattr(importlib.import_module(module), attr)
    except ImportError:  # a class path: module.Class.attr
        owner, _, cls = module.rpartition(".")
        return getattr(getattr(importlib.import_module(owner), cls), attr)


def params(path: str, drop: tuple[str, ...] = ()) -> list[str]:
    target = obj(path)
    target = target.__init__ if inspect.isclass(target) else target
    names = inspect.signature(target).parameters
    return [n for n in names if n not in SKIP and n not in drop]


def source(path: str) -> str:
    target = obj(path)
    target = inspect.unwrap(target.__init__ if inspect.isclass(target) else target)
    file = inspect.getsourcefile(target) or "?"
    line = inspect.getsourcelines(target)[1]
    return f"{file.split('site-packages/')[-1]}:{line}"


WRAPPER = "torchrl.envs.common._EnvWrapper"
ENVBASE = "torchrl.envs.EnvBase"
MULTI = "torchrl.collectors._multi_base.MultiCollector"

# the TorchRL name (in torchrl_api.json) of the callee the keys are forwarded to, when it is one:
# tdrl's object may forward its own **kwargs to its counterpart (a base class) the same way
VIA = {
    "torchrl.collectors.AsyncCollector": "torchrl.collectors.MultiAsyncCollector",
    "torchrl.data.TensorDictReplayBuffer": "torchrl.data.ReplayBuffer",
    "torchrl.data.TensorDictMaxValueWriter": "torchrl.data.Writer",
    "torchrl.envs.TransformedEnv": "torchrl.envs.EnvBase",
    "torchrl.envs.GymWrapper": "torchrl.envs.EnvBase",
    "torchrl.envs.PettingZooEnv": "torchrl.envs.EnvBase",
    "torchrl.envs.PettingZooWrapper": "torchrl.envs.EnvBase",
    "torchrl.envs.VmasWrapper": "torchrl.envs.EnvBase",
    "torchrl.envs.SqueezeTransform": "torchrl.envs.UnsqueezeTransform",
    "torchrl.modules.MultiAgentMLP": "torchrl.modules.MLP",
    "torchrl.modules.MultiAgentConvNet": "torchrl.modules.ConvNet",
    "torchrl.objectives.ClipPPOLoss": "torchrl.objectives.PPOLoss",
    "torchrl.objectives.KLPENPPOLoss": "torchrl.objectives.PPOLoss",
}

# name -> (forwarded_to, accepted (list or a sentence), check, source path)
MANUAL: dict[str, tuple[str, Any, str, str]] = {
    "torchrl.collectors.Collector": (
        "popped in Collector.__init__: only 'traj_pool' is read; any other key raises TypeError",
        ["traj_pool"],
        "params",
        "torchrl.collectors.Collector",
    ),
    "torchrl.collectors.AsyncCollector": (
        "MultiAsyncCollector.__init__ -> MultiCollector.__init__ (one worker)",
        params(
            MULTI,
            drop=(
                "create_env_fn",
                "policy",
                "policy_factory",
                "frames_per_batch",
                "total_frames",
                "device",
                "storing_device",
                "env_device",
                "policy_device",
                "create_env_kwargs",
                "max_frames_per_traj",
                "init_random_frames",
                "reset_at_each_iter",
                "postproc",
                "split_trajs",
                "exploration_type",
                "reset_when_done",
                "update_at_each_batch",
                "preemptive_threshold",
                "num_threads",
                "num_sub_threads",
                "set_truncated",
                "track_policy_version",
            ),
        ),
        "params",
        "torchrl.collectors.AsyncCollector",
    ),
    "torchrl.data.Bounded": (
        "read in Bounded.__init__: 'minimum'/'maximum' (deprecated names of low/high, raise) and "
        "'domain' (internal: 'continuous'/'discrete'); anything else raises TypeError",
        ["domain"],
        "params",
        "torchrl.data.Bounded",
    ),
    "torchrl.data.Unbounded": (
        "'domain' read in Unbounded.__init__, the rest to TensorSpec (dataclass fields)",
        ["domain"],
        "params",
        "torchrl.data.Unbounded",
    ),
    "torchrl.data.UnboundedContinuous": (
        "Unbounded.__init__ (alias class)",
        ["domain"],
        "params",
        "torchrl.data.UnboundedContinuous",
    ),
    "torchrl.data.UnboundedDiscrete": (
        "Unbounded.__init__ (alias class)",
        ["domain"],
        "params",
        "torchrl.data.UnboundedDiscrete",
    ),
    "torchrl.data.NonTensor": (
        "TensorSpec.__init__ (dataclass fields: 'domain', 'space' are set by the class)",
        [],
        "params",
        "torchrl.data.NonTensor",
    ),
    "torchrl.data.Composite": (
        "entries: every key=spec pair becomes an entry of the Composite; 'batch_size' is an "
        "alias of shape",
        "any entry name (key=spec), plus batch_size",
        "call",
        "torchrl.data.Composite",
    ),
    "torchrl.data.TensorDictMaxValueWriter": (
        "Writer.__init__",
        params("torchrl.data.replay_buffers.writers.Writer"),
        "params",
        "torchrl.data.TensorDictMaxValueWriter",
    ),
    "torchrl.data.TensorDictReplayBuffer": (
        "ReplayBuffer.__init__ (keyword-only)",
        params("torchrl.data.replay_buffers.replay_buffers.ReplayBuffer"),
        "params",
        "torchrl.data.TensorDictReplayBuffer",
    ),
    "torchrl.envs.Compose": (
        "'transforms' (a list: alias of the positional transforms); anything else raises",
        ["transforms"],
        "params",
        "torchrl.envs.Compose",
    ),
    "torchrl.envs.EnvCreator": (
        "create_env_fn: the keys are stored as create_env_kwargs and passed to every call",
        "any keyword of create_env_fn",
        "call",
        "torchrl.envs.EnvCreator",
    ),
    "torchrl.envs.GymEnv": (
        "GymWrapper/_EnvWrapper.__init__ (device, batch_size, allow_done_after_reset, "
        "spec_locked, from_pixels, pixels_only, frame_skip...) then gym.make(env_name, **rest)",
        "any keyword of gym.make / the gymnasium env (e.g. max_episode_steps, render_mode, g)",
        "call",
        "torchrl.envs.GymEnv",
    ),
    "torchrl.envs.GymWrapper": (
        "_EnvWrapper.__init__, then GymWrapper._build_env (from_pixels, pixels_only, "
        "frame_skip...)",
        params(WRAPPER),
        "params",
        "torchrl.envs.GymWrapper",
    ),
    "torchrl.envs.PettingZooEnv": (
        "_EnvWrapper.__init__, the rest to the PettingZoo task constructor "
        "(<task>.parallel_env(**rest) / env(**rest))",
        params(WRAPPER),
        "params",
        "torchrl.envs.PettingZooEnv",
    ),
    "torchrl.envs.PettingZooWrapper": (
        "_EnvWrapper.__init__ (allow_done_after_reset forced True)",
        [p for p in params(WRAPPER) if p != "allow_done_after_reset"],
        "params",
        "torchrl.envs.PettingZooWrapper",
    ),
    "torchrl.envs.SqueezeTransform": (
        "'squeeze_dim' (deprecated alias of dim), the rest to UnsqueezeTransform.__init__",
        ["allow_positive_dim"],
        "params",
        "torchrl.envs.SqueezeTransform",
    ),
    "torchrl.envs.TensorDictPrimer": (
        "primers: every key=spec pair becomes a primed entry; 'device', 'shape' and "
        "'batch_size' are read",
        "any entry name (key=spec), plus device, shape, batch_size",
        "call",
        "torchrl.envs.TensorDictPrimer",
    ),
    "torchrl.envs.TransformedEnv": (
        "'env'/'base_env'/'transform'/'cache_specs'/'auto_unwrap'/'device' read, the rest to "
        "EnvBase.__init__",
        [p for p in params(ENVBASE) if p not in ("device", "allow_done_after_reset")],
        "params",
        "torchrl.envs.TransformedEnv",
    ),
    "torchrl.envs.VmasEnv": (
        "merged into scenario_kwargs and passed to vmas.make_env(scenario, **scenario_kwargs)",
        "any VMAS scenario keyword",
        "call",
        "torchrl.envs.VmasEnv",
    ),
    "torchrl.envs.VmasWrapper": (
        "_EnvWrapper.__init__ (device taken from the VMAS env; allow_done_after_reset True)",
        [p for p in params(WRAPPER) if p not in ("allow_done_after_reset",)],
        "params",
        "torchrl.envs.VmasWrapper",
    ),
    "torchrl.modules.Actor": (
        "SafeModule.__init__ -> TensorDictModule.__init__",
        ["safe", "inplace", "out_to_in_map", "method", "method_kwargs", "strict", "get_kwargs"],
        "params",
        "torchrl.modules.Actor",
    ),
    "torchrl.modules.ProbabilisticActor": (
        "SafeProbabilisticModule.__init__ (the distribution options)",
        params(
            "torchrl.modules.tensordict_module.probabilistic.SafeProbabilisticModule",
            drop=("in_keys", "out_keys", "spec"),
        ),
        "params",
        "torchrl.modules.ProbabilisticActor",
    ),
    "torchrl.modules.IndependentNormal": (
        "torch.distributions.Normal(loc, scale, **kwargs)",
        ["validate_args"],
        "params",
        "torchrl.modules.IndependentNormal",
    ),
    "torchrl.modules.OneHotCategorical": (
        "torch.distributions.OneHotCategorical(probs=, logits=, **kwargs)",
        ["validate_args"],
        "params",
        "torchrl.modules.OneHotCategorical",
    ),
    "torchrl.modules.MultiAgentMLP": (
        "MLP.__init__ of each agent network",
        params(
            "torchrl.modules.MLP",
            drop=(
                "in_features",
                "out_features",
                "depth",
                "num_cells",
                "activation_class",
                "device",
            ),
        ),
        "params",
        "torchrl.modules.MultiAgentMLP",
    ),
    "torchrl.modules.MultiAgentConvNet": (
        "ConvNet.__init__ of each agent network",
        params(
            "torchrl.modules.ConvNet",
            drop=(
                "in_features",
                "num_cells",
                "kernel_sizes",
                "strides",
                "paddings",
                "activation_class",
                "device",
            ),
        ),
        "params",
        "torchrl.modules.MultiAgentConvNet",
    ),
    "torchrl.objectives.A2CLoss": (
        "read in A2CLoss.__init__: 'entropy_coef'/'critic_coef' (deprecated aliases of "
        "entropy_coeff/critic_coeff, with a warning); anything else raises TypeError",
        ["entropy_coef", "critic_coef"],
        "params",
        "torchrl.objectives.A2CLoss",
    ),
    "torchrl.objectives.PPOLoss": (
        "read in PPOLoss.__init__: 'entropy_coef'/'critic_coef' (deprecated aliases); anything "
        "else raises TypeError",
        ["entropy_coef", "critic_coef"],
        "params",
        "torchrl.objectives.PPOLoss",
    ),
    "torchrl.objectives.ClipPPOLoss": (
        "PPOLoss.__init__",
        [
            "log_explained_variance",
            "advantage_key",
            "value_target_key",
            "value_key",
            "functional",
            "actor",
            "critic",
            "entropy_coef",
            "critic_coef",
        ],
        "params",
        "torchrl.objectives.ClipPPOLoss",
    ),
    "torchrl.objectives.KLPENPPOLoss": (
        "PPOLoss.__init__",
        [
            "log_explained_variance",
            "advantage_key",
            "value_target_key",
            "value_key",
            "functional",
            "actor",
            "critic",
            "entropy_coef",
            "critic_coef",
        ],
        "params",
        "torchrl.objectives.KLPENPPOLoss",
    ),
}

WEIGHTS = (
    "BaseCollector.update_policy_weights_: 'model_id', 'weights_dict' and the deprecated "
    "'policy_weights' are read; 'policy'/'weights' select what is sent; the rest goes to the "
    "weight sync scheme's sender",
    ["model_id", "weights_dict", "policy", "weights", "policy_weights"],
    "params",
)
for _collector in (
    "AsyncCollector",
    "BaseCollector",
    "Collector",
    "MultiAsyncCollector",
    "MultiSyncCollector",
):
    _name = f"torchrl.collectors.{_collector}.update_policy_weights_"
    MANUAL[_name] = (*WEIGHTS, _name)
MANUAL["torchrl.data.datasets.D4RLExperienceReplay"] = (
    "the d4rl package (gym.make / d4rl.qlearning_dataset) on the from_env=True and "
    "direct_download=False paths, which need d4rl (tdrl refuses both); on the file path "
    "(direct_download=True, tdrl's) TorchRL raises for any key",
    [],
    "params",
    "torchrl.data.datasets.d4rl.D4RLExperienceReplay.__init__",
)
MANUAL["torchrl.collectors.Collector.load_state_dict"] = (
    "env.load_state_dict(..., **kwargs) and policy.load_state_dict(..., **kwargs); 'strict' "
    "is read",
    ["strict"],
    "params",
    "torchrl.collectors.Collector.load_state_dict",
)
MANUAL["torchrl.collectors.Collector.reset"] = (
    "not used (accepted and ignored)",
    [],
    "params",
    "torchrl.collectors.Collector.reset",
)
MANUAL["torchrl.envs.EnvBase.reset"] = (
    "'select_reset_only' is read; the rest goes to the env's _reset(tensordict, **kwargs) "
    "(native backends such as gym read e.g. 'options')",
    "select_reset_only, and any keyword of the env's _reset",
    "call",
    "torchrl.envs.EnvBase.reset",
)


def estimator_params() -> dict[str, list[str]]:
    return {
        kind: params(f"torchrl.objectives.value.{cls}", drop=("value_network",))
        for kind, cls in ESTIMATORS.items()
    }


def generated(name: str, param: str) -> dict[str, Any]:
    """Entries read from TorchRL itself: set_keys, make_value_estimator, value_estimate."""
    owner, _, method = name.rpartition(".")
    cls = obj(owner)
    if method == "set_keys":
        keys = getattr(cls, "_AcceptedKeys", None)
        fields = sorted(keys.__dataclass_fields__) if keys is not None else []
        return {
            "forwarded_to": f"{cls.__name__}.tensor_keys (_AcceptedKeys): each key renames one "
            "data entry; an unknown key raises ValueError",
            "accepted": fields,
            "check": "keys",
        }
    if method == "make_value_estimator":
        return {
            "forwarded_to": "the estimator class picked by value_type (TD0Estimator, "
            "TD1Estimator, TDLambdaEstimator, GAE), after the loss's default_value_kwargs",
            "accepted": estimator_params(),
            "check": "estimators",
        }
    if method == "value_estimate":
        return {
            "forwarded_to": "the value network call that computes next_value "
            "(_next_value(..., kwargs=kwargs): value_network(td, **kwargs))",
            "accepted": "any keyword of the value network's forward",
            "check": "call",
        }
    raise KeyError(name)


def kwargs_entries() -> list[tuple[str, str]]:
    api = json.loads(API.read_text())
    found = []
    for entry in api["names"]:
        for p in entry.get("params", []):
            if p["kind"] == "var-keyword":
                found.append((entry["name"], p["name"]))
        for member, info in (entry.get("members") or {}).items():
            for p in info.get("params", []):
                if p["kind"] == "var-keyword":
                    found.append((f"{entry['name']}.{member}", p["name"]))
    return found


def main() -> None:
    import torchrl

    entries = []
    for name, param in kwargs_entries():
        if name in MANUAL:
            forwarded, accepted, check, src = MANUAL[name]
            record = {"forwarded_to": forwarded, "accepted": accepted, "check": check}
            record["source"] = source(src)
            if name in VIA:
                record["via"] = VIA[name]
        else:
            record = generated(name, param)
            record["source"] = source(name)
        entries.append({"name": name, "param": param, **record})
    doc = {
        "generator": "tools/differential/gen_kwargs.py",
        "torchrl_version": torchrl.__version__,
        "allow": json.loads(OUT.read_text())["allow"] if OUT.exists() else {},
        "entries": entries,
    }
    OUT.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"{len(entries)} entries -> {OUT}")


if __name__ == "__main__":
    main()
