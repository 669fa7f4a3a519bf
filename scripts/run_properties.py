"""Run the property and fuzzing tests longer than the test command does.

    python scripts/run_properties.py [--examples 5000]

The test command keeps each property's examples small (150 to 300) so that it stays fast; this runs
the same tests with ``--examples`` each: the pool against a model of Nomad, the relist properties
of the node tracker and the alerter, and the decoders' fuzzing. Exits with pytest's code.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROPERTIES = [
    "tests/test_pool_properties.py",
    "tests/test_relist_properties.py",
    "tests/test_decoders_fuzz.py",
]


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--examples", type=int, default=5000)
    args = parser.parse_args()
    env = {**os.environ, "HYPOTHESIS_MAX_EXAMPLES": str(args.examples)}
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *PROPERTIES]
    return subprocess.run(command, cwd=ROOT, env=env, check=False).returncode


if __name__ == "__main__":
    sys.exit(main())
