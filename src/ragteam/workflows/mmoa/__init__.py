"""MMOA-RAG: Query Rewriter, Selector and Generator as cooperating policy roles around a fixed retriever."""

from ragteam.workflows.mmoa.workflow import MMOA

__all__ = ["MMOA"]
