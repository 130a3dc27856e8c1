"""Every error code the API can answer with has advice on the page (app/web/static/js/errors.js)."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

from app import errors
from app.api import error_handlers

ERRORS_JS = Path(errors.__file__).resolve().parent / "web" / "static" / "js" / "errors.js"


def _advice_codes() -> dict[str, str]:
    table = ERRORS_JS.read_text().split("export const ADVICE = {", 1)[1].split("};", 1)[0]
    return dict(re.findall(r'^\s*(\w+): "([^"]+)"', table, flags=re.M))


def test_every_service_error_code_has_advice() -> None:
    codes = {cls.code for _, cls in inspect.getmembers(errors, inspect.isclass) if issubclass(cls, errors.ServiceError)}
    # codes the app's own handlers write (validation, routing, unexpected errors)
    source = inspect.getsource(error_handlers)
    codes |= set(re.findall(r'"code": "(\w+)"', source))
    codes |= {code for _, code in re.findall(r'(\d{3}): "(\w+)"', source)}
    advice = _advice_codes()
    assert codes >= {"invalid_input", "unauthorized", "not_found", "internal_error", "method_not_allowed"}
    missing = codes - set(advice)
    assert not missing, f"errors.js has no advice for {sorted(missing)}"


def test_advice_says_what_to_do() -> None:
    for code, text in _advice_codes().items():
        # a sentence or two a person can act on, never a code or a trace
        assert len(text.split()) >= 8 and text.endswith("."), (code, text)
        assert "{" not in text and "Traceback" not in text
