"""Dense encoders other than MiniLM (the papers' Contriever-MSMARCO and BGE), offline: a tiny BERT built in
code, saved as a plain transformers folder (as Contriever is published) or as a sentence-transformers folder
(as BGE is), indexed and searched with each pooling. The vectors are checked against the model's last hidden
state pooled by hand; the index records the settings, and a query encoder that differs is refused."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from ragteam.retrieval.build_config import DenseBuild
from ragteam.retrieval.config import RetrieverConfig
from ragteam.retrieval.dense import DenseRetriever, open_embeddings
from ragteam.retrieval.encoder import BGE_QUERY_INSTRUCTION, Encoder, folder_settings, resolve_settings
from ragteam.retrieval.factory import dense_build, encoder_key, query_encoder, retriever_from_index
from ragteam.retrieval.index import build_index, open_index
from ragteam.types import Doc

WORDS = (
    "paris is the capital of france berlin germany rome italy river seine tiber spree city "
    "which what where on lies"
).split()

DOCS = [
    Doc(id="d0", title="Paris", text="paris is the capital of france"),
    Doc(id="d1", title="Berlin", text="berlin is the capital of germany"),
    Doc(id="d2", title="Rome", text="rome is the capital of italy"),
    Doc(id="d3", title="Seine", text="the river seine lies on paris"),
    Doc(id="d4", title="Tiber", text="the river tiber lies on rome"),
]


def tiny_bert(folder: Path) -> Path:
    """A 2-layer BERT (hidden 16) and its WordPiece tokenizer, saved as a transformers folder."""
    from transformers import BertConfig, BertModel, BertTokenizerFast

    folder.mkdir(parents=True, exist_ok=True)
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *sorted(set(WORDS))]
    (folder / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    BertTokenizerFast(vocab_file=str(folder / "vocab.txt"), do_lower_case=True).save_pretrained(folder)
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=len(vocab),
        hidden_size=16,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=64,
    )
    BertModel(config).eval().save_pretrained(folder)
    return folder


def as_sentence_transformers(folder: Path, pooling: str, normalize: bool, query_prompt: str | None) -> Path:
    """Add what a sentence-transformers folder declares (modules.json, 1_Pooling/config.json, Normalize)."""
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
    ]
    if normalize:
        modules.append(
            {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}
        )
        (folder / "2_Normalize").mkdir(exist_ok=True)
    (folder / "modules.json").write_text(json.dumps(modules), encoding="utf-8")
    (folder / "1_Pooling").mkdir(exist_ok=True)
    (folder / "1_Pooling" / "config.json").write_text(
        json.dumps(
            {
                "word_embedding_dimension": 16,
                "pooling_mode_cls_token": pooling == "cls",
                "pooling_mode_mean_tokens": pooling == "mean",
                "pooling_mode_max_tokens": False,
                "pooling_mode_mean_sqrt_len_tokens": False,
            }
        ),
        encoding="utf-8",
    )
    (folder / "sentence_bert_config.json").write_text(
        json.dumps({"max_seq_length": 64, "do_lower_case": False}), encoding="utf-8"
    )
    prompts = {"query": query_prompt} if query_prompt else {}
    (folder / "config_sentence_transformers.json").write_text(
        json.dumps({"prompts": prompts, "default_prompt_name": None}), encoding="utf-8"
    )
    return folder


def by_hand(folder: Path, texts: list[str], pooling: str, normalize: bool) -> np.ndarray:
    """The model's last hidden state, one text at a time (no padding), pooled and normalised here."""
    from transformers import BertModel, BertTokenizerFast

    tok = BertTokenizerFast.from_pretrained(folder)
    model = BertModel.from_pretrained(folder).eval()
    out = []
    with torch.no_grad():
        for text in texts:
            states = model(**tok(text, return_tensors="pt")).last_hidden_state[0]  # [T, H]
            vec = states[0] if pooling == "cls" else states.mean(dim=0)
            out.append((vec / vec.norm() if normalize else vec).numpy())
    return np.stack(out)


