"""Fast pure-Python text games: Sokoban and a household world in the spirit of ALFWorld."""

from agentgym.registry import EnvManifest, register as _register


def register() -> None:
    """Entry point of the ``agentgym.envs`` group: registers the text games."""
    _register(
        "agentgym/Sokoban-v0",
        "agentgym.envs.textgames.sokoban:SokobanEnv",
        manifest=EnvManifest(
            description="Push boxes onto targets in a procedurally generated, solvable level",
            family="textgames",
        ),
    )
    _register(
        "agentgym/Household-v0",
        "agentgym.envs.textgames.household:HouseholdEnv",
        manifest=EnvManifest(
            description="ALFWorld-style household tasks: find, clean, heat, cool, light, place",
            family="textgames",
        ),
    )
