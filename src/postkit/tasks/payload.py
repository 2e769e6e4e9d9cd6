"""A task's payload: the arguments of one call of its function, as a JSON object.

    {"args": [...], "kwargs": {...}}

``kwargs`` holds every argument that can be passed by name, under its parameter's name,
whichever way the caller passed it (``send_otp("42")`` and ``send_otp(user_id="42")`` push the
same payload), and the extra ones of a ``**kwargs`` parameter. ``args`` holds the rest, in
order: the values of positional-only parameters and of ``*args`` (and, when ``*args`` received
any, of the parameters before it, which can then only be passed by position). Arguments the
caller left out are left out: the function's defaults apply when the job runs.

A producer in another language, a schedule, ``postkit push`` or plain SQL may push this shape
too; either key may be left out when it would be empty. The worker checks a payload against
the function's signature (its names and arity; not the types of the values) before calling it.

An argument of a parameter annotated with a pydantic model is the exception: the payload holds
its JSON form (``model_dump(mode="json")``), and the worker validates it back into the model
(see :mod:`postkit.tasks.models`). A transactional task's first parameter, the cursor, is no
argument: the payload never holds it.
"""

from __future__ import annotations

import difflib
import hashlib
import inspect
import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

from postkit.errors import InvalidArgumentsError, PermanentError
from postkit.queue import limits
from postkit.tasks.models import ModelArgument, is_model, model_arguments

_JSON_SCALARS = (int, bool, type(None))  # str has a check of its own: _check_text


