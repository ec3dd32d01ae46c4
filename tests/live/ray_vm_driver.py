"""Ray driver for the GPU-host scenarios outside Kubernetes (tests/live/test_ray_vm_gpu.py).

Run with the Ray virtualenv's python: `python ray_vm_driver.py <gcs address> <namespace> <scenario>`,
against a head started with --num-gpus=1 on a machine whose GPU, as nvidia-smi reports it
(tests/standin/nvidia_smi_standin.py serving fixtures/real/h200/load), holds two processes that are
not Ray's: pid 458 (41478 MiB) and pid 459 (1130 MiB). Everything is detached, so it outlives this
driver. Prints one JSON line: {"pids": {actor name: pid}}.

  idle   no actor holds a GPU (Ray counts its GPU free)
  oom    a num_gpus=1 actor whose creation fails with PyTorch's CUDA out-of-memory error, naming the
         processes the GPU holds as PyTorch's allocator names them; Ray counts the GPU free again
  busy   two actors of num_gpus=0.5 each: the GPU is all Ray's
"""

import json
import sys

import ray

# What PyTorch 2.x raises (c10/cuda/CUDACachingAllocator.cpp), for the H200 capture: 140.40 GiB total,
# the two processes of fixtures/real/h200/load, and this process' own CUDA context.
OOM_MESSAGE = (
    "CUDA out of memory. Tried to allocate 112.00 GiB. GPU 0 has a total capacity of 140.40 GiB of which 97.67 GiB"
    " is free. Process 458 has 40.51 GiB memory in use. Process 459 has 1.10 GiB memory in use. Including non-PyTorch"
    " memory, this process has 518.00 MiB memory in use. Of the allocated memory 0 bytes is allocated by PyTorch, and"
    " 0 bytes is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting"
    " PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory"
    " Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
)


@ray.remote
class ModelLoader:
    def __init__(self, fail: bool) -> None:
        if fail:
            # torch.OutOfMemoryError, under its own name, without torch installed here
            error = type("OutOfMemoryError", (RuntimeError,), {"__module__": "torch"})
            raise error(OOM_MESSAGE)

    def pid(self) -> int:
        import os

        return os.getpid()


def main(address: str, namespace: str, scenario: str) -> None:
    ray.init(address=address, namespace=namespace, log_to_driver=False)
    pids = {}
    if scenario == "oom":
        loader = ModelLoader.options(name="model_loader", lifetime="detached", num_gpus=1, max_restarts=0).remote(True)
        try:
            ray.get(loader.pid.remote(), timeout=120)
        except ray.exceptions.RayActorError:
            pass
    elif scenario == "busy":
        for name in ("shard_0", "shard_1"):
            actor = ModelLoader.options(name=name, lifetime="detached", num_gpus=0.5).remote(False)
            pids[name] = ray.get(actor.pid.remote(), timeout=120)
    print(json.dumps({"pids": pids}))
    ray.shutdown()


if __name__ == "__main__":
    main(*sys.argv[1:4])