@pytest.fixture(scope="module")
def contriever_like(tmp_path_factory) -> Path:
    return tiny_bert(tmp_path_factory.mktemp("contriever"))


@pytest.fixture(scope="module")
def bge_like(tmp_path_factory) -> Path:
    folder = tiny_bert(tmp_path_factory.mktemp("bge"))
    return as_sentence_transformers(folder, "cls", True, query_prompt=None)


# ---------------------------------------------------------------------- each pooling, by hand


@pytest.mark.parametrize(("pooling", "normalize"), [("mean", False), ("cls", True), ("mean", True)])
def test_a_plain_folder_pools_the_last_hidden_state_as_declared(contriever_like, pooling, normalize):
    enc = Encoder(contriever_like, pooling=pooling, normalize=normalize, batch_size=2)
    texts = [d.contents for d in DOCS]  # of different lengths: padded in a batch, not by hand
    got = enc.encode(texts)
    assert got.shape == (5, 16) and got.dtype == np.float32
    np.testing.assert_allclose(got, by_hand(contriever_like, texts, pooling, normalize), atol=1e-5)
    norms = np.linalg.norm(got, axis=1)
    assert np.allclose(norms, 1.0, atol=1e-5) == normalize


def test_a_plain_folder_must_declare_its_pooling(contriever_like):
    assert folder_settings(contriever_like) is None
    with pytest.raises(ValueError, match="declares no pooling.*--retriever.pooling mean\\|cls"):
        Encoder(contriever_like)
    assert resolve_settings(contriever_like, "mean") == {
        "pooling": "mean",
        "normalize": False,
        "query_prefix": "",
    }


def test_a_sentence_transformers_folder_is_read_and_encoded_as_it_declares(bge_like):
    assert folder_settings(bge_like) == {"pooling": "cls", "normalize": True, "query_prefix": ""}
    enc = Encoder(bge_like, query_prefix=BGE_QUERY_INSTRUCTION)
    assert enc.sentence_transformers and enc.settings["pooling"] == "cls" and enc.normalize
    texts = [d.contents for d in DOCS]
    np.testing.assert_allclose(enc.encode(texts), by_hand(bge_like, texts, "cls", True), atol=1e-5)
    with pytest.raises(ValueError, match="declares pooling 'cls'.*'mean'"):
        Encoder(bge_like, pooling="mean")  # the folder's own pooling is not overridden by mistake
    with pytest.raises(ValueError, match="declares normalize True"):
        Encoder(bge_like, normalize=False)


def test_a_folder_prompt_is_the_query_prefix(tmp_path):
    folder = as_sentence_transformers(tiny_bert(tmp_path / "m"), "mean", False, query_prompt="query: ")
    assert folder_settings(folder) == {"pooling": "mean", "normalize": False, "query_prefix": "query: "}
    assert Encoder(folder).query_prefix == "query: "
    assert Encoder(folder, query_prefix="").query_prefix == ""  # a given prefix wins


# ---------------------------------------------------------------------- built, recorded, queried


