"""Jinja templates of the console, their filters, and the headers every page goes out with.

The Content-Security-Policy allows this server's own scripts and styles only: a page can load
nothing from the internet (clusters are often air-gapped, and a page that tried would hang on
it), and an inline script that got into a rendered value could not run. Autoescaping is on for
every template, since names, results and error messages come from playbooks and their tasks.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.requests import Request
from starlette.responses import HTMLResponse

from noetl.server.console.fold import format_ms, parse_ts, timeline

HERE = Path(__file__).parent
TEMPLATES = HERE / "templates"
STATIC = HERE / "static"
MAX_JSON = 20_000

SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
    ),
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",  # no-referrer would make a form post send `Origin: null`
    "Cache-Control": "no-store",
}


def _ts(value: Any) -> str:
    ts = parse_ts(value)
    return ts.strftime("%Y-%m-%d %H:%M:%S") if ts else ""


def _clock(value: Any) -> str:
    ts = parse_ts(value)
    return ts.strftime("%H:%M:%S.%f")[:-3] if ts else ""


def _json(value: Any) -> str:
    text = json.dumps(value, indent=2, default=str, ensure_ascii=False)
    return (
        text if len(text) <= MAX_JSON else text[:MAX_JSON] + f"\n… ({len(text) - MAX_JSON} more characters)"
    )


def _short_id(value: Any) -> str:
    text = str(value or "")
    return text if len(text) <= 12 else text[:12] + "…"


env = Environment(
    loader=FileSystemLoader(str(TEMPLATES)),
    autoescape=select_autoescape(default=True, default_for_string=True),
    trim_blocks=True,
    lstrip_blocks=True,
)
env.filters.update(ts=_ts, clock=_clock, dur=format_ms, tojson_pretty=_json, short_id=_short_id)
env.globals.update(timeline=timeline)


def render(name: str, **context: Any) -> str:
    return env.get_template(name).render(**context)


def page(request: Request, name: str, status_code: int = 200, **context: Any) -> HTMLResponse:
    auth = request.scope.get("noetl.auth") or {}
    ctx = request.app.state.noetl
    html = render(
        name,
        request=request,
        signed_in=ctx.principals.required and auth.get("name") not in (None, "anonymous"),
        **context,
    )
    return HTMLResponse(html, status_code=status_code, headers=SECURITY_HEADERS)
