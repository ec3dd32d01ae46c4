"""Local GPU collection: the raw files of a bundle's gpu/ folder, read on the GPU host itself.

It writes what nvidia-smi prints, unchanged, and an NVML snapshot in llmdiag's own schema
(docs/nvml-snapshot.md). It runs on bare GPU hosts: only the standard library and nvidia-ml-py
(imported inside snapshot_nvml), so `python -m diag.collect.gpu OUTDIR` works with the repo on PYTHONPATH.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from diag.parsers.gpu_common import clocks_event_reason_names

# Fixed argument lists, also run through `kubectl exec` by the live collector.
NVIDIA_SMI_XML = ["nvidia-smi", "-q", "-x"]
NVIDIA_SMI_CSV = [
    "nvidia-smi",
    "--query-gpu=index,uuid,name,memory.used,memory.total,utilization.gpu,temperature.gpu",
    "--format=csv",
]
NVML_SCHEMA = "llmdiag/nvml/v1"
NVIDIA_SMI_TIMEOUT_S = 60.0

Status = tuple[str, str]  # (ok | failed | skipped, detail)


def snapshot_nvml(xid_wait_s: float = 0.0) -> dict[str, Any]:
    """The llmdiag/nvml/v1 document for every GPU NVML sees.

    A call NVML refuses (Not Supported, No Permission, ...) is recorded as "error: <NVML's words>".
    With xid_wait_s > 0 it also listens that long for Xid critical-error events; NVML reports only
    those that happen while it listens, so without the wait "xids" is left out (unknown).
    Raises pynvml.NVMLError when NVML itself cannot start (no driver, no library).
    """
    import pynvml

    pynvml.nvmlInit()
    try:
        document: dict[str, Any] = {
            "schema": NVML_SCHEMA,
            "taken_at": time.time(),
            "host": host_record(),
            "driver": _nvml(pynvml, pynvml.nvmlSystemGetDriverVersion),
            "nvml": _nvml(pynvml, pynvml.nvmlSystemGetNVMLVersion),
            "cuda": _nvml(pynvml, pynvml.nvmlSystemGetCudaDriverVersion),
        }
        handles = [_nvml(pynvml, pynvml.nvmlDeviceGetHandleByIndex, i) for i in range(pynvml.nvmlDeviceGetCount())]
        gpus = [
            {"index": i, "handle": handle} if isinstance(handle, str) else _nvml_gpu(pynvml, i, handle)
            for i, handle in enumerate(handles)
        ]
        if xid_wait_s > 0:
            for gpu, xids in zip(gpus, _watch_xids(pynvml, handles, xid_wait_s), strict=True):
                gpu["xids"] = xids
        document["gpus"] = gpus
        return document
    finally:
        pynvml.nvmlShutdown()


def host_record() -> dict[str, Any]:
    """This machine's name and IP addresses, which Ray reports as a node's hostname and node_ip: how a
    Ray node is joined to the GPUs captured here when no Kubernetes pod lies between them."""
    return {"name": socket.gethostname(), "addresses": _host_addresses()}


def _host_addresses() -> list[str]:
    """The IPv4 address of each network interface (Linux), and what the host's name resolves to."""
    found: set[str] = set()
    try:
        import fcntl
        import struct

        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            for _, name in socket.if_nameindex():
                try:
                    answer = fcntl.ioctl(sock.fileno(), 0x8915, struct.pack("256s", name.encode()[:15]))  # SIOCGIFADDR
                except OSError:  # an interface without an IPv4 address
                    continue
                found.add(socket.inet_ntoa(answer[20:24]))
    except (ImportError, OSError):
        pass
    try:
        found.update(str(info[4][0]) for info in socket.getaddrinfo(socket.gethostname(), None))
    except OSError:
        pass
    return sorted(found)


def _nvml(pynvml: Any, call: Callable[..., Any], *args: Any, convert: Callable[[Any], Any] | None = None) -> Any:
    try:
        value = call(*args)
    except pynvml.NVMLError as exc:
        return f"error: {exc}"
    if isinstance(value, bytes):  # nvidia-ml-py before 11.515 returned C strings as bytes
        value = value.decode(errors="replace")
    return convert(value) if convert is not None else value


