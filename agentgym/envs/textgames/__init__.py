"""Fast pure-Python text games: Sokoban, a household world in the spirit of ALFWorld, and
guess-the-number."""

from agentgym.registry import EnvManifest, FamilyPrompt
from agentgym.registry import register as _register

#: How agents of this family are told to act (every env of the family carries it).
PROMPT = FamilyPrompt(
    "You are an expert player of text games. Each turn you see the game's answer to your last action."
)


def register() -> None:
    """Entry point of the ``agentgym.envs`` group: registers the text games."""
    _register(
        "agentgym/Sokoban-v0",
        "agentgym.envs.textgames.sokoban:SokobanEnv",
        manifest=EnvManifest(
            description="Push boxes onto targets in a procedurally generated, solvable level",
            family="textgames",
            prompt=PROMPT,
            client_kwargs={"dim_room": 12, "num_boxes": 6, "max_steps": 1000},
        ),
    )
    _register(
        "agentgym/Household-v0",
        "agentgym.envs.textgames.household:HouseholdEnv",
        manifest=EnvManifest(
            description="ALFWorld-style household tasks: find, clean, heat, cool, light, place",
            family="textgames",
            prompt=PROMPT,
            client_kwargs={"task_types": None, "num_rooms": 8, "max_steps": 1000, "invalid_penalty": None},
        ),
    )
    _register(
        "agentgym/GuessNumber-v0",
        "agentgym.envs.textgames.guess_number:GuessNumberEnv",
        manifest=EnvManifest(
            description="Find a secret number from higher/lower feedback (small-model learning task)",
            family="textgames",
            prompt=PROMPT,
            client_kwargs={"high": 1_000_000, "max_guesses": 100},
        ),
    )
