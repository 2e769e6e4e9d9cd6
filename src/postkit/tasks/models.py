"""Pydantic models as a task's arguments, when the application uses pydantic (v2):

    class Order(BaseModel):
        id: int
        items: list[str]

    @app.task(queue="ship")
    def ship(order: Order, *, express: bool = False) -> None: ...

    ship.push(cursor, Order(id=1, items=["book"]))      # or {"id": 1, "items": ["book"]}

A parameter whose annotation holds a ``BaseModel`` (``Order``, ``Order | None``,
``list[Order]``; for ``*args`` and ``**kwargs``, each value's) takes at push whatever pydantic
validates as that type (a model instance, or a dict of its fields), and the payload carries its
JSON form (``model_dump(mode="json")``); the worker validates the payload's value back into the
type (``model_validate``) before it calls the function. Every other parameter stays plain JSON.

Postkit never imports pydantic on its own: it looks for models only once the application has
imported pydantic (a model class exists only then), so pydantic is no dependency of Postkit. An
annotation written as a string (``from __future__ import annotations``) is resolved in the
function's module when the task is declared; one that cannot be resolved then (a name imported
only under ``TYPE_CHECKING``, a model defined after the task) counts as plain JSON.
"""

from __future__ import annotations

import inspect
import sys
import types
import typing
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from postkit.errors import InvalidArgumentsError, PermanentError

if TYPE_CHECKING:
    from pydantic import TypeAdapter, ValidationError


class ModelArgument:
    """How one parameter's values go to JSON and back: a pydantic ``TypeAdapter`` of its
    annotation."""

    def __init__(self, annotation: Any) -> None:
        from pydantic import TypeAdapter

        self.adapter: TypeAdapter[Any] = TypeAdapter(annotation)
        self.shown = _type_name(annotation)
        """The annotation as errors show it, e.g. ``Order`` or ``Order | None``."""

    def dump(self, value: Any, where: str) -> Any:
        """``value`` validated as the annotation, in its JSON form, which is validated in turn
        as the worker will (so an instance built without validation, ``model_construct``, or
        changed since, is checked too).

        Raises:
            InvalidArgumentsError: it does not validate, or its JSON form cannot be made; the
                message names the argument (``where``) and each problem.
        """
        from pydantic import ValidationError
        from pydantic_core import PydanticSerializationError

        try:
            dumped = self.adapter.dump_python(self.adapter.validate_python(value), mode="json")
            self.adapter.validate_python(dumped)
            return dumped
        except ValidationError as exc:
            raise InvalidArgumentsError(
                f"argument {where} is not a valid {self.shown}: {problems(exc)}"
            ) from None
        except PydanticSerializationError as exc:
            raise InvalidArgumentsError(
                f"argument {where} is a {self.shown} JSON cannot carry: {exc}"
            ) from None

    def load(self, value: Any, where: str) -> Any:
        """The JSON form ``value`` validated back into the annotation.

        Raises:
            PermanentError: it does not validate; the message names the argument (``where``)
                and each problem.
        """
        from pydantic import ValidationError

        try:
            return self.adapter.validate_python(value)
        except ValidationError as exc:
            raise PermanentError(
                f"argument {where} is not a valid {self.shown}: {problems(exc)}"
            ) from None


def model_arguments(
    name: str, function: Any, parameters: Mapping[str, inspect.Parameter]
) -> dict[str, ModelArgument]:
    """The parameters among ``parameters`` (of ``function``, shown as ``name`` in errors) whose
    annotation holds a pydantic model, each with its :class:`ModelArgument`; empty when pydantic
    is not imported.

    Raises:
        InvalidArgumentsError: pydantic cannot validate an annotation that holds a model (it
            mixes the model with a type pydantic has no schema for).
    """
    base = _base_model()
    if base is None:
        return {}
    from pydantic.errors import PydanticUndefinedAnnotation, PydanticUserError

    namespace = getattr(inspect.unwrap(function), "__globals__", {})
    found: dict[str, ModelArgument] = {}
    for parameter in parameters.values():
        annotation = _resolved(parameter.annotation, namespace)
        if annotation is inspect.Parameter.empty or not _holds(annotation, base):
            continue
        try:
            found[parameter.name] = ModelArgument(annotation)
        except (PydanticUserError, PydanticUndefinedAnnotation) as exc:
            raise InvalidArgumentsError(
                f"{name}: pydantic cannot validate parameter {parameter.name} "
                f"({_type_name(annotation)}): {exc}"
            ) from None
    return found


def is_model(value: Any) -> bool:
    """Whether ``value`` is a pydantic model instance (without importing pydantic)."""
    base = _base_model()
    return base is not None and isinstance(value, base)


def problems(exc: ValidationError) -> str:
    """A pydantic ``ValidationError`` on one line: each error's field path and message, e.g.
    ``id: Input should be a valid integer; items: Field required``."""
    return "; ".join(
        f"{'.'.join(str(part) for part in error['loc']) or 'the value'}: {error['msg']}"
        for error in exc.errors(include_url=False)
    )


def _base_model() -> type | None:
    """pydantic's ``BaseModel`` when the application has imported it, else None."""
    main = sys.modules.get("pydantic.main")
    base = getattr(main, "BaseModel", None)
    return base if isinstance(base, type) else None


def _resolved(annotation: Any, namespace: dict[str, Any]) -> Any:
    """The annotation, evaluated in the function's module when it is a string; ``empty`` when
    that fails."""
    if not isinstance(annotation, str):
        return annotation
    try:
        return eval(annotation, namespace)
    except Exception:
        return inspect.Parameter.empty


def _holds(annotation: Any, base: type) -> bool:
    """Whether ``annotation`` is a subclass of ``base`` or holds one in its arguments."""
    if isinstance(annotation, type) and not typing.get_args(annotation):
        return issubclass(annotation, base)
    return any(_holds(argument, base) for argument in typing.get_args(annotation))


def _type_name(annotation: Any) -> str:
    """An annotation as errors show it: ``Order``, ``Order | None``, ``list[Order]``."""
    arguments = typing.get_args(annotation)
    if isinstance(annotation, type) and not arguments:
        return annotation.__name__
    if annotation is None or annotation is type(None):
        return "None"
    origin = typing.get_origin(annotation)
    if origin is typing.Union or origin is types.UnionType:
        return " | ".join(_type_name(argument) for argument in arguments)
    if origin is typing.Annotated:
        return _type_name(arguments[0])
    if isinstance(origin, type) and arguments:
        return f"{origin.__name__}[{', '.join(_type_name(argument) for argument in arguments)}]"
    return repr(annotation).replace("typing.", "")


__all__ = ["ModelArgument", "is_model", "model_arguments", "problems"]
