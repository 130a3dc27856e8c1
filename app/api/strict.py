"""Requests as the OpenAPI document states them: strict JSON bodies, one value per scalar query parameter.

**JSON as RFC 8259 defines it**, for every body the service parses (FastAPI models and its own).

Python's ``json.loads`` accepts more than JSON, and each extra let a request reach the core with a
value nothing there can hold (all found by the schemathesis fuzz, tests/api/test_bad_input.py):

* ``NaN`` / ``Infinity`` (or ``1e400``, which parses as infinity): stored in a run file they broke every later read of it (500s until the
  file was removed), and echoed in a validation error they made the error itself unserialisable;
* an escaped lone surrogate (``"\\ud800"``): valid JSON syntax but no character, so it cannot be
  encoded as UTF-8 by SQLite, the judgment files, or the response;
* a number over Python's 4,300-digit limit, or nesting deeper than the recursion limit: a
  ValueError / RecursionError instead of a parse error.

All of these answer 400 bad_request here, before any field is looked at.

**A query parameter the document gives one value takes one value.** ``?qid=a&qid=b`` was answered
as if only the last had been sent; it is a 422 now, as any other value outside the document.
"""

from __future__ import annotations

import json
import math
import re
from types import UnionType
from typing import Any, Callable, Coroutine, Union, get_args, get_origin

from fastapi import HTTPException, Request, Response
from fastapi.routing import APIRoute

from app.errors import BadRequest, InvalidInput

_SURROGATE = re.compile("[\ud800-\udfff]")


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number (RFC 8259 has no NaN or Infinity)")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # 1e400 is valid syntax, but no double holds it: it would be inf
        raise ValueError(f"the number {text[:40]} is out of range (over about 1.8e308)")
    return value


def loads(body: bytes | str, what: str = "the body") -> Any:
    """Parse ``body`` as strict JSON; :class:`BadRequest` (400) for anything else."""
    try:
        value = json.loads(body, parse_constant=_refuse_constant, parse_float=_finite_float)
    except json.JSONDecodeError as exc:
        raise BadRequest(f"{what} is not valid JSON: {exc}") from exc
    except UnicodeDecodeError as exc:
        raise BadRequest(f"{what} is not valid JSON: not UTF-8 text ({exc.reason})") from exc
    except RecursionError as exc:
        raise BadRequest(f"{what} is not usable JSON: nested too deeply") from exc
    except ValueError as exc:  # a NaN/Infinity constant, or an integer over Python's digit limit
        raise BadRequest(f"{what} is not usable JSON: {exc}") from exc
    _check_strings(value, what)
    return value


def _check_strings(value: Any, what: str) -> None:
    # iterative: the decoder allows nesting up to the recursion limit, a recursive walk would not
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, str):
            # isascii() is O(1) on CPython, so megabytes of base64 cost nothing here
            if not node.isascii() and _SURROGATE.search(node):
                raise BadRequest(f"{what} is not usable JSON: a string holds an escaped lone surrogate "
                                 "(\\ud800-\\udfff), which is no character")
        elif isinstance(node, dict):
            stack.extend(node.keys())
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)


class _StrictRequest(Request):
    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            try:
                self._json = loads(await self.body())
            except BadRequest as exc:
                # FastAPI re-raises an HTTPException from body parsing as it is (other exceptions
                # become a 400 without the reason); error_handlers gives it the one error shape
                raise HTTPException(status_code=400, detail=exc.message) from exc
        return self._json


def _takes_many(annotation: Any) -> bool:
    """Whether a query parameter's type is a list (``?x=1&x=2``), through ``Optional``."""
    origin = get_origin(annotation)
    if origin in (Union, UnionType):
        return any(_takes_many(arg) for arg in get_args(annotation) if arg is not type(None))
    return origin in (list, tuple, set, frozenset) or annotation in (list, tuple, set, frozenset)


class StrictRoute(APIRoute):
    """The route class of the API routers: FastAPI parses model bodies with :func:`loads`, and a
    scalar query parameter sent more than once is a 422. A route with neither (search, which reads
    its own body) keeps FastAPI's handler as it is: nothing is added to the hot path."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()
        scalars = [p.alias for p in self.dependant.query_params if not _takes_many(p.field_info.annotation)]
        if self.body_field is None and not scalars:
            return handler

        async def strict_handler(request: Request) -> Response:
            repeated = [name for name in scalars if len(request.query_params.getlist(name)) > 1]
            if repeated:
                raise InvalidInput(f"query parameter {repeated[0]!r} was given {len(request.query_params.getlist(repeated[0]))} "
                                   "times; it takes one value", details={"parameters": repeated})
            if self.body_field is not None:
                request = _StrictRequest(request.scope, request.receive)
            return await handler(request)

        return strict_handler
