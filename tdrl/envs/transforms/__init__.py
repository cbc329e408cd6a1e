"""tdrl.envs.transforms."""

__all__: list[str] = []
