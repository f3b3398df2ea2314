"""Tensor helpers shared by the tests of the training math (test_losses.py, test_advantages.py).

Expected values are written by hand as plain lists or floats, so both sides are compared in float64 with an
absolute tolerance only: a relative one would hide errors on the many exact zeros of masked positions.
"""

from __future__ import annotations

import torch


def t(x) -> torch.Tensor:
    """`x` (a number or nested lists) as a float64 tensor."""
    return torch.tensor(x, dtype=torch.float64)


def close(actual: torch.Tensor, expected, atol: float = 1e-6) -> None:
    """Assert `actual` equals `expected` within `atol` (absolute, no relative tolerance)."""
    torch.testing.assert_close(actual.double(), t(expected), atol=atol, rtol=0)
