"""Web shopping: find and buy what an instruction asks for, in a generated web shop (WebShop).

- :mod:`~agentgym.envs.web.catalog`: a generated catalog of products with options and stock;
- :mod:`~agentgym.envs.web.tasks`: shopping instructions and WebShop's graded reward;
- :mod:`~agentgym.envs.web.site`: the shop's pages and state, and the web app serving them;
- :mod:`~agentgym.envs.web.browser`: ``agentgym/Shop-v0``, the shop in Chromium (Playwright),
  observed as accessibility snapshots;
- :mod:`~agentgym.envs.web.text`: ``agentgym/ShopText-v0``, the same pages as text, no browser;
- :mod:`~agentgym.envs.web.expert`: a scripted shopper that solves every task in both modes.
"""

from agentgym.registry import EnvManifest, Resources
from agentgym.registry import register as _register


def register() -> None:
    """Entry point of the ``agentgym.envs`` group: registers the web envs."""
    _register(
        "agentgym/Shop-v0",
        "agentgym.envs.web.browser:ShopBrowserEnv",
        manifest=EnvManifest(
            description="Buy what an instruction asks for in a web shop, through Chromium",
            family="web",
            extras=("web",),
            system_packages=("chromium", "fonts-liberation", "libatomic1"),  # libatomic1: Playwright's node
            # Chromium: a few hundred MiB per browser, and every thread counts as a pid.
            resources=Resources(memory_mb=2048, pids=1024),
            client_kwargs={"split": None, "max_steps": 100, "screenshot": None},
        ),
    )
    _register(
        "agentgym/ShopText-v0",
        "agentgym.envs.web.text:ShopTextEnv",
        manifest=EnvManifest(
            description="The web shop as WebShop-style text: search[...] and click[...]",
            family="web",
            extras=("web",),
            client_kwargs={"split": None, "max_steps": 100},
        ),
    )