@pytest.mark.parametrize(("pooling", "normalize"), [("mean", False), ("cls", True)])
def test_an_index_is_built_recorded_and_queried_with_the_same_pooling(
    contriever_like, tmp_path, pooling, normalize
):
    cfg = DenseBuild(model=str(contriever_like), pooling=pooling, normalize=normalize, query_prefix="q: ")
    folder = build_index(DOCS, tmp_path / "idx", kinds=["dense"], progress=False, dense=cfg)
    dense = folder.manifest["dense"]
    assert (dense["pooling"], dense["normalized"], dense["query_prefix"]) == (pooling, normalize, "q: ")
    assert dense["model"] == str(contriever_like.resolve()) and dense["dim"] == 16
    meta = json.loads((folder.path / "dense" / "meta.json").read_text())
    assert (meta["pooling"], meta["normalized"], meta["query_prefix"]) == (pooling, normalize, "q: ")

    # the stored passage vectors are the hand-pooled ones
    stored = np.asarray(open_embeddings(folder.path)[0])
    np.testing.assert_allclose(
        stored, by_hand(contriever_like, [d.contents for d in DOCS], pooling, normalize), atol=1e-5
    )

    # no setting given: the index's encoder, pooling and prefix; scores are the inner products
    retriever = retriever_from_index(folder, RetrieverConfig(kind="dense"))
    [hits] = retriever.search(["capital of italy"], 5)
    q = by_hand(contriever_like, ["q: capital of italy"], pooling, normalize)[0]
    expected = stored @ q
    assert [h.doc.id for h in hits] == [DOCS[i].id for i in np.argsort(-expected, kind="stable")]
    np.testing.assert_allclose([h.score for h in hits], np.sort(expected)[::-1], atol=1e-5)


def test_a_query_encoder_with_other_settings_is_refused(contriever_like, tmp_path):
    cfg = DenseBuild(model=str(contriever_like), pooling="mean", normalize=False)
    folder = build_index(DOCS, tmp_path / "idx", kinds=["dense"], progress=False, dense=cfg)
    for wrong in ({"pooling": "cls"}, {"normalize": True}, {"query_prefix": BGE_QUERY_INSTRUCTION}):
        with pytest.raises(ValueError, match="passages were embedded with .*queries must be embedded alike"):
            retriever_from_index(folder, RetrieverConfig(kind="dense", **wrong))
    with pytest.raises(ValueError, match="passages were embedded with"):
        DenseRetriever(folder.path, encoder=Encoder())  # MiniLM on a tiny-BERT index: another encoder
    same = RetrieverConfig(kind="dense", dense_model=str(contriever_like), pooling="mean", normalize=False)
    assert query_encoder(open_index(folder.path), same).settings["pooling"] == "mean"


def test_a_cached_index_is_keyed_by_its_encoder(contriever_like):
    assert dense_build(RetrieverConfig()) is None and encoder_key(None, ["bm25", "dense"]) == ""
    contriever = dense_build(
        RetrieverConfig(dense_model=str(contriever_like), pooling="mean", normalize=False)
    )
    bge = dense_build(RetrieverConfig(dense_model=str(contriever_like), pooling="cls", normalize=True))
    assert contriever is not None and contriever.model == str(contriever_like)
    keys = {encoder_key(d, ["bm25", "dense"]) for d in (contriever, bge)}
    assert len(keys) == 2 and all(k.startswith("-enc") for k in keys)
    assert encoder_key(contriever, ["bm25"]) == ""  # a BM25 index does not depend on the encoder


def test_a_dataset_index_is_built_with_the_named_encoder_in_its_own_cache(
    contriever_like, hotpot_small, tmp_path, monkeypatch
):
    from ragteam.retrieval.factory import open_retriever
    from ragteam.retrieval.index import read_manifest

    monkeypatch.setenv("RAGTEAM_HOME", str(tmp_path / "home"))
    cfg = RetrieverConfig(kind="dense", dense_model=str(contriever_like), pooling="mean", normalize=False)
    retriever = open_retriever(cfg, data=str(hotpot_small))  # --retriever.dense-model with --data
    [folder] = [f for f in (tmp_path / "home" / "indexes").iterdir() if f.is_dir()]
    assert folder.name.endswith(encoder_key(dense_build(cfg), ["dense"]))  # not MiniLM's cache folder
    dense = read_manifest(folder)["dense"]
    assert (dense["model"], dense["pooling"], dense["normalized"]) == (
        str(contriever_like.resolve()),
        "mean",
        False,
    )
    assert len(retriever.search(["which city is the capital"], 3)[0]) == 3
    again = open_retriever(RetrieverConfig(kind="dense", index=str(folder)))  # the folder alone: its encoder
    assert again.encoder.path == str(contriever_like.resolve()) and again.encoder.pooling == "mean"