def _nvml_gpu(pynvml: Any, index: int, handle: Any) -> dict[str, Any]:
    def get(call: Callable[..., Any], *args: Any, convert: Callable[[Any], Any] | None = None) -> Any:
        return _nvml(pynvml, call, handle, *args, convert=convert)

    reasons = get(pynvml.nvmlDeviceGetCurrentClocksEventReasons)
    return {
        "index": index,
        "name": get(pynvml.nvmlDeviceGetName),
        "uuid": get(pynvml.nvmlDeviceGetUUID),
        "pci_bus_id": get(pynvml.nvmlDeviceGetPciInfo, convert=lambda pci: _decoded(pci.busId)),
        "memory": _memory(pynvml, handle),
        "util": get(pynvml.nvmlDeviceGetUtilizationRates, convert=lambda u: {"gpu": u.gpu, "memory": u.memory}),
        "temp": get(pynvml.nvmlDeviceGetTemperature, pynvml.NVML_TEMPERATURE_GPU),
        "power_mw": get(pynvml.nvmlDeviceGetPowerUsage),
        "power_limit_mw": get(pynvml.nvmlDeviceGetEnforcedPowerLimit),
        "clock_sm": get(pynvml.nvmlDeviceGetClockInfo, pynvml.NVML_CLOCK_SM),
        "clock_sm_max": get(pynvml.nvmlDeviceGetMaxClockInfo, pynvml.NVML_CLOCK_SM),
        "throttle_reasons": reasons,
        "clocks_event_reasons": clocks_event_reason_names(reasons) if isinstance(reasons, int) else reasons,
        "pcie_gen": get(pynvml.nvmlDeviceGetCurrPcieLinkGeneration),
        "pcie_gen_max": get(pynvml.nvmlDeviceGetMaxPcieLinkGeneration),
        "pcie_width": get(pynvml.nvmlDeviceGetCurrPcieLinkWidth),
        "pcie_width_max": get(pynvml.nvmlDeviceGetMaxPcieLinkWidth),
        "ecc_uncorrected_volatile": get(
            pynvml.nvmlDeviceGetTotalEccErrors, pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, pynvml.NVML_VOLATILE_ECC
        ),
        "ecc_uncorrected_aggregate": get(
            pynvml.nvmlDeviceGetTotalEccErrors, pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, pynvml.NVML_AGGREGATE_ECC
        ),
        "retired_pending": get(pynvml.nvmlDeviceGetRetiredPagesPendingStatus),
        "remapped_rows": get(pynvml.nvmlDeviceGetRemappedRows, convert=list),
        "mig_mode": get(pynvml.nvmlDeviceGetMigMode, convert=list),
        "persistence_mode": get(pynvml.nvmlDeviceGetPersistenceMode),
        "procs": _processes(pynvml, handle),
    }


def _decoded(value: str | bytes) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else value


def _memory(pynvml: Any, handle: Any) -> dict[str, int] | str:
    """Bytes. nvmlMemory_v2 keeps the driver's reservation out of "used", as nvidia-smi does."""
    try:
        memory = pynvml.nvmlDeviceGetMemoryInfo(handle, version=pynvml.nvmlMemory_v2)
        return {"total": memory.total, "reserved": memory.reserved, "used": memory.used, "free": memory.free}
    except (pynvml.NVMLError, TypeError, AttributeError):  # older driver or nvidia-ml-py: v1 only
        pass
    return _nvml(
        pynvml,
        pynvml.nvmlDeviceGetMemoryInfo,
        handle,
        convert=lambda memory: {"total": memory.total, "used": memory.used, "free": memory.free},
    )


def _processes(pynvml: Any, handle: Any) -> list[dict[str, Any]] | str:
    """Compute and graphics processes, one entry per pid; "used" is None where NVML cannot tell (bytes otherwise)."""
    compute = _nvml(pynvml, pynvml.nvmlDeviceGetComputeRunningProcesses, handle)
    if isinstance(compute, str):
        return compute
    graphics = _nvml(pynvml, pynvml.nvmlDeviceGetGraphicsRunningProcesses, handle)
    by_pid: dict[int, Any] = {}
    for proc in compute + (graphics if isinstance(graphics, list) else []):
        by_pid.setdefault(proc.pid, proc)
    return [
        {"pid": pid, "name": _nvml(pynvml, pynvml.nvmlSystemGetProcessName, pid), "used": proc.usedGpuMemory}
        for pid, proc in by_pid.items()
    ]


def _watch_xids(pynvml: Any, handles: list[Any], wait_s: float) -> list[list[int] | str]:
    """Xids NVML reports within wait_s, per GPU; "error: ..." for a GPU NVML would not watch."""
    event_set = _nvml(pynvml, pynvml.nvmlEventSetCreate)
    if isinstance(event_set, str):
        return [event_set] * len(handles)
    try:
        watched: list[list[int] | str] = []
        for handle in handles:
            registered = (
                handle
                if isinstance(handle, str)
                else _nvml(
                    pynvml, pynvml.nvmlDeviceRegisterEvents, handle, pynvml.nvmlEventTypeXidCriticalError, event_set
                )
            )
            watched.append(registered if isinstance(registered, str) else [])
        deadline = time.monotonic() + wait_s
        while (left_ms := int((deadline - time.monotonic()) * 1000)) > 0:
            try:
                event = pynvml.nvmlEventSetWait(event_set, left_ms)
            except pynvml.NVMLError_Timeout:
                break
            except pynvml.NVMLError as exc:
                return [xids if isinstance(xids, str) else f"error: {exc}" for xids in watched]
            index = _nvml(pynvml, pynvml.nvmlDeviceGetIndex, event.device)
            xids = watched[index] if isinstance(index, int) and 0 <= index < len(watched) else None
            if isinstance(xids, list):
                xids.append(int(event.eventData))
        return watched
    finally:
        _nvml(pynvml, pynvml.nvmlEventSetFree, event_set)


