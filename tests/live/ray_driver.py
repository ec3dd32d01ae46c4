"""Ray driver for the live tests: leaves a cluster with one actor that runs and two demands that never can.

Run with the Ray virtualenv's python: `python ray_driver.py <gcs address> <namespace>`. Everything
is detached, so it outlives this driver: an actor with num_gpus=1 (fits the head's 2 GPUs), one with
num_gpus=4 (never fits) and a STRICT_PACK placement group of one {"GPU": 4, "CPU": 1} bundle.
"""

import os
import sys

import ray
from ray.util.placement_group import placement_group


@ray.remote
class GpuWorker:
    def visible_devices(self) -> str:
        return os.environ.get("CUDA_VISIBLE_DEVICES", "")


def main(address: str, namespace: str) -> None:
    ray.init(address=address, namespace=namespace, log_to_driver=False)
    fits = GpuWorker.options(name="gpu1_actor", lifetime="detached", num_gpus=1).remote()
    print("gpu1_actor sees CUDA_VISIBLE_DEVICES =", ray.get(fits.visible_devices.remote(), timeout=120))
    GpuWorker.options(name="gpu4_actor_infeasible", lifetime="detached", num_gpus=4).remote()
    placement_group([{"GPU": 4, "CPU": 1}], strategy="STRICT_PACK", name="pg_infeasible_4gpu", lifetime="detached")
    ray.shutdown()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
