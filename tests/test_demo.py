"""`ragteam demo` end to end on the bundled data (tiny model standing in for SmolLM2): evaluate, train, report.

The report is also opened in a real browser (headless Chromium, installed by scripts/test.sh where it can be).
"""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
from html.parser import HTMLParser

import pytest

from ragteam.cli.main import main

pytestmark = pytest.mark.slow  # the whole demo: eval, SFT, PPO, eval again, the report

ARGS = [
    "--policy.model", "tiny", "--policy.threads", "1", "--questions", "2", "--sft-steps", "1",
    "--ppo-iterations", "1", "--ppo-questions", "2", "--workflows", "standard-rag", "c3po", "mmoa",
    "--teams", "c3po", "mmoa", "--no-progress",
]  # fmt: skip


class _Report(HTMLParser):
    """Tables, their cells, inlined images and <details> of an HTML page."""

    def __init__(self) -> None:
        super().__init__()
        self.tables, self.images, self.details, self.cells = 0, [], 0, []
        self._in_cell = False

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self.tables += tag == "table"
        self.details += tag == "details"
        if tag == "img":
            self.images.append(attrs.get("src", ""))
        if tag in ("td", "th"):
            self._in_cell = True
            self.cells.append("")

    def handle_endtag(self, tag):
        if tag in ("td", "th"):
            self._in_cell = False

    def handle_data(self, data):
        if self._in_cell:
            self.cells[-1] += data


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    out = tmp_path_factory.mktemp("demo") / "demo"
    assert main(["demo", "--out", str(out), *ARGS]) == 0
    return out


def test_demo_evaluates_trains_and_evaluates_again(demo, capsys):
    for stage, workflows in (("before", ("standard-rag", "c3po", "mmoa")), ("after", ("c3po", "mmoa"))):
        for wf in workflows:
            metrics = json.loads((demo / stage / wf / "metrics.json").read_text())
            assert metrics["n"] == 2 and metrics["failed"] == 0
    # the warm start trained on rows from the training questions only (20 on), never the held-out 0-1
    rows = [json.loads(x) for x in (demo / "sft" / "sft.jsonl").read_text().splitlines()]
    held_out = {q.id for q in _demo_questions()[:2]}
    assert rows and not {r["question_id"] for r in rows} & held_out
    assert {r["role"] for r in rows} == {"selector", "generator"}
    assert any((demo / "sft" / "model").glob("*.safetensors"))
    ppo_log = [json.loads(x) for x in (demo / "ppo" / "log.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in ppo_log] == [1]
    # the after-evaluation ran the PPO policy
    after_cfg = (demo / "after" / "mmoa" / "config.yaml").read_text()
    assert str(demo / "ppo") in after_cfg

    # a second run reuses every stage: no episode rolled out again, no training step repeated
    episodes = (demo / "after" / "c3po" / "episodes.jsonl").read_text()
    model_time = (demo / "sft" / "model" / "model.safetensors").stat().st_mtime
    assert main(["demo", "--out", str(demo), *ARGS]) == 0
    assert (demo / "after" / "c3po" / "episodes.jsonl").read_text() == episodes
    assert (demo / "sft" / "model" / "model.safetensors").stat().st_mtime == model_time
    assert [json.loads(x)["iteration"] for x in (demo / "ppo" / "log.jsonl").read_text().splitlines()] == [1]
    assert "| c3po | trained | 2 |" in capsys.readouterr().out


def test_demo_report_has_tables_images_and_traces(demo):
    page = _Report()
    page.feed((demo / "report.html").read_text())
    assert page.tables >= 2  # before/after results, wall time
    header = page.cells[:8]
    assert header == ["workflow", "policy", "n", "EM", "F1", "cover-EM", "invalid acts", "seconds"]
    assert "trained" in page.cells and "untrained" in page.cells
    assert any("[" in c and "-" in c for c in page.cells)  # scores carry their intervals
    # SFT loss, PPO curves, C-3PO strategy ratio and depth: inlined PNGs that decode
    assert len(page.images) == 4
    for src in page.images:
        assert src.startswith("data:image/png;base64,")
        assert base64.b64decode(src.split(",", 1)[1])[:8] == b"\x89PNG\r\n\x1a\n"
    assert (
        page.details == 2 * 2
    )  # each trained team's held-out questions (up to 3), untrained next to trained
    md = (demo / "report.md").read_text()
    assert "## Before and after training" in md and "![" in md


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


@pytest.mark.skipif(CHROMIUM is None, reason="no Chromium here (scripts/test.sh installs it where it can)")
def test_demo_report_renders_in_a_real_browser(demo, tmp_path):
    shot = tmp_path / "report.png"
    flags = [
        "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1200,2400",
    ]  # fmt: skip
    url = (demo / "report.html").resolve().as_uri()
    dom = subprocess.run([CHROMIUM, *flags, "--dump-dom", url], capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert dom.stdout.count("<table") >= 2 and dom.stdout.count("<img") == 4
    subprocess.run(
        [CHROMIUM, *flags, f"--screenshot={shot}", url], capture_output=True, timeout=120, check=True
    )
    from PIL import Image

    image = Image.open(shot).convert("L")
    assert image.size == (1200, 2400)
    lo, hi = image.getextrema()
    assert hi - lo > 100  # text, tables and plots drawn, not a blank page
    dark = sum(1 for p in image.getdata() if p < 128)
    assert dark > 0.01 * image.size[0] * image.size[1]


def _demo_questions():
    from ragteam.assemble.config import demo_data_path
    from ragteam.data.questions import read_questions

    return read_questions(demo_data_path()).questions
