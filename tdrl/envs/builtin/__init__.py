"""tdrl.envs.builtin."""

__all__: list[str] = []
