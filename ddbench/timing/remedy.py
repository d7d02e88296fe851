"""What a refusal for noise says: the figures, and the settings that would let the measurement through."""

from __future__ import annotations


def noise_refusal(rel_noise: float, limit: float, samples: int, stop_reason: str) -> str:
    """e.g. "noise 12.0 % > limit 10 % (40 samples, stopped by time-limit): raise timing.max_rel_noise …".

    More time (more samples) narrows the noise estimate on a steady machine; a higher limit accepts it.
    """
    return (
        f"noise {100 * rel_noise:.1f} % > limit {100 * limit:g} % ({samples} samples, stopped by "
        f"{stop_reason}): raise timing.max_rel_noise in the suite, --max-rel-noise, or --max-seconds"
    )