class Signature:
    """A task function's signature: encodes a call as its payload, checks and decodes a
    payload back into a call, and computes a unique key from a call's arguments."""

    def __init__(
        self,
        name: str,
        function: Any,
        *,
        takes_cursor: bool = False,
        missing_first: str = "a transactional task takes the cursor as its first parameter, e.g. "
        "def task(cursor, order_id): ...",
    ) -> None:
        """The signature of ``function``, shown as ``name`` in errors. ``takes_cursor``: its
        first parameter is a transactional task's cursor (a workflow's context), which the worker
        passes and a push does not: the signature is the parameters after it;
        ``missing_first`` is the error's text when the function has none.

        Raises:
            InvalidArgumentsError: ``takes_cursor`` and the function has no first parameter
                that can be passed by position; or pydantic cannot validate an annotation that
                holds a model.
        """
        self.name = name
        self.signature = inspect.signature(function)
        if takes_cursor:
            first = next(iter(self.signature.parameters.values()), None)
            if first is None or first.kind not in (
                inspect.Parameter.POSITIONAL_ONLY,
                inspect.Parameter.POSITIONAL_OR_KEYWORD,
            ):
                raise InvalidArgumentsError(f"{name}: {missing_first}")
            self.signature = self.signature.replace(
                parameters=list(self.signature.parameters.values())[1:]
            )
        self.parameters = self.signature.parameters
        # The signature as shown in errors: names and defaults, without the annotations
        # (which `from __future__ import annotations` turns into quoted strings).
        bare = self.signature.replace(
            parameters=[
                parameter.replace(annotation=inspect.Parameter.empty)
                for parameter in self.parameters.values()
            ],
            return_annotation=inspect.Signature.empty,
        )
        self.shown = f"{name}{bare}"
        kinds = {parameter.kind for parameter in self.parameters.values()}
        self._takes_any_keyword = inspect.Parameter.VAR_KEYWORD in kinds
        self._all_named = kinds <= {
            inspect.Parameter.POSITIONAL_OR_KEYWORD,
            inspect.Parameter.KEYWORD_ONLY,
        }
        self._required = [
            name
            for name, parameter in self.parameters.items()
            if parameter.default is parameter.empty
        ]
        self.models: dict[str, ModelArgument] = model_arguments(
            self.shown, function, self.parameters
        )
        """The parameters annotated with a pydantic model, by name (empty without pydantic)."""
        # Where a payload's arguments go, to decode models: its args to these parameters by
        # position, then to *args; its kwargs to these by name, else to **kwargs.
        kinds_of = {name: parameter.kind for name, parameter in self.parameters.items()}
        self._positional = [
            name
            for name, kind in kinds_of.items()
            if kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
        ]
        self._keywords = {
            name
            for name, kind in kinds_of.items()
            if kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
        }
        self._var_positional = next(
            (name for name, kind in kinds_of.items() if kind is inspect.Parameter.VAR_POSITIONAL),
            "",
        )
        self._var_keyword = next(
            (name for name, kind in kinds_of.items() if kind is inspect.Parameter.VAR_KEYWORD),
            "",
        )

    def bind(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> dict[str, Any]:
        """The call's arguments by parameter name (a ``*args`` parameter's as a tuple, a
        ``**kwargs`` one's as a dict), as ``inspect.BoundArguments.arguments`` holds them; the
        value of a parameter annotated with a pydantic model validated and in its JSON form.

        Raises:
            InvalidArgumentsError: they do not fit (see :meth:`_bind`), or a model's argument
                does not validate.
        """
        arguments = self._bind(args, kwargs)
        if isinstance(arguments, str):
            raise InvalidArgumentsError(f"{self.shown}: {arguments}")
        if self.models:
            try:
                return self._dumped(arguments)
            except InvalidArgumentsError as exc:
                raise InvalidArgumentsError(f"{self.shown}: {exc}") from None
        return arguments

    def _bind(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> dict[str, Any] | str:
        """The arguments by parameter name, or why they do not fit: a missing, unknown or
        doubled argument, too many positional ones. An unknown keyword is named first, with
        the parameter it may have meant.

        A call by keywords alone, to a function whose every parameter may be named and none
        is variadic, is bound here (a push_many's calls, ``push(cursor, user_id="42")``):
        ``inspect.Signature.bind`` would take as long as the rest of encoding the call."""
        if not self._takes_any_keyword:
            unknown = [name for name in kwargs if name not in self.parameters]
            if unknown:
                close = difflib.get_close_matches(unknown[0], list(self.parameters), n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                return f"got an unexpected keyword argument {unknown[0]!r}{hint}"
        if self._all_named and not args:
            missing = [name for name in self._required if name not in kwargs]
            if missing:
                return f"missing a required argument: {missing[0]!r}"
            return dict(kwargs)
        try:
            return dict(self.signature.bind(*args, **kwargs).arguments)
        except TypeError as exc:
            return str(exc)

    def encode(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """The payload of a call's arguments by parameter name (see the module docstring).

        Raises:
            InvalidArgumentsError: an argument holds a value JSON cannot carry exactly.
        """
        positional: list[Any] = []
        named: dict[str, Any] = {}
        spread = any(
            parameter.kind is parameter.VAR_POSITIONAL and arguments.get(name)
            for name, parameter in self.parameters.items()
        )
        for name, value in arguments.items():
            kind = self.parameters[name].kind
            if kind is inspect.Parameter.VAR_POSITIONAL:
                for index, item in enumerate(value):
                    self._check_json(item, f"{name}[{index}]")
                positional.extend(value)
            elif kind is inspect.Parameter.VAR_KEYWORD:
                for key, item in value.items():
                    self._check_json(item, key)
                named.update(value)
            else:
                self._check_json(value, name)
                if kind is inspect.Parameter.POSITIONAL_ONLY or (
                    kind is inspect.Parameter.POSITIONAL_OR_KEYWORD and spread
                ):
                    positional.append(value)
                else:
                    named[name] = value
        return {"args": positional, "kwargs": named}

    def decode(self, payload: Any) -> tuple[list[Any], dict[str, Any]]:
        """The positional and keyword arguments a payload holds, checked against the
        signature; a model's argument validated back into its model.

        Raises:
            PermanentError: the payload is not of the documented shape, does not fit the
                signature, or holds a model's argument that does not validate (pushed by hand,
                or in a shape the model has since left); the worker dead-letters the job at
                once, since no retry can fix it.
        """
        if type(payload) is not dict or not set(payload) <= {"args", "kwargs"}:
            raise PermanentError(
                f"the payload of task {self.name} must be a JSON object "
                f'{{"args": [...], "kwargs": {{...}}}}, got {_shown(payload)}'
            )
        args = payload.get("args", [])
        kwargs = payload.get("kwargs", {})
        if type(args) is not list or type(kwargs) is not dict:
            raise PermanentError(
                f'the payload of task {self.name} must hold "args" as an array and "kwargs" as '
                f"an object, got {_shown(payload)}"
            )
        problem = self._bind(args, kwargs)
        if isinstance(problem, str):
            raise PermanentError(f"the payload does not fit {self.shown}: {problem}")
        if self.models:
            try:
                return self._loaded(args, kwargs)
            except PermanentError as exc:
                raise PermanentError(f"the payload does not fit {self.shown}: {exc}") from None
        return args, kwargs

    def _dumped(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """``arguments`` by parameter name with each model's argument in its JSON form
        (``ModelArgument.dump``): each item of a ``*args`` parameter's, each value of a
        ``**kwargs`` one's.

        Raises:
            InvalidArgumentsError: one does not validate.
        """
        dumped = dict(arguments)
        for name, model in self.models.items():
            if name not in arguments:
                continue
            value = arguments[name]
            kind = self.parameters[name].kind
            if kind is inspect.Parameter.VAR_POSITIONAL:
                dumped[name] = tuple(
                    model.dump(item, f"{name}[{index}]") for index, item in enumerate(value)
                )
            elif kind is inspect.Parameter.VAR_KEYWORD:
                dumped[name] = {key: model.dump(item, key) for key, item in value.items()}
            else:
                dumped[name] = model.dump(value, name)
        return dumped

    def _loaded(self, args: list[Any], kwargs: dict[str, Any]) -> tuple[list[Any], dict[str, Any]]:
        """A payload's arguments, which fit the signature, with each model's argument
        validated back into its model (``ModelArgument.load``), each where the payload has it.

        Raises:
            PermanentError: one does not validate.
        """
        loaded_args = []
        for index, value in enumerate(args):
            if index < len(self._positional):
                name = where = self._positional[index]
            else:
                name = self._var_positional
                where = f"{name}[{index - len(self._positional)}]"
            model = self.models.get(name)
            loaded_args.append(value if model is None else model.load(value, where))
        loaded_kwargs = {}
        for key, value in kwargs.items():
            model = self.models.get(key if key in self._keywords else self._var_keyword)
            loaded_kwargs[key] = value if model is None else model.load(value, key)
        return loaded_args, loaded_kwargs

    def unique_key(self, arguments: Mapping[str, Any], names: Sequence[str]) -> str:
        """The unique key of a call: its values of the parameters ``names`` (their defaults
        where the call left them out), as a compact JSON array, e.g. ``["42"]``; when that is
        longer than a name may be (128 characters), ``sha256:`` and the array's hex digest.
        JSON text with ASCII escapes holds no control character and is never blank: it is
        always a valid unique key."""
        key = json.dumps(
            [
                arguments[name] if name in arguments else self.parameters[name].default
                for name in names
            ],
            ensure_ascii=True,
            sort_keys=True,
            separators=(",", ":"),
        )
        if len(key) <= limits.NAME_MAX_CHARS:
            return key
        return "sha256:" + hashlib.sha256(key.encode()).hexdigest()

    def check_unique_by(self, names: tuple[str, ...]) -> None:
        """Check that each of ``names`` is a named parameter (not ``*args`` or ``**kwargs``)
        whose default, if it has one, JSON can carry.

        Raises:
            InvalidArgumentsError: one is not.
        """
        for name in names:
            parameter = self.parameters.get(name)
            if parameter is None or parameter.kind in (
                parameter.VAR_POSITIONAL,
                parameter.VAR_KEYWORD,
            ):
                raise InvalidArgumentsError(
                    f"unique_by names {name!r}, which is not a named parameter of {self.shown}"
                )
            if parameter.default is not parameter.empty:
                self._check_json(parameter.default, f"{name} (its default)")

    def _check_json(self, value: Any, where: str) -> None:
        try:
            _check_json(value, where, set())
        except RecursionError:
            raise InvalidArgumentsError(
                f"{self.shown}: argument {where} is nested too deeply for JSON"
            ) from None
        except InvalidArgumentsError as exc:
            raise InvalidArgumentsError(f"{self.shown}: {exc}") from None


def _check_json(value: Any, where: str, active: set[int]) -> None:
    """Raise InvalidArgumentsError unless ``value`` comes back from JSON as itself: str, int,
    bool, None, a finite float, and lists and dicts (with str keys) of these. Exact types
    only: a tuple comes back as a list, an enum or a str subclass as a plain value."""
    kind = type(value)
    if kind is str:
        _check_text(value, f"argument {where}")
        return
    if kind in _JSON_SCALARS:
        return
    if kind is float:
        if not math.isfinite(value):
            raise InvalidArgumentsError(f"argument {where} is {value!r}, which JSON cannot carry")
        return
    if kind is list or kind is dict:
        if id(value) in active:
            raise InvalidArgumentsError(f"argument {where} contains itself")
        active.add(id(value))
        if kind is list:
            for index, item in enumerate(value):
                _check_json(item, f"{where}[{index}]", active)
        else:
            for key, item in value.items():
                if type(key) is not str:
                    raise InvalidArgumentsError(
                        f"argument {where} has the key {key!r}, a {type(key).__name__}: JSON "
                        "object keys are text"
                    )
                _check_text(key, f"argument {where} has a key that")
                _check_json(item, f"{where}[{key!r}]", active)
        active.discard(id(value))
        return
    hint = " (it would come back as a list)" if kind is tuple else ""
    if is_model(value):
        hint = " (annotate its parameter with the model's class to pass a pydantic model)"
    raise InvalidArgumentsError(
        f"argument {where} is a {kind.__name__}, which JSON cannot carry exactly{hint}: pass "
        "str, int, float, bool, None, or lists and dicts (with str keys) of them, e.g. a "
        "datetime as its isoformat()"
    )


def _check_text(text: str, what: str) -> None:
    """Raise InvalidArgumentsError if ``text`` holds a lone surrogate, which has no UTF-8
    form, so no PostgreSQL text (nor jsonb) can hold it."""
    if text.isascii():
        return
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidArgumentsError(
            f"{what} holds a lone surrogate, which JSON text in PostgreSQL cannot carry"
        ) from None


def _shown(payload: Any) -> str:
    text = json.dumps(payload, default=repr)
    return text if len(text) <= 200 else text[:200] + "..."


__all__ = ["Signature"]
