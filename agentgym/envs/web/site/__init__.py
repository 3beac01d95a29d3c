"""The web shop the web envs act on: :class:`~agentgym.envs.web.site.shop.Shop` (state and
pages) and :func:`~agentgym.envs.web.site.app.create_app` (the same pages over HTTP)."""

from agentgym.envs.web.site.app import create_app
from agentgym.envs.web.site.shop import Line, Order, Page, Shop

__all__ = ["Line", "Order", "Page", "Shop", "create_app"]
