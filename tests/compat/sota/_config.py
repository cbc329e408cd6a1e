"""A hydra-free stand-in for the ``DictConfig`` TorchRL's SOTA scripts receive.

TorchRL's scripts get their YAML config through ``@hydra.main``; these copies read the same
YAML with :func:`load_config` into a :class:`Config`: attribute and item access
(``cfg.env.name``, ``cfg["env"]``), ``cfg.get(key, default)``, ``dict(cfg)``, assignment
(the multi-agent scripts write ``cfg.env.vmas_envs = ...``) and hydra's ``key.sub=value``
command-line overrides. It pickles, so ``functools.partial(env_maker, cfg)`` reaches
ParallelEnv workers.

Examples:
    >>> cfg = Config.from_dict({"env": {"name": "CartPole-v1", "seed": 0}, "logger": {}})
    >>> cfg = apply_overrides(cfg, ["env.seed=3", "+logger.video=false"])
    >>> cfg.env.seed, cfg["env"]["name"], cfg.logger.video, cfg.get("absent", 1)
    (3, 'CartPole-v1', False, 1)
    >>> apply_overrides(cfg, ["+optim={}", "+optim.lr=3e-4", "+optim.steps=1_000"]).optim.to_dict()
    {'lr': 0.0003, 'steps': 1000}
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml


class _Loader(yaml.SafeLoader):
    """PyYAML's safe loader reading ``3e-4`` as a float, as OmegaConf does (YAML 1.1 wants
    a dot: plain PyYAML reads ``3e-4`` as a string)."""


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(
        r"""^(?:[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?(?:[eE][-+]?[0-9]+)?
        |[-+]?\.[0-9_]+(?:[eE][-+]?[0-9]+)?
        |[-+]?\.(?:inf|Inf|INF)
        |\.(?:nan|NaN|NAN))$""",
        re.VERBOSE,
    ),
    list("-+0123456789."),
)


class Config(Mapping[str, Any]):
    """A nested, mutable mapping read like hydra's ``DictConfig``."""

    def __init__(self, values: dict[str, Any] | None = None) -> None:
        object.__setattr__(self, "_values", dict(values or {}))

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> Config:
        """Wraps every nested mapping of ``values`` in a :class:`Config`."""
        return cls(
            {k: cls.from_dict(v) if isinstance(v, Mapping) else v for k, v in values.items()}
        )

    def to_dict(self) -> dict[str, Any]:
        """The plain nested ``dict`` (what ``OmegaConf.to_container`` gives)."""
        return {k: v.to_dict() if isinstance(v, Config) else v for k, v in self._values.items()}

    def __getattr__(self, name: str) -> Any:
        try:
            return self._values[name]
        except KeyError:
            raise AttributeError(
                f"Config: no entry {name!r} (got {name!r}; expected one of "
                f"{sorted(self._values)}). Add it to the YAML file or pass {name}=... ."
            ) from None

    def __setattr__(self, name: str, value: Any) -> None:
        self._values[name] = value

    def __getitem__(self, key: str) -> Any:
        return self._values[key]

    def __setitem__(self, key: str, value: Any) -> None:
        self._values[key] = value

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        return f"Config({self.to_dict()!r})"

    def __getstate__(self) -> dict[str, Any]:
        return self._values

    def __setstate__(self, state: dict[str, Any]) -> None:
        object.__setattr__(self, "_values", state)


def apply_overrides(cfg: Config, overrides: Sequence[str]) -> Config:
    """Applies hydra-style ``a.b.c=value`` overrides (values parsed as YAML) in place.

    As with hydra, the key must exist; ``+a.b=value`` adds a new one.

    Raises:
        ValueError: an override without ``=``.
        KeyError: a path that does not exist (without ``+``).
    """
    for item in overrides:
        path, sep, raw = item.partition("=")
        add = path.startswith("+")
        path = path.lstrip("+")
        if not sep:
            raise ValueError(
                f"apply_overrides: override without '=' (got {item!r}; expected "
                "'section.key=value'). Write it as hydra does, e.g. collector.total_frames=1000."
            )
        *parents, leaf = path.split(".")
        node = cfg
        for name in parents:
            if name not in node:
                raise KeyError(
                    f"apply_overrides: no section {name!r} on the path {path!r} (got "
                    f"{item!r}; expected one of {sorted(node)}). Check the key against the YAML."
                )
            node = node[name]
        if not add and leaf not in node:
            raise KeyError(
                f"apply_overrides: no key {leaf!r} on the path {path!r} (got {item!r}; "
                f"expected one of {sorted(node)}). Write +{path}=... to add a key."
            )
        value = yaml.load(raw, Loader=_Loader) if raw else None
        node[leaf] = Config.from_dict(value) if isinstance(value, Mapping) else value
    return cfg


def load_config(path: str | Path, overrides: Sequence[str] = ()) -> Config:
    """Reads the YAML file at ``path`` and applies ``overrides`` (``"a.b=value"`` strings)."""
    with open(path, encoding="utf-8") as f:
        values = yaml.load(f, Loader=_Loader) or {}
    return apply_overrides(Config.from_dict(values), overrides)
