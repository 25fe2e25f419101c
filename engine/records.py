"""Building, copying and writing the engine's own pydantic records without validating again.

A turn builds a few dozen small records (outcomes, messages, wakes, runs) from values it made
itself, copies the host's history entries, and writes a handful of run fields per step. Through
pydantic each of these validates values that are already valid, or looks up a setattr handler:
a large share of a turn's own CPU. The helpers here do the same work directly, and only where
the result is the very object the validated path gives:

- ``record`` fills an instance's four pydantic slots (``__dict__``, the set of fields given,
  no extra values, no private values), as validation leaves them for a model with neither
  extra values nor private attributes. Its callers pass every field, each already of the type
  validation would produce (``tests/engine/test_records.py`` compares each one with the
  validated construction);
- ``built`` is the choice every factory makes between the two: the validated construction
  when a value is not what validation would leave, else ``record``;
- ``copy_record`` is ``model.model_copy()`` for such a model;
- ``write`` is ``setattr`` for plain fields of a model that neither validates assignment nor
  is frozen (``Run``): pydantic's own handler for that case writes ``__dict__`` and adds the
  name to the fields set, which is what ``write`` does.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

from pydantic import BaseModel

M = TypeVar("M", bound=BaseModel)

# Setters of the four slots every pydantic model instance has.
_SET_DICT = BaseModel.__dict__["__dict__"].__set__
_SET_FIELDS_SET = BaseModel.__dict__["__pydantic_fields_set__"].__set__
_SET_EXTRA = BaseModel.__dict__["__pydantic_extra__"].__set__
_SET_PRIVATE = BaseModel.__dict__["__pydantic_private__"].__set__
_new = object.__new__


def record(cls: type[M], values: dict[str, Any], fields_set: set[str]) -> M:
    """A ``cls`` holding ``values`` (every field of ``cls``, already valid), with ``fields_set``
    as the fields given: ``cls(**given)`` without the validation, where ``values`` is ``given``
    completed with the defaults (a new object for each default factory)."""
    model = _new(cls)
    _SET_DICT(model, values)
    _SET_FIELDS_SET(model, fields_set)
    _SET_EXTRA(model, None)
    _SET_PRIVATE(model, None)
    return model


def built(cls: type[M], values: dict[str, Any], given: frozenset[str], *, validate: bool) -> M:
    """``cls(**given values)``. ``values`` holds every field of ``cls`` in its declared order
    (the order validation fills, which dumps follow), the ones not ``given`` at their defaults.
    With ``validate`` (a value validation would convert or refuse) pydantic builds it from the
    given values; else ``record`` does, without validating."""
    if validate:
        return cls(**{name: values[name] for name in given})
    return record(cls, values, set(given))


# One set per distinct fields set, for ``share_fields_sets``.
_SHARED: dict[frozenset[str], set[str]] = {}


def shared_fields_set(given: frozenset[str]) -> set[str]:
    """The one set object that stands for ``given`` in the frozen records that share theirs
    (``share_fields_sets``). Never to be changed in place."""
    shared = _SHARED.get(given)
    if shared is None:
        shared = _SHARED.setdefault(given, set(given))
    return shared


def share_fields_sets(models: Sequence[BaseModel]) -> None:
    """Give frozen ``models`` that were given the same fields one fields set object between
    them, instead of one set each.

    For records kept long (a conversation's history window, held between its turns, 50
    entries and the chat message built from each): a set takes 216 bytes and is one more
    object the garbage collector walks on each pass, which for a window is more than the
    entry's own values. Sharing is safe only for frozen models: pydantic changes a fields set
    in place only on assignment, which a frozen model refuses; a copy gets its own set."""
    for model in models:
        if not model.model_config.get("frozen"):
            raise TypeError(f"{type(model).__name__} is not frozen: its fields set is its own")
        _SET_FIELDS_SET(model, shared_fields_set(frozenset(model.__pydantic_fields_set__)))


def copy_record(model: M) -> M:
    """``model.model_copy()``: a new instance with a copy of its field values dict and of its
    fields set, the values themselves shared. pydantic's ``__copy__`` does the same through
    ``copy.copy`` of each slot; a record with extra or private values takes it."""
    if model.__pydantic_extra__ is not None or model.__pydantic_private__ is not None:
        return model.model_copy()
    return record(type(model), model.__dict__.copy(), model.__pydantic_fields_set__.copy())


def write(model: BaseModel, **values: Any) -> None:
    """``setattr(model, name, value)`` for each of ``values``, for plain fields of a model
    without ``validate_assignment`` or ``frozen`` (pydantic's ``_model_field_setattr_handler``:
    the value into ``__dict__``, the name into the fields set), a third of the cost."""
    model.__dict__.update(values)
    model.__pydantic_fields_set__.update(values)
