"""What a property's planted-bug controls share: the settings under which it must find the bug."""

from __future__ import annotations

from typing import Final

from hypothesis import HealthCheck, Phase, settings

FIND_BUG: Final = settings(
    max_examples=400,
    deadline=None,
    database=None,
    derandomize=True,
    phases=(Phase.generate,),
    suppress_health_check=list(HealthCheck),
)
"""Fixed examples (the same every run), no shrinking and no saved failures: a control that passes once passes."""
