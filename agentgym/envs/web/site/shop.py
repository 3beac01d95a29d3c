"""The shop: its state (carts, orders) and its pages, independent of any web framework.

:meth:`Shop.handle` answers one request, ``(method, path, params, sid) -> Page``, with the HTML a
server sends. The Starlette app (:mod:`~agentgym.envs.web.site.app`) serves exactly this to a
browser, and the text mode (:mod:`~agentgym.envs.web.text`) calls it directly, so both modes
see the same pages and the same purchases.

A visitor is a session id ``sid`` (the ``sid`` cookie). Carts, orders and one-shot messages
("Added ... to your cart") live here, per sid, until :meth:`Shop.forget`. All pages are plain
HTML forms and links, with the style and script (``static/``) inlined; JavaScript only adds
what shops add: a live stock line on the product page, "recently viewed" in localStorage, a
confirm dialog before removing a cart line. Every request that changes state is a POST answered
with a redirect (303).

Pages: ``/`` (departments), ``/search`` (``q``, ``category``, ``min_price``, ``max_price``,
``sort``, ``page``), ``/product/<id>``, ``POST /cart/add``, ``/cart``, ``POST /cart/remove``,
``/checkout``, ``POST /checkout``, ``/order/<number>``, ``/help``.
"""

from __future__ import annotations

import json
import math
import re
import threading
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import jinja2
import markupsafe

from agentgym.envs.web.catalog import Catalog, Product

__all__ = ["SHIPPING", "SOCIAL_URL", "Line", "Order", "Page", "Shop"]

#: Shipping choices at checkout: value -> label.
SHIPPING: dict[str, str] = {"standard": "Standard (free, 5-7 days)", "express": "Express ($9.99, 1-2 days)"}
#: The one link that leaves the site, as real shops have them (the browser env blocks it).
SOCIAL_URL = "https://social.example.com/nimbus"
SORTS: dict[str, str] = {
    "relevance": "Relevance",
    "price_asc": "Price: low to high",
    "price_desc": "Price: high to low",
    "rating": "Average rating",
}
PRICE_RANGES: tuple[tuple[str, float | None, float | None], ...] = (
    ("Under $25", None, 25.0),
    ("$25 to $50", 25.0, 50.0),
    ("$50 to $100", 50.0, 100.0),
    ("$100 & above", 100.0, None),
)
_PRODUCT = re.compile(r"/product/([A-Za-z0-9_-]+)")
_ORDER = re.compile(r"/order/(\d+)")


@dataclass(frozen=True)
class Line:
    """One cart or order line: a product with a value chosen for each of its options."""

    product: Product
    options: dict[str, str]


@dataclass(frozen=True)
class Order:
    number: int
    lines: tuple[Line, ...]
    shipping: str


@dataclass(frozen=True)
class Page:
    """An answer: ``status`` and ``html``, or a redirect to ``location`` (status 303)."""

    status: int
    html: str = ""
    location: str | None = None


@dataclass
class _Visitor:
    cart: list[Line] = field(default_factory=list)
    orders: list[Order] = field(default_factory=list)
    message: str | None = None


