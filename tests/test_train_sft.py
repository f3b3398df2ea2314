"""`ragteam train sft` on the tiny model: loss mask, training, saving, loading back, resuming, bad data."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import train_helpers
import yaml
from train_helpers import write_jsonl

from ragteam.cli.main import main
from ragteam.llm.tiny import CHATML_TEMPLATE
from ragteam.train.data import DataError, read_sft_rows
from ragteam.train.run_folder import read_log
from ragteam.train.sft import SFTConfig, build_sft_trainer, train_sft

SYSTEM = "You are the router of a retrieval team."


def sft_row(i: int, target: str = "[Retrieval] capital of France") -> dict:
    return {
        "role": "router",
        "messages": [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": f"Question {i}: which city is the capital?" + " more" * (i % 3)},
        ],
        "target": target,
        "question_id": f"q{i}",
        "provenance": {"trace": "t.jsonl", "node": i},
    }


@pytest.fixture
def sft_file(tmp_path: Path) -> Path:
    return write_jsonl(tmp_path / "sft.jsonl", [sft_row(i) for i in range(8)])


def tiny_cfg(data: Path, out: Path, **kw) -> SFTConfig:
    return train_helpers.tiny_cfg(SFTConfig, data, out, **kw)


# ---- the loss mask ---------------------------------------------------------------------------------------


def test_mask_is_exactly_target_and_end_of_turn(tmp_path: Path) -> None:
    """The trained tokens are the target and <|im_end|>: no prompt, no assistant header, no earlier reply."""
    rows = [sft_row(0, target="Paris, the capital")]
    history = sft_row(1, target="Answer: yes")
    history["messages"] = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "first question"},
        {"role": "assistant", "content": "an earlier reply, not to be learned"},
        {"role": "user", "content": "second question"},
    ]
    data = write_jsonl(tmp_path / "sft.jsonl", rows + [history])
    cfg = tiny_cfg(data, tmp_path / "out", max_steps=1)
    trainer, _ = build_sft_trainer(cfg, read_sft_rows(data), lr=1e-4)
    tok = trainer.processing_class
    end = tok.convert_tokens_to_ids("<|im_end|>")
    for example, target in zip(trainer.train_dataset, ["Paris, the capital", "Answer: yes"]):
        ids, labels = example["input_ids"], example["labels"]
        trained = [i for i, (t, label) in enumerate(zip(ids, labels)) if label != -100]
        assert trained == list(range(trained[0], trained[-1] + 1)), "one contiguous span"
        masked_ids = [ids[i] for i in trained]
        assert tok.decode(masked_ids) == target + "<|im_end|>"
        assert masked_ids[-1] == end
        assert tok.decode(ids[: trained[0]]).endswith("<|im_start|>assistant\n")


def test_scoring_only_trained_tokens_gives_the_same_loss(sft_file: Path, tmp_path: Path) -> None:
    """The CPU speed-up (LM head on labelled positions only) leaves the loss and gradients unchanged."""
    import torch
    import trl.trainer.utils as trl_utils
    from trl.kernels.chunked_logprob import _use_triton as genuine

    from ragteam.train.trl_args import score_only_trained_tokens_on_cpu

    cfg = tiny_cfg(sft_file, tmp_path / "out", max_steps=1)
    trainer, _ = build_sft_trainer(cfg, read_sft_rows(sft_file), lr=1e-4)
    batch = next(iter(trainer.get_train_dataloader()))
    original = trl_utils._use_triton  # patched already when another test trained first
    results = []
    try:
        for compact in (False, True):
            trl_utils._use_triton = genuine
            if compact:
                assert score_only_trained_tokens_on_cpu()
            trainer.model.zero_grad()
            loss = trainer.compute_loss(trainer.model, dict(batch))
            loss.backward()
            grad = trainer.model.get_input_embeddings().weight.grad.clone()
            results.append((loss.item(), grad))
    finally:
        trl_utils._use_triton = original
    assert results[0][0] == pytest.approx(results[1][0], rel=1e-5)
    assert torch.allclose(results[0][1], results[1][1], atol=1e-6)


def test_tiny_template_is_kept() -> None:
    from transformers import AutoTokenizer

    from ragteam.llm.tiny import tiny_model_dir
    from ragteam.train.templates import training_chat_template

    tok = AutoTokenizer.from_pretrained(tiny_model_dir())
    assert training_chat_template(tok) == tok.chat_template  # it already marks generations


def test_non_chatml_template_is_refused() -> None:
    from transformers import AutoTokenizer

    from ragteam.llm.tiny import tiny_model_dir
    from ragteam.train.templates import training_chat_template

    tok = AutoTokenizer.from_pretrained(tiny_model_dir())
    tok.chat_template = "{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}\n{% endfor %}"
    with pytest.raises(ValueError, match="not ChatML"):
        training_chat_template(tok)


@pytest.mark.slow
def test_smollm2_training_template_renders_like_stock_and_masks_the_reply() -> None:
    """SmolLM2's stock template has no generation markers: ours renders the same text, marked."""
    from transformers import AutoTokenizer

    from ragteam.llm.smollm2 import smollm2_model_dir
    from ragteam.train.templates import has_generation_markers, training_chat_template

    tok = AutoTokenizer.from_pretrained(smollm2_model_dir())
    assert not has_generation_markers(tok.chat_template)
    template = training_chat_template(tok)  # raises unless the probe renderings agree
    for messages in (
        [{"role": "user", "content": "Q?"}],  # no system: SmolLM2 inserts its default system turn
        [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Q?"}],
    ):
        conversation = messages + [{"role": "assistant", "content": "The answer is 42."}]
        stock = tok.apply_chat_template(conversation, tokenize=False)
        assert tok.apply_chat_template(conversation, chat_template=template, tokenize=False) == stock
        out = tok.apply_chat_template(
            conversation, chat_template=template, return_dict=True, return_assistant_tokens_mask=True
        )
        masked = [i for i, m in zip(out["input_ids"], out["assistant_masks"]) if m]
        assert tok.decode(masked) == "The answer is 42.<|im_end|>"


# ---- training, saving, loading back ----------------------------------------------------------------------


def test_sft_loss_drops_and_the_model_loads_back(sft_file: Path, tmp_path: Path) -> None:
    from ragteam.llm.base import ChatRequest, Sampling
    from ragteam.llm.config import ModelConfig
    from ragteam.llm.factory import build_chat_model

    out = train_sft(tiny_cfg(sft_file, tmp_path / "sft", max_steps=8, lr=1e-2, save_steps=4))
    losses = [r["loss"] for r in read_log(out) if "loss" in r]
    assert len(losses) == 8
    assert losses[-1] < 0.5 * losses[0]
    assert (out / "config.json").is_file() and (out / "model.safetensors").is_file()
    assert (out / "checkpoint-8").is_dir()
    resolved = yaml.safe_load((out / "config.yaml").read_text())
    assert resolved["command"] == "train sft" and resolved["config"]["lr"] == 0.01
    assert resolved["config"]["sft"] == {"packing": False}

    policy = build_chat_model(ModelConfig(model=str(out), device="cpu"))  # --policy.model DIR
    [result] = policy.chat([ChatRequest(messages=sft_row(0)["messages"], sampling=Sampling(max_tokens=16))])
    assert result[0].text == "[Retrieval] capital of France"  # learned, and learned to stop
    assert result[0].finish_reason == "stop"
    assert policy.tokenizer.chat_template == CHATML_TEMPLATE  # saved with the model's own template


def test_sft_lora_loads_as_policy_lora(sft_file: Path, tmp_path: Path) -> None:
    from ragteam.llm.base import ChatRequest, Sampling
    from ragteam.llm.config import ModelConfig
    from ragteam.llm.factory import build_chat_model

    out = train_sft(tiny_cfg(sft_file, tmp_path / "lora", max_steps=2, lora=True, lora_r=4))
    assert (out / "adapter_config.json").is_file() and not (out / "config.json").exists()
    policy = build_chat_model(ModelConfig(model="tiny", lora=str(out), device="cpu"))  # --policy.lora DIR
    [result] = policy.chat([ChatRequest(messages=sft_row(0)["messages"], sampling=Sampling(max_tokens=4))])
    assert result[0].completion_tokens >= 1
    with pytest.raises(ValueError, match="--policy.model .* is a LoRA adapter, not a model"):
        train_sft(tiny_cfg(sft_file, tmp_path / "next", max_steps=1, policy={"model": str(out)}))


def test_sft_packing_trains(sft_file: Path, tmp_path: Path) -> None:
    out = train_sft(tiny_cfg(sft_file, tmp_path / "packed", max_steps=2, sft={"packing": True}))
    logged = [r for r in read_log(out) if "loss" in r]
    assert [r["step"] for r in logged] == [1, 2]
    assert logged[0]["num_tokens"] > 256  # real tokens counted (not the width of one row)


def test_packed_rows_keep_attention_within_each_row_segment(sft_file: Path, tmp_path: Path) -> None:
    """On CPU packed sequences are rows of one batch; each packed SFT row sees only itself."""
    import torch

    from ragteam.train.sft import PackedRowsCollator

    cfg = tiny_cfg(
        sft_file, tmp_path / "out", max_steps=1, max_length=128, batch_size=2, sft={"packing": True}
    )
    trainer, _ = build_sft_trainer(cfg, read_sft_rows(sft_file), lr=1e-4)
    assert isinstance(trainer.data_collator, PackedRowsCollator)
    batch = next(iter(trainer.get_train_dataloader()))
    assert "attention_mask" not in batch and batch["input_ids"].shape[0] == 2
    examples = [trainer.train_dataset[i] for i in range(2)]
    assert batch["num_real_tokens"] == sum(len(e["input_ids"]) for e in examples)
    model = trainer.model.eval()
    with torch.no_grad():
        packed = model(
            input_ids=batch["input_ids"], position_ids=batch["position_ids"], use_cache=False
        ).logits
        for row, example in enumerate(examples):
            assert len(example["seq_lengths"]) >= 2  # several SFT rows share this packed sequence
            start = 0
            for length in example["seq_lengths"]:
                alone = torch.tensor([example["input_ids"][start : start + length]])
                logits = model(input_ids=alone, use_cache=False).logits[0]
                assert torch.allclose(packed[row, start : start + length], logits, atol=1e-4)
                start += length


def test_resume_continues_from_the_saved_step(sft_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    train_sft(tiny_cfg(sft_file, out, max_steps=2, save_steps=1, save_total_limit=None))
    assert (out / "checkpoint-1").is_dir() and (out / "checkpoint-2").is_dir()
    with pytest.raises(ValueError, match="--resume"):
        train_sft(tiny_cfg(sft_file, out, max_steps=4, save_steps=1))  # no silent overwrite
    train_sft(tiny_cfg(sft_file, out, max_steps=4, save_steps=1, save_total_limit=None, resume=True))
    assert [r["step"] for r in read_log(out) if "loss" in r] == [1, 2, 3, 4]  # continued, not restarted
    state = json.loads((out / "checkpoint-4" / "trainer_state.json").read_text())
    assert state["global_step"] == 4
    assert [h["step"] for h in state["log_history"] if "loss" in h] == [1, 2, 3, 4]


def test_rows_longer_than_max_length_are_dropped_and_named(tmp_path: Path, capsys) -> None:
    long = sft_row(9)
    long["messages"][1]["content"] = "a very long question " * 100
    data = write_jsonl(tmp_path / "sft.jsonl", [sft_row(i) for i in range(3)] + [long])
    out = train_sft(tiny_cfg(data, tmp_path / "out", max_steps=1, max_length=200))
    assert "1 of 4 rows dropped: longer than --max-length 200 tokens" in capsys.readouterr().err
    assert (out / "model.safetensors").is_file()
    with pytest.raises(ValueError, match="every row is longer than --max-length 16"):
        train_sft(tiny_cfg(data, tmp_path / "none", max_steps=1, max_length=16))


def test_resume_without_checkpoint_is_an_error(sft_file: Path, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no checkpoint"):
        train_sft(tiny_cfg(sft_file, tmp_path / "empty", max_steps=1, resume=True))


# ---- schedules and presets -------------------------------------------------------------------------------


def test_cosine_schedule_warms_up_then_follows_half_a_cosine(sft_file: Path, tmp_path: Path) -> None:
    """8 steps, warm-up ratio 0.25 -> ceil(8 * 0.25) = 2 warm-up steps, peak 1e-3. Step s trains at lr(s - 1):
    lr(t) = peak * t / 2 for t < 2, else peak * 0.5 * (1 + cos(pi * (t - 2) / 6))."""
    cfg = tiny_cfg(sft_file, tmp_path / "cos", max_steps=8, lr=1e-3, lr_schedule="cosine", warmup_ratio=0.25)
    out = train_sft(cfg)
    lrs = {r["step"]: r["learning_rate"] for r in read_log(out) if "learning_rate" in r}
    expected = {
        1: 0.0,  # lr(0): warm-up starts at 0
        2: 0.5e-3,  # lr(1) = peak / 2
        3: 1e-3,  # lr(2): the peak
        4: 0.5 * (1 + math.sqrt(3) / 2) * 1e-3,  # cos(pi / 6) = sqrt(3) / 2: 0.9330e-3
        5: 0.75e-3,  # cos(pi / 3) = 1/2
        6: 0.5e-3,  # cos(pi / 2) = 0
        7: 0.25e-3,  # cos(2 pi / 3) = -1/2
        8: 0.5 * (1 - math.sqrt(3) / 2) * 1e-3,  # cos(5 pi / 6): 0.0670e-3
    }
    assert lrs == pytest.approx(expected, abs=1e-9)
    assert yaml.safe_load((out / "config.yaml").read_text())["config"]["lr_schedule"] == "cosine"


def test_schedules_and_warm_up_reach_the_trainer_arguments(tmp_path: Path) -> None:
    from transformers import TrainingArguments

    from ragteam.train.trl_args import trainer_arguments

    def args(**kw) -> TrainingArguments:
        return TrainingArguments(**trainer_arguments(tiny_cfg(tmp_path, tmp_path / "o", **kw), 1e-3))

    c3po = args(lr_schedule="cosine", warmup_ratio=0.03)
    assert c3po.lr_scheduler_type == "cosine" and c3po.get_warmup_steps(100) == 3  # ceil(100 * 0.03)
    assert args().lr_scheduler_type == "linear" and args().get_warmup_steps(100) == 0  # the old default
    assert args(warmup_steps=5).get_warmup_steps(100) == 5
    assert args(lr_schedule="constant", warmup_steps=5).lr_scheduler_type == "constant_with_warmup"
    with pytest.raises(ValueError, match="give one of the two"):
        tiny_cfg(tmp_path, tmp_path / "o", warmup_steps=5, warmup_ratio=0.1)


def test_presets_hold_the_papers_values() -> None:
    from ragteam.train.sft import PRESETS, preset_values

    assert preset_values("c3po") == {
        "lr": 4e-5,  # Table 6
        "epochs": 3,
        "lr_schedule": "cosine",
        "warmup_ratio": 0.03,
        "max_length": 4096,  # cutoff length
    }
    assert preset_values("rag-gym") == {
        "lora": True,  # E.2
        "lora_r": 256,
        "lora_alpha": 512,
        "lora_targets": ["q_proj", "k_proj", "v_proj", "o_proj"],  # all attention components
    }
    assert all(s.source.strip() for rows in PRESETS.values() for s in rows)
    from typing import get_args

    from ragteam.cli.train_sft import Config

    assert set(get_args(get_args(Config.model_fields["preset"].annotation)[0])) == set(PRESETS)
    text = (Path(__file__).resolve().parents[1] / "docs" / "training.md").read_text(encoding="utf-8")
    from ragteam.train.sft import preset_table

    assert preset_table() in text, (
        "regenerate the table in docs/training.md: ragteam.train.sft.preset_table()"
    )


def test_flags_and_config_files_override_a_preset(tmp_path: Path) -> None:
    from ragteam.cli.train_sft import Config
    from ragteam.config import ConfigError, load_config

    base = {"data": "d", "out": "o"}
    plain = load_config(Config, overrides=base)
    assert (plain.lr, plain.epochs, plain.lr_schedule, plain.lora) == (
        None,
        1.0,
        "linear",
        False,
    )  # no preset
    c3po = load_config(Config, overrides=base | {"preset": "c3po", "lr": 1e-5, "epochs": 1})
    assert (c3po.lr, c3po.epochs) == (1e-5, 1.0)  # the flags
    assert (c3po.lr_schedule, c3po.warmup_ratio, c3po.max_length) == ("cosine", 0.03, 4096)  # the preset
    path = tmp_path / "run.yaml"
    path.write_text("preset: rag-gym\nlora_r: 64\n")
    gym = load_config(Config, path, base | {"lora_alpha": 128})
    assert (gym.lora, gym.lora_r, gym.lora_alpha) == (True, 64, 128)  # file and flag over the preset
    assert gym.lora_targets == ["q_proj", "k_proj", "v_proj", "o_proj"] and gym.lr_schedule == "linear"
    with pytest.raises(ConfigError):
        load_config(Config, overrides=base | {"preset": "mmoa"})
    steps = load_config(Config, overrides=base | {"preset": "c3po", "warmup_steps": 10})
    assert (steps.warmup_steps, steps.warmup_ratio, steps.lr) == (10, 0.0, 4e-5)  # the flag's warm-up wins
    with pytest.raises(ConfigError, match="give one of the two"):
        load_config(Config, overrides=base | {"warmup_ratio": 0.1, "warmup_steps": 10})


def test_train_sft_preset_runs_from_the_command_line(sft_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "gym"
    flags = [
        "--data",
        str(sft_file),
        "--out",
        str(out),
        "--policy.model",
        "tiny",
        "--device",
        "cpu",
        "--no-progress",
    ]
    flags += [
        "--preset",
        "rag-gym",
        "--lora-r",
        "4",
        "--lora-alpha",
        "8",
        "--max-steps",
        "1",
        "--max-length",
        "256",
    ]
    assert main(["train", "sft", *flags]) == 0
    adapter = json.loads((out / "adapter_config.json").read_text())
    assert (adapter["r"], adapter["lora_alpha"]) == (4, 8)
    assert sorted(adapter["target_modules"]) == ["k_proj", "o_proj", "q_proj", "v_proj"]


# ---- bad data --------------------------------------------------------------------------------------------


def test_pairs_file_given_to_sft_is_named(tmp_path: Path, capsys) -> None:
    pairs = write_jsonl(
        tmp_path / "pairs.jsonl",
        [{"role": "actor", "messages": [{"role": "user", "content": "q"}], "chosen": "a", "rejected": "b"}],
    )
    code = main(
        ["train", "sft", "--data", str(pairs), "--out", str(tmp_path / "o"), "--policy.model", "tiny"]
    )
    err = capsys.readouterr().err
    assert code == 1
    assert f"{pairs}:1: field 'target': missing; this looks like a pairs file (has chosen/rejected)" in err
    assert "train sft needs rows with messages+target" in err
    assert not (tmp_path / "o").exists()  # failed before creating anything


@pytest.mark.parametrize(
    ("bad", "line", "message"),
    [
        ({"messages": [{"role": "tool", "content": "x"}]}, 3, "field 'messages[0].role': must be one of"),
        ({"messages": []}, 3, "field 'messages': must be a non-empty list"),
        ({"messages": [{"role": "user", "content": 5}]}, 3, "field 'messages[0].content': must be a string"),
        (
            {"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]},
            3,
            "field 'messages[1].role': the prompt must not end with an assistant turn",
        ),
        ({"target": ""}, 3, "field 'target': must not be empty"),
        ({"target": None}, 3, "field 'target': must be a string"),
        ({"role": 7}, 3, "field 'role': must be a string"),
        ({"question_id": None}, 3, "field 'question_id': must be a string"),
        ({"provenance": [1]}, 3, "field 'provenance': must be an object"),
    ],
)
def test_malformed_sft_row_names_file_line_and_field(
    tmp_path: Path, bad: dict, line: int, message: str
) -> None:
    rows = [sft_row(0), "", sft_row(1) | bad]  # a blank line 2 is skipped but counted
    path = write_jsonl(tmp_path / "sft.jsonl", rows)
    with pytest.raises(DataError) as info:
        read_sft_rows(path)
    assert str(info.value).startswith(f"{path}:{line}: {message}")


def test_missing_field_and_bad_json(tmp_path: Path) -> None:
    row = sft_row(0)
    del row["question_id"]
    path = write_jsonl(tmp_path / "a.jsonl", [row])
    with pytest.raises(DataError, match=r"a\.jsonl:1: field 'question_id': missing"):
        read_sft_rows(path)
    path = write_jsonl(tmp_path / "b.jsonl", [sft_row(0), '{"role": "router",'])
    with pytest.raises(DataError, match=r"b\.jsonl:2: not valid JSON"):
        read_sft_rows(path)
    with pytest.raises(DataError, match="no rows"):
        read_sft_rows(write_jsonl(tmp_path / "c.jsonl", []))


def test_the_recomputation_flag_is_named_as_the_installed_transformers_names_it():
    """transformers renamed TrainingArguments' gradient_checkpointing to activation_checkpointing (5.17 on the GPU
    image has only the old name): the trainers pass whichever this installation's TrainingArguments has."""
    from transformers import TrainingArguments

    from ragteam.train.trl_args import _checkpointing_arg

    name = _checkpointing_arg()
    assert name in TrainingArguments.__dataclass_fields__
    if "activation_checkpointing" in TrainingArguments.__dataclass_fields__:
        assert name == "activation_checkpointing"
