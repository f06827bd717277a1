"""What a property's planted-bug controls share: the settings under which it must find the bug."""

from __future__ import annotations

from typing import Final

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis.stateful import RuleBasedStateMachine, run_state_machine_as_test

FIND_BUG: Final = settings(
    max_examples=400,
    deadline=None,
    database=None,
    derandomize=True,
    phases=(Phase.generate,),
    suppress_health_check=list(HealthCheck),
)
"""Fixed examples (the same every run), no shrinking and no saved failures: a control that passes once passes."""


def finds_a_bug(machine: type[RuleBasedStateMachine], match: str, under: settings) -> None:
    """The model ``machine`` (with a bug planted in it or below it) must fail on an assertion matching
    ``match`` within ``under``'s examples."""
    with pytest.raises(AssertionError, match=match):
        run_state_machine_as_test(machine, settings=under)
