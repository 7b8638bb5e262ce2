"""The Starlette application: every route module's routes, and the web console's, behind the auth layer."""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.middleware import Middleware

from noetl.server.api import catalog, credentials, executions, ops, outside
from noetl.server.api.auth import BearerAuth, SessionGenerations
from noetl.server.api.context import ApiContext


def build_app(ctx: ApiContext) -> Starlette:
    from noetl.server.console.more_pages import routes as more_console_routes
    from noetl.server.console.pages import routes as console_routes  # it imports the API modules

    if ctx.sessions is None:
        ctx.sessions = SessionGenerations(ctx.bus)
    app = Starlette(
        routes=[
            *executions.routes,
            *outside.routes,
            *catalog.routes,
            *credentials.routes,
            *ops.routes,
            *console_routes,
            *more_console_routes,
        ],
        middleware=[
            Middleware(BearerAuth, principals=ctx.principals, metrics=ctx.metrics, sessions=ctx.sessions)
        ],
    )
    app.state.noetl = ctx
    return app