class Shop:
    """A shop over ``catalog``; thread-safe (one lock around visitor state)."""

    def __init__(self, catalog: Catalog, *, name: str = "Nimbus Market", page_size: int = 10):
        self.catalog, self.name, self.page_size = catalog, name, page_size
        self._visitors: dict[str, _Visitor] = {}
        self._lock = threading.Lock()
        self._templates = jinja2.Environment(
            loader=jinja2.FileSystemLoader(Path(__file__).parent / "templates"),
            autoescape=True,
            undefined=jinja2.StrictUndefined,
        )
        self._departments = sorted({path[0] for path in catalog.categories()})
        # Inlined into every page: no request besides the page's own (a fresh browser context
        # has an empty cache, and every request is a round trip through the event loop).
        static = Path(__file__).parent / "static"
        self._assets = {
            name: markupsafe.Markup((static / f"shop.{name}").read_text()) for name in ("css", "js")
        }

    # -- state, for the envs -----------------------------------------------------------------

    def cart(self, sid: str) -> list[Line]:
        with self._lock:
            return list(self._visitor(sid).cart)

    def orders(self, sid: str) -> list[Order]:
        with self._lock:
            return list(self._visitor(sid).orders)

    def forget(self, sid: str) -> None:
        """Drop everything the shop holds for ``sid``."""
        with self._lock:
            self._visitors.pop(sid, None)

    def _visitor(self, sid: str) -> _Visitor:
        return self._visitors.setdefault(sid, _Visitor())

    # -- requests ----------------------------------------------------------------------------

    def handle(self, method: str, path: str, params: Mapping[str, str], sid: str) -> Page:
        """Answer ``method path`` with ``params`` (query and form fields merged) for visitor
        ``sid``. Never raises for bad input: unknown pages are 404s, bad fields are messages."""
        method = method.upper()
        with self._lock:
            visitor = self._visitor(sid)
            routes = {
                "/": self._home,
                "/search": self._search,
                "/cart": self._cart,
                "/checkout": self._checkout,
                "/help": self._help,
            }
            posts = {"/cart/add": self._add, "/cart/remove": self._remove, "/checkout": self._place_order}
            if method == "POST" and path in posts:
                return posts[path](visitor, params)
            if method in ("GET", "HEAD"):
                if path in routes:
                    return routes[path](visitor, params)
                if m := _PRODUCT.fullmatch(path):
                    return self._product(visitor, params, m.group(1))
                if m := _ORDER.fullmatch(path):
                    return self._order(visitor, int(m.group(1)))
            if path in routes or path in posts:
                return self._page(visitor, 405, "Not allowed", f"{path} does not accept {method}.")
            return self._page(visitor, 404, "Page not found", f"There is no page {path} here.")

    def _render(self, visitor: _Visitor, template: str, status: int = 200, **values: Any) -> Page:
        message, visitor.message = visitor.message, None
        values.setdefault("query", "")
        values.setdefault("message", None)
        values["message"] = values["message"] or message
        html = self._templates.get_template(template).render(
            shop_name=self.name, cart_count=len(visitor.cart), social_url=SOCIAL_URL, **self._assets, **values
        )
        return Page(status, html)

    def _page(self, visitor: _Visitor, status: int, heading: str, text: str) -> Page:
        return self._render(visitor, "page.html", status, heading=heading, text=text)

    def _home(self, visitor: _Visitor, params: Mapping[str, str]) -> Page:
        return self._render(visitor, "home.html", departments=self._departments)

    def _help(self, visitor: _Visitor, params: Mapping[str, str]) -> Page:
        return self._page(
            visitor,
            200,
            "Help",
            "Search for a product, choose its options, add it to your cart, and place the order at checkout.",
        )

    def _search(self, visitor: _Visitor, params: Mapping[str, str]) -> Page:
        query = params.get("q", "").strip()
        category = params.get("category", "").strip() or None
        low, high = _price(params.get("min_price")), _price(params.get("max_price"))
        sort = params.get("sort", "relevance")
        sort = sort if sort in SORTS else "relevance"
        found = self.catalog.search(query, category=category, min_price=low, max_price=high, sort=sort)
        pages = max(1, math.ceil(len(found) / self.page_size))
        page = min(max(_int(params.get("page"), 1), 1), pages)
        start = (page - 1) * self.page_size
        state = {
            "q": query,
            "category": category,
            "min_price": params.get("min_price"),
            "max_price": params.get("max_price"),
            "sort": None if sort == "relevance" else sort,
        }

        def url(**change: Any) -> str:
            return _url("/search", **(state | change))

        types = Counter(p.product_type for p in found).most_common(8) if category is None else []
        return self._render(
            visitor,
            "results.html",
            query=query,
            heading=f'Results for "{query}"' if query else (category or "All products"),
            total=len(found),
            first=start + 1,
            last=min(start + self.page_size, len(found)),
            products=found[start : start + self.page_size],
            page=page,
            pages=pages,
            prev_url=url(page=page - 1) if page > 1 else None,
            next_url=url(page=page + 1) if page < pages else None,
            categories=[(name, n, url(category=name, page=None)) for name, n in types],
            price_ranges=[]
            if low is not None or high is not None
            else [(label, url(min_price=lo, max_price=hi, page=None)) for label, lo, hi in PRICE_RANGES],
            filtered=bool(category or low is not None or high is not None),
            clear_url=_url("/search", q=query, sort=state["sort"]),
            keep=[(k, v) for k, v in state.items() if v and k != "sort"],
            sorts=list(SORTS.items()),
            sort=sort,
        )

    def _product(
        self,
        visitor: _Visitor,
        params: Mapping[str, str],
        product_id: str,
        chosen: Mapping[str, str] | None = None,
        status: int = 200,
    ) -> Page:
        try:
            product = self.catalog.product(product_id)
        except KeyError:
            return self._page(visitor, 404, "Product not found", f"There is no product {product_id}.")
        names = list(product.options)
        if names:
            availability = "Choose " + " and ".join(names) + "."
        else:
            units = product.stock.get((), 0)
            availability = f"In stock ({units} left)." if units > 0 else "Out of stock."
        stock = {"options": names, "units": {"|".join(k): v for k, v in product.stock.items()}}
        query = params.get("q", "").strip()
        return self._render(
            visitor,
            "product.html",
            status,
            p=product,
            chosen=dict(chosen or {}),
            availability=availability,
            stock_json=json.dumps(stock),
            back_url=_url("/search", q=query) if query else None,
        )

    def _add(self, visitor: _Visitor, params: Mapping[str, str]) -> Page:
        product_id = params.get("product", "")
        try:
            product = self.catalog.product(product_id)
        except KeyError:
            return self._page(visitor, 404, "Product not found", f"There is no product {product_id!r}.")
        chosen = {name: params[name] for name in product.options if params.get(name)}
        missing = [name for name in product.options if name not in chosen]
        if missing:
            visitor.message = "Choose " + " and ".join(missing) + " first."
        elif not product.in_stock(chosen):
            visitor.message = (
                "Sorry, this product is out of stock in "
                + ", ".join(f"{k} {v}" for k, v in chosen.items())
                + "."
            )
        if visitor.message:
            return self._product(visitor, {}, product.id, chosen, status=400)
        visitor.cart.append(Line(product, chosen))
        visitor.message = f"Added {product.title} to your cart."
        return Page(303, location="/cart")

    def _cart(self, visitor: _Visitor, params: Mapping[str, str]) -> Page:
        return self._render(
            visitor,
            "cart.html",
            lines=visitor.cart,
            subtotal=sum(line.product.price for line in visitor.cart),
        )

    def _remove(self, visitor: _Visitor, params: Mapping[str, str]) -> Page:
        index = _int(params.get("line"), -1)
        if 0 <= index < len(visitor.cart):
            line = visitor.cart.pop(index)
            visitor.message = f"Removed {line.product.title}."
        else:
            visitor.message = "That cart line does not exist."
        return Page(303, location="/cart")

    def _checkout(self, visitor: _Visitor, params: Mapping[str, str]) -> Page:
        return self._render(visitor, "checkout.html", lines=visitor.cart, shipping=list(SHIPPING.items()))

    def _place_order(self, visitor: _Visitor, params: Mapping[str, str]) -> Page:
        if not visitor.cart:
            visitor.message = "Your cart is empty: there is nothing to order."
            return Page(303, location="/checkout")
        shipping = params.get("shipping", "standard")
        # Numbered per visitor: nothing on a page depends on other visitors or earlier episodes.
        order = Order(
            len(visitor.orders) + 1, tuple(visitor.cart), SHIPPING.get(shipping, SHIPPING["standard"])
        )
        visitor.orders.append(order)
        visitor.cart.clear()
        return Page(303, location=f"/order/{order.number}")

    def _order(self, visitor: _Visitor, number: int) -> Page:
        for order in visitor.orders:
            if order.number == number:
                return self._render(visitor, "order.html", order=order)
        return self._page(visitor, 404, "Order not found", f"You have no order {number}.")


def _url(path: str, **params: Any) -> str:
    """``path`` with the non-empty ``params`` as its query string."""
    query = urlencode({k: v for k, v in params.items() if v not in (None, "")})
    return f"{path}?{query}" if query else path


def _price(text: str | None) -> float | None:
    try:
        value = float(text) if text else None
    except ValueError:
        return None
    return value if value is not None and math.isfinite(value) and value >= 0 else None


def _int(text: str | None, default: int) -> int:
    try:
        return int(text) if text else default
    except ValueError:
        return default
