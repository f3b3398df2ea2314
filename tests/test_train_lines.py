"""The SFT, DPO and PRM trainers speak like PPO (issue 31): one formatted line per logged step, never
transformers' raw `{'loss': '2.484', ...}` dicts; and their defaults keep every row `collect` wrote.
"""

from __future__ import annotations

import json
from pathlib import Path

from ragteam.train.rows import drop_long_rows, row_limit
from ragteam.train.sft import SFTConfig, train_sft
from ragteam.train.step_lines import step_line
from ragteam.train.train_config import TrainConfig


def test_a_step_line_reads_like_ppos() -> None:
    logs = {"loss": 2.4843, "grad_norm": 1.25, "learning_rate": 2e-5, "num_tokens": 900.0, "epoch": 0.25}
    line = step_line("sft", 5, 20, logs, 812.4)
    assert line == "sft step 5/20 (epoch 0.25): loss 2.484 | grad_norm 1.25 | lr 2e-05 | 812 tok/s"
    done = step_line("dpo", 20, 20, {"train_runtime": 41.5, "train_loss": 0.61, "total_flos": 1e12}, None)
    assert done == "dpo done after 20 steps: runtime 41.5 | loss 0.61"


def _rows(tmp_path: Path, long_one: bool) -> Path:
    rows = []
    for i in range(4):
        text = f"Question {i}: which city is the capital?" + (
            " and more" * 150 if long_one and i == 3 else ""
        )
        rows.append(
            {
                "role": "router",
                "messages": [{"role": "system", "content": "route"}, {"role": "user", "content": text}],
                "target": "[Retrieval] capital of France",
                "question_id": f"q{i}",
            }
        )
    path = tmp_path / "sft.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_sft_prints_step_lines_not_raw_dicts_and_keeps_every_row_by_default(tmp_path: Path, capfd) -> None:
    data = _rows(tmp_path, long_one=True)
    for progress in (False, True):
        cfg = SFTConfig(
            data=str(data), out=str(tmp_path / f"out-{progress}"), policy={"model": "tiny"}, batch_size=2, max_steps=2,
            device="cpu", progress=progress,
        )  # fmt: skip
        train_sft(cfg)
        err = capfd.readouterr().err
        assert "sft step 1/2" in err and "sft step 2/2" in err and "sft done after 2 steps" in err
        assert "{'loss'" not in err and "'train_runtime'" not in err
        assert "dropped" not in err  # the long row is kept: --max-length defaults to the longest row


def test_dropping_more_than_a_tenth_of_the_rows_is_a_warning(capsys) -> None:
    cfg = TrainConfig(data="d.jsonl", out="o", max_length=100)
    assert drop_long_rows(list("abcdefghij"), [50] * 9 + [150], cfg, "train sft", "rows") == list("abcdefghi")
    assert "WARNING" not in capsys.readouterr().err  # 1 of 10: said, not a warning
    assert len(drop_long_rows(list("abcd"), [50, 50, 50, 150], cfg, "train sft", "rows")) == 3
    assert "train sft: WARNING 1 of 4 rows dropped" in capsys.readouterr().err
    assert row_limit(TrainConfig(data="d", out="o"), [10, 3042, 7]) == 3042
