"""GUI desktops: real applications operated through their accessibility trees.

- :mod:`~agentgym.envs.gui.driver`: one desktop (Xvfb, D-Bus, AT-SPI, openbox, applications)
  served over pipes, run under Debian's Python;
- :mod:`~agentgym.envs.gui.desktop`: its client;
- :mod:`~agentgym.envs.gui.observation`, :mod:`~agentgym.envs.gui.actions`: the tree as text and
  the action language;
- :mod:`~agentgym.envs.gui.tasks`, :mod:`~agentgym.envs.gui.ods`: generated tasks and checkers;
- :mod:`~agentgym.envs.gui.env`: ``agentgym/Desktop-v0``; :mod:`~agentgym.envs.gui.expert`.
"""

from agentgym.registry import EnvManifest, FamilyPrompt
from agentgym.registry import register as _register

#: How agents of this family are told to act (every env of the family carries it).
PROMPT = FamilyPrompt(
    "You operate desktop applications to do what the task asks. Each turn you see the "
    "accessibility tree of the open windows: numbered elements with role, name, states, "
    "screen box @(x,y wxh) and text. Act with click(id) or click(x, y), double_click, "
    'right_click, drag(x1, y1, x2, y2), type("text"), key("ctrl+s"), scroll(dx, dy) '
    "or wait(); when the task is finished (files saved), done().",
    example="click(7)",
)


def register() -> None:
    """Entry point of the ``agentgym.envs`` group: registers the desktop env."""
    _register(
        "agentgym/Desktop-v0",
        "agentgym.envs.gui.env:DesktopEnv",
        manifest=EnvManifest(
            description="Mousepad, galculator, LibreOffice Calc and Thunar on an X desktop, "
            "through AT-SPI accessibility trees",
            family="gui",
            prompt=PROMPT,
            extras=("gui",),
            # X server, buses, window manager, xdotool, Debian's Python with the Atspi and Gdk
            # typelibs for the driver, and the applications
            system_packages=(
                "xvfb",
                "openbox",
                "dbus",
                "at-spi2-core",
                "python3-gi",
                "gir1.2-atspi-2.0",
                "gir1.2-gtk-3.0",
                "xdotool",
                "mousepad",
                "galculator",
                "thunar",
                "libreoffice-calc",
                "libreoffice-gtk3",
                "fonts-dejavu-core",
            ),
            client_kwargs={
                "tasks": None,
                "split": None,
                "max_turns": 100,
                "screenshot": None,
                "settle_s": 2,
                "width": 1920,
                "height": 1200,
            },
        ),
    )
