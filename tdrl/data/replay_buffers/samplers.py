"""TorchRL's ``torchrl.data.replay_buffers.samplers`` import path (tdrl's samplers)."""

from tdrl.data.replay import (
    PrioritizedSampler,
    RandomSampler,
    Sampler,
    SamplerWithoutReplacement,
    SliceSampler,
)

__all__ = [
    "PrioritizedSampler",
    "RandomSampler",
    "Sampler",
    "SamplerWithoutReplacement",
    "SliceSampler",
]
