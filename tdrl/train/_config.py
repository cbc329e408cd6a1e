"""Run configuration: TOML presets shipped with tdrl, files, and ``key=value`` overrides."""

from __future__ import annotations

import copy
import json
from importlib import resources
from pathlib import Path
from typing import Any

try:
    import tomllib
except ModuleNotFoundError:  # pragma: no cover - Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

__all__ = ["OFFLINE_PRESETS", "PRESETS", "apply_overrides", "load_config", "load_preset"]

PRESETS = (
    "ppo",
    "a2c",
    "dqn",
    "sac",
    "td3",
    "ddpg",
    "mappo",
    "ippo",
    "qmix",
    "iql",
    "cql",
    "td3bc",
    "bc",
    "dt",
    "sac_mujoco",
    "td3_mujoco",
    "ppo_mujoco",
    "dqn_atari",
    "ppo_atari",
)
OFFLINE_PRESETS = ("iql", "cql", "td3bc", "bc", "dt")
# Tables whose keys are free (options passed on to the env): overrides may add keys there.
_OPEN_TABLES = ("env_options",)


def load_preset(name: str) -> dict[str, Any]:
    """The preset config ``name`` (one of ``PRESETS``) as a nested dict.

    Examples:
        >>> load_preset("ppo")["algorithm"]
        'ppo'
    """
    if name not in PRESETS:
        raise ValueError(f"load_preset: unknown preset (got {name!r}; expected one of {PRESETS}).")
    text = resources.files("tdrl.train").joinpath("presets", f"{name}.toml").read_text()
    return tomllib.loads(text)


def _parse_value(text: str) -> Any:
    """TOML-ish scalar parsing: numbers, booleans, lists, else the raw string."""
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def apply_overrides(config: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Returns a copy of ``config`` with ``section.key=value`` overrides applied.

    Keys of the ``env_options`` table are free: an override may add one (it goes to the env).

    Raises:
        KeyError: an override names a key the config does not have (typos fail loudly).

    Examples:
        >>> cfg = apply_overrides({"optim": {"lr": 0.1}}, ["optim.lr=3e-4"])
        >>> cfg["optim"]["lr"]
        0.0003
    """
    config = copy.deepcopy(config)
    for item in overrides:
        if "=" not in item:
            raise ValueError(
                f"apply_overrides: an override must look like section.key=value (got {item!r})."
            )
        path, raw = item.split("=", 1)
        *parents, leaf = path.strip().split(".")
        node = config
        for part in parents:
            if not isinstance(node.get(part), dict):
                raise KeyError(
                    f"apply_overrides: no config section {path!r} (available: {sorted(node)})."
                )
            node = node[part]
        if leaf not in node and not (parents and parents[-1] in _OPEN_TABLES):
            raise KeyError(
                f"apply_overrides: unknown config key {path!r} (available at that level: "
                f"{sorted(node)}). Check the spelling."
            )
        node[leaf] = _parse_value(raw.strip())
    return config


def load_config(
    preset: str, config_file: str | None = None, overrides: list[str] | None = None
) -> dict[str, Any]:
    """Preset, then a TOML or JSON file merged over it, then the overrides.

    Examples:
        >>> load_config("dqn", overrides=["seed=3"])["seed"]
        3
    """
    config = load_preset(preset)
    if config_file is not None:
        path = Path(config_file)
        text = path.read_text()
        extra = json.loads(text) if path.suffix == ".json" else tomllib.loads(text)
        _merge(config, extra)
    return apply_overrides(config, overrides or [])


def _merge(base: dict[str, Any], extra: dict[str, Any]) -> None:
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            _merge(base[key], value)
        else:
            base[key] = value
