"""C-3PO: a compact proxy (router, filter, decision maker) between a fixed retriever and a fixed LLM server."""

from ragteam.workflows.c3po.workflow import C3PO

__all__ = ["C3PO"]
