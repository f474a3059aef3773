"""engine.request.RequestClass is contracts/service_tier.py's four classes: the same names in the
same order, ranks and preemption rule (the engine imports no package of ours, so this test holds
the two together)."""

from __future__ import annotations

from contracts.service_tier import CLASS_RANK, INTERACTIVE_SHAPED, PREEMPTS, REQUEST_CLASSES
from engine.request import CLASS_ORDER
from engine.request import PREEMPTS as ENGINE_PREEMPTS


def test_the_engines_classes_are_the_contracts_highest_first() -> None:
    assert tuple(cls.value for cls in CLASS_ORDER) == REQUEST_CLASSES
    assert {cls.value: cls.rank for cls in CLASS_ORDER} == CLASS_RANK
    assert {cls.value for cls in CLASS_ORDER if cls.is_interactive_shaped} == INTERACTIVE_SHAPED


def test_the_engine_preempts_as_the_contract_says_lowest_class_first() -> None:
    assert {cls.value: {victim.value for victim in victims} for cls, victims in ENGINE_PREEMPTS.items()} == PREEMPTS
    for victims in ENGINE_PREEMPTS.values():
        assert [victim.rank for victim in victims] == sorted((victim.rank for victim in victims), reverse=True)
