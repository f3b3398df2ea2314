"""C-3PO's presets: its rows of the `small` and `paper` profiles (`settings.py`, each value with its source)
and its corpus under each, as the workflow's `presets` (`--profile small|paper` fills them under the user's
values). Declared here, in the paper's package, so no module outside it names the workflow to find them."""

from __future__ import annotations

from ragteam.workflows.c3po import settings
from ragteam.workflows.setting import CORPUS_SMALL, Presets, corpus_paper

PRESETS: Presets = {
    "small": (*settings.SMALL, CORPUS_SMALL),
    "paper": (*settings.PAPER, corpus_paper("C-3PO §6.1: the 2018 Wikipedia dump")),
}
