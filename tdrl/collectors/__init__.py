"""tdrl.collectors."""

__all__: list[str] = []
