"""`ragteam train dpo|prm` on the tiny model, the PRM's one input rendering, and pairs-file errors."""

from __future__ import annotations

from pathlib import Path

import pytest
import train_helpers
from train_helpers import write_jsonl

from ragteam.cli.main import main
from ragteam.llm.prm import PRMConfig, ProcessRewardModel, prm_input_ids, render_prm_input
from ragteam.train.data import DataError, read_pair_rows
from ragteam.train.dpo import DPOConfig, train_dpo
from ragteam.train.prm import PRMTrainConfig, train_prm
from ragteam.train.run_folder import read_log

PAIRS = [
    {
        "role": "actor",
        "messages": [
            {"role": "system", "content": "You are an actor."},
            {"role": "user", "content": "Capital?"},
        ],
        "chosen": "Answer: Paris",
        "rejected": "Search: the river valley",
        "scores": {"chosen": 1.0, "rejected": 0.0},
        "question_id": "q1",
    },
    {
        "role": "actor",
        "messages": [{"role": "user", "content": "Who wrote the novel?"}],
        "chosen": "Answer: the author",
        "rejected": "Search: film war",
    },
    {
        "role": "router",
        "messages": [{"role": "user", "content": "Which team won the cup?"}],
        "chosen": "Answer: the team",
        "rejected": "Search: the valley",
    },
    {
        "role": "router",
        "messages": [{"role": "user", "content": "Is it yes or no?"}],
        "chosen": "Answer: yes",
        "rejected": "Search: unknown",
    },
]


@pytest.fixture
def pairs_file(tmp_path: Path) -> Path:
    return write_jsonl(tmp_path / "pairs.jsonl", PAIRS)


def tiny_cfg(data: Path, out: Path, **kw) -> DPOConfig:
    """A DPO config on the tiny model (`prm_cfg`: a PRM's)."""
    return train_helpers.tiny_cfg(DPOConfig, data, out, **kw)


def prm_cfg(data: Path, out: Path, **kw) -> PRMTrainConfig:
    prm = {"model": "tiny", **kw.pop("prm", {})}
    base = dict(data=str(data), out=str(out), batch_size=2, max_length=256, device="cpu", progress=False)
    return PRMTrainConfig(**(base | kw), prm=prm)


def items() -> list[tuple[list, str]]:
    return [(p["messages"], p["chosen"]) for p in PAIRS] + [(p["messages"], p["rejected"]) for p in PAIRS]


# ---- DPO -------------------------------------------------------------------------------------------------


def test_dpo_two_steps_saves_a_loadable_policy(pairs_file: Path, tmp_path: Path) -> None:
    from ragteam.llm.base import ChatRequest, Sampling
    from ragteam.llm.local import LocalChatModel

    out = train_dpo(tiny_cfg(pairs_file, tmp_path / "dpo", max_steps=2, save_steps=1))
    logged = [r for r in read_log(out) if "loss" in r]
    assert [r["step"] for r in logged] == [1, 2]
    assert logged[0]["rewards/margins"] == pytest.approx(0.0, abs=1e-6)  # step 1: policy == reference
    assert (out / "checkpoint-2").is_dir() and (out / "config.json").is_file()
    policy = LocalChatModel(out, device="cpu")
    [result] = policy.chat([ChatRequest(messages=PAIRS[0]["messages"], sampling=Sampling(max_tokens=4))])
    assert result[0].completion_tokens >= 1


def test_dpo_lora_through_the_cli(pairs_file: Path, tmp_path: Path) -> None:
    from ragteam.llm.local import LocalChatModel

    out = tmp_path / "dpo-lora"
    argv = ["train", "dpo", "--data", str(pairs_file), "--out", str(out), "--policy.model", "tiny", "--lora"]
    argv += ["--lora-r", "4", "--max-steps", "2", "--batch-size", "2", "--dpo.beta", "0.2", "--no-progress"]
    assert main(argv + ["--device", "cpu"]) == 0
    assert (out / "adapter_config.json").is_file()
    assert "beta: 0.2" in (out / "config.yaml").read_text()
    LocalChatModel("tiny", device="cpu", lora=out)  # --policy.model tiny --policy.lora DIR


