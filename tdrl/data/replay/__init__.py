"""tdrl.data.replay."""

__all__: list[str] = []
