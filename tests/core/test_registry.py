"""The plugin registry: entry-point discovery, lazy imports, manifests, errors of make()."""

from __future__ import annotations

import json
import sys

import gymnasium as gym
import pytest

import agentgym
from agentgym.registry import PluginWarning, UnknownEnvError, load_plugins

from support import run_python


def test_own_envs_registered_through_entry_point():
    envs = agentgym.list_envs()
    for env_id in ("agentgym/Sokoban-v0", "agentgym/Household-v0"):
        assert env_id in envs and env_id in gym.registry
        assert envs[env_id].plugin == "textgames"
        assert envs[env_id].family == "textgames"


def test_gymnasium_make_after_import():
    env = gym.make("agentgym/Sokoban-v0")
    obs, info = env.reset(seed=0)
    assert isinstance(obs, str) and info["task_id"]
    env.close()


def test_env_modules_imported_lazily():
    proc = run_python(
        "import sys, agentgym; print(sorted(m for m in sys.modules if m.startswith('agentgym.envs')))"
    )
    loaded = proc.stdout.strip()
    assert "sokoban" not in loaded and "household" not in loaded, loaded
    assert "'agentgym.envs.textgames'" in loaded


def test_gymnasium_make_without_importing_agentgym():
    run_python("import gymnasium as gym; gym.make('agentgym:agentgym/Sokoban-v0').reset(seed=1)")


def test_unknown_id_suggests_close_ids():
    with pytest.raises(UnknownEnvError, match="Did you mean 'agentgym/Sokoban-v0'"):
        agentgym.make("agentgym/Sokobn-v0")
    with pytest.raises(UnknownEnvError, match="agentgym list"):
        agentgym.make("nothing/LikeThis-v9")
    assert issubclass(UnknownEnvError, gym.error.Error)


def test_unknown_kwargs_name_accepted_ones():
    with pytest.raises(TypeError, match=r"unknown argument\(s\) \['sise'\].*accepts: .*num_boxes"):
        agentgym.make("agentgym/Sokoban-v0", sise=5)


def test_register_refuses_non_string_entry_point():
    with pytest.raises(TypeError, match="module:Class"):
        agentgym.register("test/Eager-v0", entry_point=lambda: None)
    assert "test/Eager-v0" not in gym.registry


def test_plugin_listed_and_made(plugin_path):
    env = {"PYTHONPATH": str(plugin_path)}
    proc = run_python(
        "import json, gymnasium as gym, agentgym\n"
        "env = gym.make('sample/Countdown-v0', start=2)\n"
        "obs, _ = env.reset(seed=0)\n"
        "steps = [env.step('tick')[2] for _ in range(2)]\n"
        "plugin = agentgym.manifest('sample/Countdown-v0').plugin\n"
        "print(json.dumps({'obs': obs, 'done': steps, 'm': plugin}))",
        env=env,
    )
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out == {"obs": "2 to go.", "done": [False, True], "m": "sample"}
    listing = run_python(
        "from agentgym.cli import main; main(['list'])", env={**env, "COLUMNS": "200"}
    ).stdout
    assert "sample/Countdown-v0" in listing and "agentgym/Sokoban-v0" in listing


def test_broken_plugin_warns_and_rest_works(plugin_path):
    proc = run_python(
        "import warnings\n"
        "warnings.simplefilter('always')\n"
        "import gymnasium as gym, agentgym\n"
        "gym.make('sample/Countdown-v0').reset(seed=0)\n"
        "gym.make('agentgym/Sokoban-v0').reset(seed=0)\n"
        "print('OK')",
        env={"PYTHONPATH": str(plugin_path)},
    )
    assert proc.stdout.strip().endswith("OK")
    assert "PluginWarning" in proc.stderr
    assert "agentgym plugin 'broken'" in proc.stderr
    assert "agentgym_dependency_that_is_not_installed" in proc.stderr


def test_load_plugins_is_idempotent():
    before = dict(agentgym.list_envs())
    assert load_plugins() == []
    assert agentgym.list_envs() == before


def test_failing_register_function_is_reported(monkeypatch):
    """Failure injection: an entry point whose register() raises after import."""
    from importlib.metadata import EntryPoint

    import agentgym.registry as registry

    ep = EntryPoint(name="exploding", value="json:loads", group=registry.ENTRY_POINT_GROUP)
    monkeypatch.setattr(registry, "entry_points", lambda group: [ep])
    with pytest.warns(PluginWarning, match="'exploding'.*TypeError"):
        assert load_plugins() == ["exploding"]
    assert "agentgym/Sokoban-v0" in agentgym.list_envs()
    registry._loaded.discard(("exploding", "json:loads"))


def test_version():
    assert agentgym.__version__ and sys.modules["agentgym"].__version__ == agentgym.__version__