def _run_nvidia_smi(argv: list[str]) -> tuple[bytes | None, Status]:
    if shutil.which(argv[0]) is None:
        return None, ("skipped", f"{argv[0]} not found on PATH")
    try:
        done = subprocess.run(argv, capture_output=True, timeout=NVIDIA_SMI_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        return None, ("failed", f"{' '.join(argv)} did not answer within {NVIDIA_SMI_TIMEOUT_S:g} s")
    except OSError as exc:
        return None, ("failed", f"{' '.join(argv)} could not start: {exc}")
    if done.returncode != 0:
        said = (done.stderr or done.stdout).decode(errors="replace").strip().splitlines()
        return None, ("failed", f"{' '.join(argv)} exited {done.returncode}: {said[0] if said else 'no output'}")
    return done.stdout, ("ok", "")


def _collect_nvml(xid_wait_s: float) -> tuple[bytes | None, Status]:
    try:
        import pynvml
    except ImportError:
        return None, ("skipped", "nvidia-ml-py (pynvml) is not installed")
    try:
        document = snapshot_nvml(xid_wait_s)
    except pynvml.NVMLError as exc:
        no_gpu_here = (pynvml.NVMLError_LibraryNotFound, pynvml.NVMLError_DriverNotLoaded)
        return None, ("skipped" if isinstance(exc, no_gpu_here) else "failed", f"NVML did not start: {exc}")
    return (json.dumps(document, indent=1) + "\n").encode(), ("ok", "")


def collect_local(host: str, xid_wait_s: float = 0.0) -> tuple[dict[str, bytes], dict[str, Status]]:
    """The gpu/ files of this host, and how each source fared (source -> (status, detail))."""
    sources: dict[str, tuple[bytes | None, Status]] = {
        f"gpu/{host}.nvml.json": _collect_nvml(xid_wait_s),
        f"gpu/{host}.xml": _run_nvidia_smi(NVIDIA_SMI_XML),
        f"gpu/{host}.csv": _run_nvidia_smi(NVIDIA_SMI_CSV),
    }
    files = {path: data for path, (data, _) in sources.items() if data is not None}
    return files, {path: status for path, (_, status) in sources.items()}


def kernel_xid_lines() -> tuple[bytes | None, Status]:
    """The kernel's NVRM Xid lines on this host, as `dmesg` prints them: from /dev/kmsg where this
    process may read it, else `journalctl -k`. Empty (read, none there) is an answer too."""
    try:
        fd = os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        kmsg = f"/dev/kmsg: {exc.strerror or exc}"
    else:
        lines = []
        try:
            while True:
                try:
                    record = os.read(fd, 8192).decode(errors="replace")
                except BlockingIOError:
                    break
                except BrokenPipeError:  # the record was overwritten while reading: go on with the next
                    continue
                if not record:
                    break
                prefix, _, message = record.partition(";")
                fields = prefix.split(",")
                if "NVRM: Xid" in message and len(fields) > 2 and fields[2].isdigit():
                    lines.append(f"[{int(fields[2]) / 1e6:12.6f}] {message.splitlines()[0]}")
        finally:
            os.close(fd)
        return "".join(line + "\n" for line in lines).encode(), ("ok", f"{len(lines)} Xid lines in /dev/kmsg")
    if shutil.which("journalctl") is None:
        return None, ("skipped", f"{kmsg}; journalctl not found")
    try:
        done = subprocess.run(
            ["journalctl", "-k", "--no-pager", "-o", "short-iso", "-g", "NVRM: Xid"],
            capture_output=True,
            timeout=NVIDIA_SMI_TIMEOUT_S,
            check=False,
        )
    except (subprocess.TimeoutExpired, OSError) as exc:
        return None, ("failed", f"{kmsg}; journalctl -k: {exc}")
    if done.returncode not in (0, 1):  # 1: no line matched
        said = done.stderr.decode(errors="replace").strip().splitlines()
        return None, ("skipped", f"{kmsg}; journalctl -k exited {done.returncode}: {said[0] if said else ''}")
    found = done.stdout if done.returncode == 0 else b""
    return found, ("ok", f"{found.count(b'NVRM: Xid')} Xid lines in journalctl -k")


def main(argv: list[str] | None = None) -> int:
    import argparse  # the Ray sweep's entry point only

    parser = argparse.ArgumentParser(prog="python -m diag.collect.gpu", description=__doc__.splitlines()[0])
    parser.add_argument("outdir", type=Path, help="bundle folder; the files go into OUTDIR/gpu/")
    parser.add_argument("--host", default=socket.gethostname(), help="file stem (default: this host's name)")
    parser.add_argument("--xid-wait", type=float, default=0.0, metavar="SECONDS", help="listen for Xid events")
    args = parser.parse_args(argv)
    files, statuses = collect_local(args.host, args.xid_wait)
    for rel, data in files.items():
        path = args.outdir / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb") as out:
            out.write(data)
    for rel, (status, detail) in statuses.items():
        print(f"{rel}: {status}{': ' + detail if detail else ''}", file=sys.stderr)
    return 0 if files else 1


if __name__ == "__main__":
    sys.exit(main())
