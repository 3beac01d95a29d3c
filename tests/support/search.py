"""Search episodes played to order, for the IGPO test and benchmark."""

from __future__ import annotations

from typing import Any

from agentgym.episode import Episode, Turn

WORDS = (
    "apple window river music green table cloud seven paper garden silver morning stone bridge yellow letter"
).split()


def play(env: Any, question: Any, queries: list[str], answer: str) -> Episode:
    """An episode of ``env`` on ``question`` with the given searches and then the answer."""
    obs, info = env.reset(options={"task_id": question.id})
    turns = []
    for reply in [f"<search>{q}</search>" for q in queries] + [f"<answer>{answer}</answer>"]:
        next_obs, reward, _terminated, _truncated, next_info = env.step(reply)
        turns.append(
            Turn(
                observation=obs,
                action=reply,
                action_valid=next_info["action_valid"],
                reward=reward,
                response_text=reply,
                info={"supporting_found": next_info["supporting_found"]},
            )
        )
        obs = next_obs
    return Episode(
        episode_id=question.id,
        env_id="agentgym/SearchQA-v0",
        task_id=question.id,
        group_id=question.id,
        seed=0,
        instruction=info["instruction"],
        turns=turns,
        ground_truth=info["ground_truth"],
    )
