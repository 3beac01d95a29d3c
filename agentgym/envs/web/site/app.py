"""The shop as a web app (Starlette): every page comes from :meth:`Shop.handle`.

The ``sid`` cookie names the visitor; a request without one gets a fresh id. Pages carry their
style and script inline, so a page is one request and nothing is loaded from elsewhere.

Browse it yourself: ``python -m agentgym.envs.web.site --port 8080``.
"""

from __future__ import annotations

import argparse
import secrets

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Route

from agentgym.envs.web.site.shop import Shop

__all__ = ["create_app", "main"]

SID_COOKIE = "sid"


def create_app(shop: Shop) -> Starlette:
    """A Starlette app serving ``shop``."""

    async def page(request: Request) -> Response:
        cookie = request.cookies.get(SID_COOKIE)
        sid = cookie or secrets.token_hex(16)
        params = dict(request.query_params)
        if request.method == "POST":
            form = await request.form()
            params.update({k: v for k, v in form.items() if isinstance(v, str)})
        answer = shop.handle(request.method, request.url.path, params, sid)
        response: Response = (
            RedirectResponse(answer.location, status_code=303)
            if answer.location
            else HTMLResponse(answer.html, status_code=answer.status)
        )
        if not cookie:
            response.set_cookie(SID_COOKIE, sid, httponly=True, samesite="lax")
        return response

    return Starlette(routes=[Route("/{path:path}", page, methods=["GET", "HEAD", "POST"])])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m agentgym.envs.web.site", description="Serve the web shop for people to browse."
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--catalog-seed", type=int, default=0)
    args = parser.parse_args(argv)
    from agentgym.envs.web.catalog import catalog
    from agentgym.server.serve import serve_app

    serve_app(create_app(Shop(catalog(args.catalog_seed))), args.host, args.port, log_level="info")
