"""tdrl.envs.libs."""

__all__: list[str] = []