# ---- prm -------------------------------------------------------------------------------------------------


def test_prm_two_steps_saves_a_loadable_prm(pairs_file: Path, tmp_path: Path) -> None:
    out = train_prm(prm_cfg(pairs_file, tmp_path / "prm", max_steps=2))
    assert [r["step"] for r in read_log(out) if "loss" in r] == [1, 2]
    prm = ProcessRewardModel.from_config(PRMConfig(model=str(out), device="cpu", max_batch_size=3))
    scores = prm.score(items())
    assert len(scores) == 8 and all(isinstance(s, float) for s in scores)
    one_by_one = [prm.score([item])[0] for item in items()]
    assert scores == pytest.approx(one_by_one, abs=1e-4)  # batching and padding do not change a score


def test_prm_learns_a_separable_toy_set(pairs_file: Path, tmp_path: Path) -> None:
    out = train_prm(
        prm_cfg(pairs_file, tmp_path / "prm", max_steps=12, lr=1e-3, batch_size=4, prm={"score_margin": True})
    )
    scores = ProcessRewardModel(out).score(items())
    chosen, rejected = scores[:4], scores[4:]
    assert all(c > r for c, r in zip(chosen, rejected))


def test_prm_lora_is_saved_merged(pairs_file: Path, tmp_path: Path) -> None:
    out = train_prm(prm_cfg(pairs_file, tmp_path / "prm-lora", max_steps=2, lora=True, lora_r=4))
    assert (out / "config.json").is_file() and not (out / "adapter_config.json").exists()
    assert len(ProcessRewardModel(out).score(items()[:2])) == 2


def test_prm_input_rendering_is_shared_and_keeps_the_end() -> None:
    from transformers import AutoTokenizer

    from ragteam.llm.tiny import tiny_model_dir

    tok = AutoTokenizer.from_pretrained(tiny_model_dir())
    messages = PAIRS[0]["messages"]
    assert render_prm_input(messages, "Answer: Paris")[-1] == {
        "role": "assistant",
        "content": "Answer: Paris",
    }
    ids = prm_input_ids(tok, messages, "Answer: Paris", max_length=None)
    assert tok.decode(ids).startswith("<|im_start|>system\nYou are an actor.")
    assert tok.decode(ids).endswith("<|im_start|>assistant\nAnswer: Paris<|im_end|>")  # score at end of turn
    assert prm_input_ids(tok, messages, "Answer: Paris", max_length=10) == ids[-10:]


# ---- bad data --------------------------------------------------------------------------------------------


def test_sft_file_given_to_dpo_is_named(tmp_path: Path, capsys) -> None:
    sft = write_jsonl(
        tmp_path / "sft.jsonl",
        [
            {
                "role": "router",
                "messages": [{"role": "user", "content": "q"}],
                "target": "a",
                "question_id": "1",
            }
        ],
    )
    code = main(["train", "prm", "--data", str(sft), "--out", str(tmp_path / "o"), "--prm.model", "tiny"])
    err = capsys.readouterr().err
    assert code == 1
    assert f"{sft}:1: field 'chosen': missing; this looks like an SFT file (has target)" in err
    assert "train prm needs rows with messages+chosen+rejected" in err


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ({"rejected": "Answer: Paris"}, "field 'rejected': identical to 'chosen'"),
        ({"chosen": 3}, "field 'chosen': must be a string"),
        ({"scores": {"chosen": "high", "rejected": 0}}, "field 'scores.chosen': must be a finite number"),
        ({"scores": {"chosen": 1.0}}, "field 'scores.rejected': must be a finite number"),
        ({"question_id": 12}, "field 'question_id': must be a string"),
        ({"messages": "Capital?"}, "field 'messages': must be a non-empty list"),
    ],
)
def test_malformed_pair_names_file_line_and_field(tmp_path: Path, bad: dict, message: str) -> None:
    path = write_jsonl(tmp_path / "pairs.jsonl", [PAIRS[1], PAIRS[0] | bad])
    with pytest.raises(DataError) as info:
        read_pair_rows(path)
    assert str(info.value).startswith(f"{path}:2: {message}")
