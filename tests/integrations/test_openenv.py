"""An agentgym env served to OpenEnv's clients (agentgym.integrations.openenv), through
`agentgym serve --protocol openenv` in a child process, driven by openenv-core's own clients."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
import websockets.sync.client
from openenv.core import GenericEnvClient

from agentgym.cli import main
from agentgym.envs.textgames.guess_number import GuessNumberEnv
from agentgym.integrations.openenv import TextAction, TextEnvClient, TextState, create_app
from agentgym.process import wait_until

from support.servers import OPENENV_ENV, serving_in_thread


def test_generic_client_plays_an_episode(openenv_server: str) -> None:
    with GenericEnvClient(base_url=openenv_server).sync() as client:
        result = client.reset(seed=0, options={"task_id": "5"})
        assert result.observation["text"] == "Guess a number from 1 to 8. Guesses left: 5."
        assert result.observation["info"]["task_id"] == "5" and result.done is False
        result = client.step({"action": "4"})
        assert result.observation["text"].startswith("4 is too low.") and result.reward == 0.0
        for junk in ("not a number", "\ud800", "x" * 100_000):  # answered by the env
            result = client.step({"action": junk})
            assert result.observation["info"]["action_valid"] is False and result.done is False
            assert result.observation["text"].startswith("That is not a guess")
        result = client.step({"action": "5"})
        assert result.reward == 1.0 and result.done and result.observation["terminated"]
        state = client.state()
    assert state["step_count"] == 5 and state["episode_return"] == 1.0
    assert state["env_id"] == OPENENV_ENV and state["task_id"] == "5" and state["episode_id"]


def test_typed_client_wins_and_sessions_are_apart(openenv_server: str) -> None:
    with (
        TextEnvClient(base_url=openenv_server).sync() as a,
        TextEnvClient(base_url=openenv_server).sync() as b,
    ):
        assert a.reset(options={"task_id": "3"}).observation.text.startswith("Guess a number")
        b.reset(options={"task_id": "6"}, episode_id="mine")
        result = a.step(TextAction(action="3"))
        assert result.observation.text == "3 is right! You found the secret number."
        assert result.reward == 1.0 and result.done and result.observation.terminated
        assert result.observation.info["success"] is True
        assert b.step(TextAction(action="3")).observation.text.startswith("3 is too low.")
        state = a.state()
        assert isinstance(state, TextState) and state.episode_return == 1.0 and state.step_count == 1
        assert b.state().episode_id == "mine"


def test_bad_requests_are_errors_and_the_session_goes_on(openenv_server: str) -> None:
    with GenericEnvClient(base_url=openenv_server).sync() as client:
        with pytest.raises(RuntimeError, match=r"409: .*step before reset"):
            client.step({"action": "1"})
        with pytest.raises(RuntimeError, match="unknown reset argument.*'task_id'.*accepted: seed"):
            client.reset(task_id="5")
        with pytest.raises(RuntimeError, match="task_id must be a number from 1 to 8"):
            client.reset(options={"task_id": "99"})
        with pytest.raises(RuntimeError, match="Invalid message"):
            client.step({"text": "1"})  # not a TextAction
        assert client.reset(options={"task_id": "2"}).observation["info"]["task_id"] == "2"
    assert httpx.post(f"{openenv_server}/step", json={"action": {"action": "1"}}).status_code == 409


def test_browsers_are_refused(openenv_server: str) -> None:
    assert httpx.get(f"{openenv_server}/health").json() == {"status": "healthy"}
    assert httpx.get(f"{openenv_server}/health", headers={"Origin": "https://example.com"}).status_code == 403
    with pytest.raises(websockets.exceptions.InvalidStatus, match="403"):
        url = openenv_server.replace("http", "ws") + "/ws"
        websockets.sync.client.connect(url, additional_headers={"Origin": "https://example.com"})


def test_each_session_env_is_closed_when_its_connection_ends_or_the_server_stops(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    closed: list[GuessNumberEnv] = []
    monkeypatch.setattr(GuessNumberEnv, "close", lambda self: closed.append(self), raising=False)
    app = create_app(OPENENV_ENV)  # makes and closes one env, to check the id and kwargs
    with serving_in_thread(app) as url:
        with GenericEnvClient(base_url=url).sync() as client:
            client.reset(seed=0)
        wait_until(lambda: len(closed) == 2, timeout=10, interval=0.01, expired=TimeoutError)
        open_client = GenericEnvClient(base_url=url).sync()
        open_client.reset(seed=1)
    assert len(closed) == 3
    open_client.close()


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (["--host", "0.0.0.0"], "binding 0.0.0.0 would let other machines in"),
        (["--host", "10.1.2.3", "--token", "t"], "--token go with --protocol agentgym"),
        (["--uds", "/tmp/agentgym-openenv.sock"], "--uds go with --protocol agentgym"),
        (["--env", "agentgym/GuessNumbr-v0"], "Did you mean 'agentgym/GuessNumber-v0'"),
        (["--set", "highest=9"], "unknown argument.*highest"),
        (["--set", "high=1"], "high must be an int in"),
        (["--max-sessions", "0"], "max_concurrent_envs"),
        (["--idle-timeout", "0"], "idle_timeout_s must be > 0"),
    ],
)
def test_cli_refuses_before_binding(args: list[str], error: str) -> None:
    env = [] if "--env" in args else ["--env", OPENENV_ENV]
    with pytest.raises(SystemExit, match=error):
        main(["serve", "--protocol", "openenv", *env, *args, "--port", "0"])


def test_cli_protocol_options_stay_apart(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="name the env with --env"):
        main(["serve", "--protocol", "openenv"])
    with pytest.raises(SystemExit, match="--env and --set go with --protocol openenv"):
        main(["serve", "--env", OPENENV_ENV, "--ready-file", str(tmp_path / "ready.json")])
    assert not (tmp_path / "ready.json").exists()
