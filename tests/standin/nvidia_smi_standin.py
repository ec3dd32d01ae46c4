"""An nvidia-smi stand-in: prints a real capture's answers for the two command lines llmdiag runs.

Installed as `nvidia-smi` on PATH (tests/live: a folder holding a small `nvidia-smi` script that runs
this file), it answers

    nvidia-smi -q -x                                  <capture>.xml
    nvidia-smi --query-gpu=<the bundle's columns> --format=csv    <capture>.csv

from a capture that `python -m diag.collect.gpu` wrote on a real GPU machine (fixtures/real/h200/...).
Any other command line exits 2 with nvidia-smi's own complaint, as the real one does. What to serve
comes from the environment:

    LLMDIAG_NVIDIA_SMI_CAPTURE   the capture's path prefix, e.g. .../load/gpu/h200-load (required)
    LLMDIAG_NVIDIA_SMI_PIDS      "458=7535,459=7536": the capture's process ids renumbered, so that the
                                 processes on the GPU can be the pids of processes of this machine

Standard library only.
"""

from __future__ import annotations

import os
import re
import sys

QUERY_CSV = "--query-gpu=index,uuid,name,memory.used,memory.total,utilization.gpu,temperature.gpu"


def renumbered(xml: str, spec: str) -> str:
    """The capture's <pid> elements with the pids of `spec` ("old=new,...") replaced."""
    mapping = dict(pair.split("=", 1) for pair in spec.split(",") if pair)
    return re.sub(r"<pid>(\d+)</pid>", lambda m: f"<pid>{mapping.get(m[1], m[1])}</pid>", xml)


def main(argv: list[str]) -> int:
    capture = os.environ["LLMDIAG_NVIDIA_SMI_CAPTURE"]
    if argv == ["-q", "-x"]:
        with open(capture + ".xml", encoding="utf-8") as f:
            sys.stdout.write(renumbered(f.read(), os.environ.get("LLMDIAG_NVIDIA_SMI_PIDS", "")))
        return 0
    if argv == [QUERY_CSV, "--format=csv"]:
        with open(capture + ".csv", encoding="utf-8") as f:
            sys.stdout.write(f.read())
        return 0
    sys.stderr.write("Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.\n")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
