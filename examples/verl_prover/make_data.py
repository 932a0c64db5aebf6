"""The parquet files examples/verl_prover/run.sh trains on: one row per FrozenLake episode, in verl's RL format.

Each row has ``prompt`` (chat messages; verl's dataset requires the column, ``FrozenLakeSpec`` renders the
lake itself), ``data_source``, ``ability``, ``reward_model`` (unused: the outcome is the episode's) and
``extra_info.seed`` (the episode's reset seed, read by ``FrozenLakeSpec.reset_spec``).

    python examples/verl_prover/make_data.py --out ~/data/frozenlake     # train.parquet (256), test.parquet (32)
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

PROMPT = "Walk across the frozen lake to the goal without falling into a hole. Answer with one move per turn."


def rows(seeds: range, split: str) -> list[dict[str, Any]]:
    return [
        {
            "data_source": "frozenlake",
            "prompt": [{"role": "user", "content": PROMPT}],
            "ability": "agent",
            "reward_model": {"style": "rule", "ground_truth": ""},
            "extra_info": {"seed": seed, "split": split, "index": i},
        }
        for i, seed in enumerate(seeds)
    ]


def main(argv: list[str] | None = None) -> tuple[Path, Path]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path.home() / "data" / "frozenlake")
    parser.add_argument("--train", type=int, default=256)
    parser.add_argument("--test", type=int, default=32)
    args = parser.parse_args(argv)
    import datasets  # verl's own dependency

    args.out.mkdir(parents=True, exist_ok=True)
    train, test = args.out / "train.parquet", args.out / "test.parquet"
    datasets.Dataset.from_list(rows(range(args.train), "train")).to_parquet(str(train))
    datasets.Dataset.from_list(rows(range(10_000, 10_000 + args.test), "test")).to_parquet(str(test))
    print(f"wrote {train} ({args.train} rows) and {test} ({args.test} rows)")
    return train, test


if __name__ == "__main__":
    main()
