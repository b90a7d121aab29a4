"""Shared helpers for the benchmarks: data paths, result tables, environment line."""
import os
import platform
import time
from pathlib import Path

import torch

RESULTS = Path(__file__).resolve().parent / "results"
SHARED_DATA = Path(os.environ.get("SKDP_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))


def environment():
    return (f"{time.strftime('%Y-%m-%d')}, Python {platform.python_version()}, torch {torch.__version__}, "
            f"{os.cpu_count()} CPU cores, torch threads {torch.get_num_threads()}; fresh mechanism noise "
            "in every fit (a seed fixes only the split and the initialisation)")


def markdown_table(header, rows):
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def write_result(name, text):
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / name
    path.write_text(text)
    print(f"wrote {path}")
    return path
