"""The engine has no default set of families: every function, method and dataclass of
hami.engine that takes a Families takes it as a required argument, so a caller that forgets
it gets a TypeError, not every family (the gated ones included)."""

import importlib
import inspect
import pkgutil
from collections.abc import Iterator
from typing import Any

import pytest

import hami.engine
from hami.engine.decide import schedule
from hami.engine.families import registry
from hami.engine.families.registry import Families
from hami.engine.policy import pod_options


def _callables() -> Iterator[tuple[str, Any]]:
    for info in pkgutil.walk_packages(hami.engine.__path__, "hami.engine."):
        module = importlib.import_module(info.name)
        for name, obj in vars(module).items():
            if getattr(obj, "__module__", None) != info.name:
                continue
            if inspect.isfunction(obj):
                yield f"{info.name}.{name}", obj
            elif inspect.isclass(obj):
                yield f"{info.name}.{name}", obj.__init__
                for attr, member in vars(obj).items():
                    if inspect.isfunction(member):
                        yield f"{info.name}.{name}.{attr}", member


def _takes_families(fn: Any) -> list[inspect.Parameter]:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return []
    return [p for p in params if p.annotation in (Families, "Families")]


def test_no_engine_function_defaults_the_families() -> None:
    taking = {name: _takes_families(fn) for name, fn in _callables()}
    taking = {name: params for name, params in taking.items() if params}
    assert len(taking) > 20  # the walk found the engine's functions
    defaulted = [
        f"{name}({p.name})"
        for name, params in taking.items()
        for p in params
        if p.default is not inspect.Parameter.empty
    ]
    assert defaulted == []


def test_the_registry_holds_no_module_level_families() -> None:
    assert not [name for name, v in vars(registry).items() if isinstance(v, Families)]


def test_a_decision_without_its_families_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="families"):
        schedule({}, None, pod_options({}))  # type: ignore[arg-type,call-arg]
