"""Everything command-line: the ``trm`` command and its subcommands (a composition root: it may
import the Dagster layer, the simulator and the benchmarks; nothing below it imports it)."""

from trm_assets.cli.main import main

__all__ = ["main"]
