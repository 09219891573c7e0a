"""The command line both federated sides of ``bench_sync.py`` take: one contract, so they run the same work."""

from __future__ import annotations

import argparse


def fedavg_parser(description: str | None) -> argparse.ArgumentParser:
    """Clients, digits, rounds, batch, learning rate, seed and where the final weights go."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--clients", type=int, default=10)
    parser.add_argument("--samples", type=int, default=19200)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--learning-rate", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", required=True, help="where the final weights go (.npz)")
    return parser
