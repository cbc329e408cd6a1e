"""tdrl.envs.batched."""

__all__: list[str] = []
