"""A REAL Kubernetes control plane for the live tests: etcd, kube-apiserver, kube-scheduler,
kube-controller-manager and kwok (nodes and pods without containers), built by ci/k8s/build.sh.

Network rule: nothing here may dial beyond this machine. Every listener is on 127.0.0.1. Addresses
Kubernetes will not take on loopback live in a network namespace this module creates (with a veth
pair) and removes: the API server's advertise address (the `kubernetes` Service's endpoint), pod
IPs (Endpoints refuse loopback) and the Service IP range. The namespace owns those whole ranges
(a `local` route on its loopback), so a packet to any of them ends there. Node addresses are
127.0.0.1, where kwok answers the kubelet's port.

Only processes started here are stopped here, by process group.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from live_services import LOOPBACK, ServiceUnavailable, free_port, http_get, stop_process_group, wait_until

REPO = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = REPO / "ci" / "k8s" / "build.sh"
KWOK_STAGES = "kwok-stages.yaml"  # kwok's published node and pod stages, next to bin/ (build.sh)
BINARIES = ("etcd", "kube-apiserver", "kube-scheduler", "kube-controller-manager", "kwok")
TEST_NET = ipaddress.ip_network("198.18.0.0/15")  # RFC 2544's benchmarking range; owned by our netns only
POD_IO_NAMESPACE = "pod-io"
SERVE_CHAIN_NAMESPACE = "serve-chain"  # tests/live/test_serve_real_chain.py: its real server's log, nvidia-smi
KWOK_EXEC_SHIMS = Path(__file__).with_name("kwok_exec")  # nvidia-smi and ray, first on kwok's PATH
H200_CAPTURE = REPO / "fixtures" / "real" / "h200" / "idle" / "gpu" / "h200-idle"  # .xml and .csv, our own


def _release() -> str:
    for line in (REPO / "ci" / "k8s" / "go.mod").read_text().splitlines():
        parts = line.split()
        if parts[:2] == ["require", "k8s.io/kubernetes"]:
            return parts[2]
    raise RuntimeError("ci/k8s/go.mod names no k8s.io/kubernetes release")


def control_plane_bin() -> Path:
    """The folder build.sh fills ($LLMDIAG_K8S_BIN, else /opt/llmdiag-k8s/<release>/bin); raises
    ServiceUnavailable when a binary is missing."""
    folder = Path(os.environ.get("LLMDIAG_K8S_BIN") or f"/opt/llmdiag-k8s/{_release()}/bin")
    missing = [name for name in BINARIES if not os.access(folder / name, os.X_OK)]
    if not (folder.parent / KWOK_STAGES).is_file():
        missing.append(KWOK_STAGES)
    if missing:
        raise ServiceUnavailable(f"no {', '.join(missing)} in {folder} (run ci/k8s/build.sh or set LLMDIAG_K8S_BIN)")
    return folder


# --------------------------------------------------------------------------- test network


@dataclass(frozen=True)
class TestNetwork:
    """A network namespace joined to this host by a veth pair. Host end `host_ip`, namespace end
    `netns_ip`; `pod_cidr` and `service_cidr` are routed into the namespace, which owns them."""

    name: str
    host_ip: str
    netns_ip: str
    pod_cidr: str
    service_cidr: str

    def owns(self, address: str) -> bool:
        ip = ipaddress.ip_address(address)
        return (
            ip in ipaddress.ip_network(self.pod_cidr)
            or ip in ipaddress.ip_network(self.service_cidr)
            or address in (self.host_ip, self.netns_ip)
        )


def _ip(*argv: str, netns: str | None = None) -> subprocess.CompletedProcess:
    prefix = ["ip", "netns", "exec", netns] if netns else []
    return subprocess.run([*prefix, "ip", *argv], capture_output=True, text=True, timeout=30)


def _must(result: subprocess.CompletedProcess) -> None:
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(result.args)}: {result.stderr.strip()}")


def _free_slot() -> int:
    """A /24 index of 198.18.0.0/15 no route of this host uses yet (two test runs may overlap)."""
    routes = _ip("-4", "route", "show", "table", "all").stdout
    for slot in range(1 + os.getpid() % 50, 100):
        if f"198.18.{slot}." not in routes and f"198.19.{slot}." not in routes:
            return slot
    raise RuntimeError("no free 198.18.x.0/24 slot for the test network")


# A pod range for fleet-size benches: kwok hands out pod IPs past the end of its --cidr, and a slot's
# /24 holds 254 pods. Above every slot (1-99), inside the test range.
FLEET_POD_CIDR = "198.18.128.0/19"


@contextmanager
def test_network(pod_cidr: str | None = None) -> Iterator[TestNetwork]:
    """`pod_cidr`: a range of TEST_NET for the pods instead of the slot's /24 (FLEET_POD_CIDR)."""
    if shutil.which("ip") is None or os.geteuid() != 0:
        raise ServiceUnavailable("the control plane's test network needs root and iproute2 (ip netns)")
    if pod_cidr is not None:
        if not ipaddress.ip_network(pod_cidr).subnet_of(TEST_NET):
            raise ValueError(f"{pod_cidr} is not inside the test range {TEST_NET}")
        if f"{pod_cidr} " in _ip("-4", "route", "show", "table", "all").stdout:
            raise RuntimeError(f"{pod_cidr} is routed already (another run holds it)")
    slot = _free_slot()
    tag = f"lk{os.getpid() % 100000}s{slot}"  # one process can hold two control planes (a module's own)
    net = TestNetwork(
        name=f"llmdiag-{tag}",
        host_ip=f"198.19.{slot}.1",
        netns_ip=f"198.19.{slot}.2",
        pod_cidr=pod_cidr or f"198.18.{slot}.0/24",
        service_cidr=f"198.19.{128 + slot}.0/24",
    )
    host_end, netns_end = f"{tag}h", f"{tag}n"
    _must(_ip("netns", "add", net.name))
    try:
        _must(_ip("link", "add", host_end, "type", "veth", "peer", "name", netns_end))
        _must(_ip("link", "set", netns_end, "netns", net.name))
        _must(_ip("addr", "add", f"{net.host_ip}/30", "dev", host_end))
        _must(_ip("link", "set", host_end, "up"))
        _must(_ip("link", "set", "lo", "up", netns=net.name))
        _must(_ip("addr", "add", f"{net.netns_ip}/30", "dev", netns_end, netns=net.name))
        _must(_ip("link", "set", netns_end, "up", netns=net.name))
        for cidr in (net.pod_cidr, net.service_cidr):
            _must(_ip("route", "add", "local", cidr, "dev", "lo", netns=net.name))
            _must(_ip("route", "add", cidr, "via", net.netns_ip, "dev", host_end))
        _guard_test_net()
        yield net
    finally:
        _ip("link", "del", host_end)  # takes its routes and the peer with it
        _ip("netns", "del", net.name)
        _unguard_test_net()


def _guard_test_net() -> None:
    """An `unreachable` route for the whole test range on this host, under the routes of each test
    network: an address of it that no namespace owns is refused here, never sent out by the default
    route. kwok hands out pod IPs past the end of its --cidr (the 255th pod of a /24 gets the next
    /24), and at 5,000 pods the API server dialled such addresses through the default route."""
    added = _ip("route", "add", "unreachable", str(TEST_NET))
    if added.returncode != 0 and "File exists" not in added.stderr:
        raise RuntimeError(f"ip route add unreachable {TEST_NET}: {added.stderr.strip()}")


def _unguard_test_net() -> None:
    """Drops the guard once no test network of this host is left (another run may still have one)."""
    routes = _ip("-4", "route", "show").stdout
    if not re.search(r"^198\.1[89]\.\d+\.0/24 via ", routes, re.MULTILINE):
        _ip("route", "del", "unreachable", str(TEST_NET))


# --------------------------------------------------------------------------- certificates


def _openssl(*argv: str, cwd: Path) -> None:
    result = subprocess.run(["openssl", *argv], cwd=cwd, capture_output=True, text=True, timeout=60)
    if result.returncode != 0:
        raise RuntimeError(f"openssl {' '.join(argv[:2])}: {result.stderr.strip()[-500:]}")


def _issue(pki: Path, name: str, subject: str, extensions: str) -> None:
    """`name`.key/.crt signed by the run's CA; `extensions` is an openssl extension section body."""
    (pki / f"{name}.ext").write_text(extensions)
    _openssl("req", "-new", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-subj", subject,
             "-out", f"{name}.csr", cwd=pki)  # fmt: skip
    _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
             "-days", "2", "-sha256", "-extfile", f"{name}.ext", "-out", f"{name}.crt", cwd=pki)  # fmt: skip


CLIENT_EXT = "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth\n"


def make_pki(pki: Path, service_ip: str) -> None:
    pki.mkdir(parents=True)
    _openssl("req", "-x509", "-new", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-days", "2",
             "-subj", "/CN=llmdiag-test-ca", "-out", "ca.crt", cwd=pki)  # fmt: skip
    _issue(pki, "apiserver", "/CN=kube-apiserver",
           "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n"
           f"subjectAltName=IP:{LOOPBACK},IP:{service_ip},DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,"
           "DNS:kubernetes.default.svc\n")  # fmt: skip
    _issue(pki, "admin", "/O=system:masters/CN=llmdiag-test-admin", CLIENT_EXT)
    _issue(pki, "scheduler", "/CN=system:kube-scheduler", CLIENT_EXT)
    _issue(pki, "controller-manager", "/CN=system:kube-controller-manager", CLIENT_EXT)
    _issue(pki, "kwok", "/O=system:masters/CN=kwok", CLIENT_EXT)  # kwok writes node and pod status of every node
    _issue(pki, "kubelet-client", "/O=system:masters/CN=kube-apiserver-kubelet-client", CLIENT_EXT)
    _issue(pki, "kwok-serving", "/CN=kwok",
           f"basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n"
           f"subjectAltName=IP:{LOOPBACK}\n")  # fmt: skip
    _openssl("genrsa", "-out", "sa.key", "2048", cwd=pki)
    _openssl("rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=pki)


def write_kubeconfig(
    path: Path,
    server: str,
    ca: Path,
    *,
    cert: Path | None = None,
    key: Path | None = None,
    token: str | None = None,
    namespace: str = "default",
) -> Path:
    user = f"    client-certificate: {cert}\n    client-key: {key}\n" if cert else f"    token: {token}\n"
    path.write_text(
        "apiVersion: v1\nkind: Config\n"
        f"clusters:\n- name: test\n  cluster:\n    server: {server}\n    certificate-authority: {ca}\n"
        f"users:\n- name: test\n  user:\n{user}"
        f"contexts:\n- name: test\n  context:\n    cluster: test\n    user: test\n    namespace: {namespace}\n"
        "current-context: test\n"
    )  # fmt: skip
    path.chmod(0o600)
    return path


# --------------------------------------------------------------------------- the control plane


@dataclass(frozen=True)
class PodIO:
    """What kwok serves for the pods of one namespace, as a kubelet would (configured at kwok's start):
    `pods/log` of a `vllm` or `ray-head` container is `container_log(name)`, in the CRI format a
    container runtime writes (a test copies a real server's output there with `cri_log_copy`);
    `pods/exec` runs the argv on this host in `workdir`, where `nvidia-smi` prints the H200 capture and
    `ray` is the real Ray CLI against the head whose address a test writes to `ray_address_file`."""

    namespace: str
    workdir: Path
    ray_address_file: Path
    containers_with_logs: tuple[str, ...] = ("vllm", "ray-head")
    also: tuple[str, ...] = ()  # more namespaces served the same way (one test at a time uses the logs)

    def container_log(self, container: str) -> Path:
        return self.workdir / f"{container}.cri.log"

    def kwok_config(self) -> str:
        selector = {"matchNamespaces": [self.namespace, *self.also]}
        logs = {
            "apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "ClusterLogs", "metadata": {"name": "pod-io-logs"},
            "spec": {"selector": selector, "logs": [{"containers": [name], "logsFile": str(self.container_log(name))}
                                                     for name in self.containers_with_logs]},
        }  # fmt: skip
        execs = {
            "apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "ClusterExec", "metadata": {"name": "pod-io-exec"},
            "spec": {"selector": selector, "execs": [{"local": {"workDir": str(self.workdir)}}]},
        }  # fmt: skip
        return "\n---\n".join(json.dumps(doc) for doc in (logs, execs)) + "\n"

    def kwok_env(self) -> dict[str, str]:
        """kwok's local exec resolves argv[0] on kwok's own PATH, and its children inherit this."""
        return {
            "PATH": f"{KWOK_EXEC_SHIMS}:{os.environ.get('PATH', '/usr/bin:/bin')}",
            "LLMDIAG_NVIDIA_SMI_CAPTURE": str(H200_CAPTURE),
            "LLMDIAG_RAY_ADDRESS_FILE": str(self.ray_address_file),
            "LLMDIAG_RAY_PYTHON": os.environ.get("LLMDIAG_RAY_PYTHON", "/opt/llmdiag-ray/bin/python"),
        }


@contextmanager
def cri_log_copy(source: Path, target: Path) -> Iterator[None]:
    """Copy the lines a process writes to `source` into `target` as a container runtime logs them
    (`<RFC 3339 time> stdout F <line>`, which the kubelet's log reader, and kwok's, parse), until the
    block ends. A line is stamped when it is read, within a fifth of a second of its writing."""
    stop = threading.Event()

    def follow() -> None:
        with target.open("a") as out:
            offset, partial = 0, ""
            while True:
                stopping = stop.is_set()
                try:
                    with source.open("r", errors="replace") as log:
                        log.seek(offset)
                        chunk = log.read()
                        offset = log.tell()
                except FileNotFoundError:
                    chunk = ""
                *lines, partial = (partial + chunk).split("\n")
                stamp = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
                out.writelines(f"{stamp} stdout F {line}\n" for line in lines)
                out.flush()
                if stopping:
                    return
                stop.wait(0.2)

    target.touch()
    thread = threading.Thread(target=follow, name=f"cri-log-{target.name}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(10)


@dataclass(frozen=True)
class ControlPlane:
    server: str
    kubeconfig: Path  # system:masters, for the tests' own setup
    ca: Path
    network: TestNetwork
    workdir: Path
    bin: Path
    pids: tuple[int, ...]  # etcd, kube-apiserver, kube-scheduler, kube-controller-manager, kwok
    pod_io: PodIO

    def peer_addresses(self) -> dict[str, set[str]]:
        """Remote addresses of the TCP and UDP sockets our components hold now, by component: what
        they are talking to (a snapshot: a connection attempt that ended before is not seen)."""
        table = subprocess.run(["ss", "-tuanpH"], capture_output=True, text=True, timeout=30).stdout
        found: dict[str, set[str]] = {}
        for line in table.splitlines():
            fields = line.split()
            if len(fields) < 7 or fields[1] == "LISTEN" or fields[1] == "UNCONN":
                continue
            owners = [int(p) for p in re.findall(r"pid=(\d+)", fields[-1])]
            names = re.findall(r'"([^"]+)"', fields[-1])
            if not any(pid in self.pids for pid in owners):
                continue
            peer = fields[5].rsplit(":", 1)[0].strip("[]")
            found.setdefault(names[0] if names else "?", set()).add(peer)
        return found

    def kubectl(
        self, *argv: str, stdin: str | None = None, kubeconfig: Path | None = None, check: bool = True
    ) -> subprocess.CompletedProcess:
        result = subprocess.run(["kubectl", f"--kubeconfig={kubeconfig or self.kubeconfig}", *argv], input=stdin,
                                capture_output=True, text=True, timeout=120)  # fmt: skip
        if check and result.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(argv)}: {result.stderr.strip()}")
        return result


def _start(argv: list[str], log: Path, env: dict[str, str] | None = None) -> subprocess.Popen:
    with log.open("wb") as out:
        return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                                env=os.environ | env if env else None)  # fmt: skip


def _healthy(kubeconfig: Path, path: str) -> bool:
    result = subprocess.run(["kubectl", f"--kubeconfig={kubeconfig}", "get", "--raw", path],
                            capture_output=True, text=True, timeout=20)  # fmt: skip
    return result.returncode == 0 and result.stdout.strip() == "ok"


@contextmanager
def running_control_plane(pod_cidr: str | None = None, apiserver_flags: tuple[str, ...] = ()) -> Iterator[ControlPlane]:
    """etcd, kube-apiserver, kube-scheduler, kube-controller-manager and kwok, ready to take objects.
    `pod_cidr`: see test_network (FLEET_POD_CIDR for more than 254 pods); `apiserver_flags`: more of
    kube-apiserver's flags (a bench's audit log)."""
    bin_dir = control_plane_bin()
    if shutil.which("kubectl") is None or shutil.which("openssl") is None:
        raise ServiceUnavailable("kubectl and openssl are needed to drive the control plane")
    with ExitStack() as stack:
        net = stack.enter_context(test_network(pod_cidr))
        workdir = Path(tempfile.mkdtemp(prefix="llmdiag-k8s-"))
        stack.callback(shutil.rmtree, workdir, True)
        service_ip = str(next(ipaddress.ip_network(net.service_cidr).hosts()))
        pki = workdir / "pki"
        make_pki(pki, service_ip)
        ca = pki / "ca.crt"

        etcd_port, etcd_peer, api_port = free_port(), free_port(), free_port()
        server = f"https://{LOOPBACK}:{api_port}"
        admin = write_kubeconfig(
            workdir / "admin.kubeconfig", server, ca, cert=pki / "admin.crt", key=pki / "admin.key"
        )

        pids: list[int] = []

        def component(name: str, argv: list[str], env: dict[str, str] | None = None) -> subprocess.Popen:
            proc = _start(argv, workdir / f"{name}.log", env)
            stack.callback(stop_process_group, proc, 15)
            pids.append(proc.pid)
            return proc

        etcd_url = f"http://{LOOPBACK}:{etcd_port}"
        etcd = component("etcd", [
            str(bin_dir / "etcd"), "--name=test", f"--data-dir={workdir / 'etcd'}",
            f"--listen-client-urls={etcd_url}", f"--advertise-client-urls={etcd_url}",
            f"--listen-peer-urls=http://{LOOPBACK}:{etcd_peer}",
            f"--initial-advertise-peer-urls=http://{LOOPBACK}:{etcd_peer}",
            f"--initial-cluster=test=http://{LOOPBACK}:{etcd_peer}",
        ])  # fmt: skip
        wait_until("etcd", lambda: _etcd_healthy(etcd_url), 30, etcd, workdir / "etcd.log")

        apiserver = component("kube-apiserver", [
            str(bin_dir / "kube-apiserver"), f"--etcd-servers={etcd_url}",
            f"--bind-address={LOOPBACK}", f"--secure-port={api_port}", f"--advertise-address={net.host_ip}",
            f"--service-cluster-ip-range={net.service_cidr}",
            f"--tls-cert-file={pki / 'apiserver.crt'}", f"--tls-private-key-file={pki / 'apiserver.key'}",
            f"--client-ca-file={ca}", "--authorization-mode=RBAC",
            f"--service-account-key-file={pki / 'sa.pub'}",
            f"--service-account-signing-key-file={pki / 'sa.key'}",
            "--service-account-issuer=https://kubernetes.default.svc",
            f"--kubelet-certificate-authority={ca}", "--kubelet-preferred-address-types=InternalIP",
            f"--kubelet-client-certificate={pki / 'kubelet-client.crt'}",
            f"--kubelet-client-key={pki / 'kubelet-client.key'}",
            "--enable-priority-and-fairness=false", "--profiling=false", *apiserver_flags,
        ])  # fmt: skip
        wait_until("kube-apiserver", lambda: _healthy(admin, "/readyz"), 90, apiserver, workdir / "kube-apiserver.log")

        def api_client(name: str, identity: str, *flags: str) -> None:
            """A component that talks to the API server as `identity` (its certificate in pki/)."""
            cfg = write_kubeconfig(workdir / f"{identity}.kubeconfig", server, ca,
                                   cert=pki / f"{identity}.crt", key=pki / f"{identity}.key")  # fmt: skip
            component(name, [
                str(bin_dir / name), f"--kubeconfig={cfg}",
                f"--authentication-kubeconfig={cfg}", f"--authorization-kubeconfig={cfg}",
                f"--bind-address={LOOPBACK}", f"--secure-port={free_port()}", "--leader-elect=false", *flags,
            ])  # fmt: skip

        api_client("kube-scheduler", "scheduler")
        api_client(
            "kube-controller-manager", "controller-manager",
            "--use-service-account-credentials=true",
            f"--service-account-private-key-file={pki / 'sa.key'}", f"--root-ca-file={ca}",
            # No cloud, no node IPAM (it would hand out node CIDRs), no cluster-signing CA.
            "--allocate-node-cidrs=false", "--configure-cloud-routes=false",
            "--controllers=*,-node-ipam-controller,-service-lb-controller,-cloud-node-lifecycle-controller,-node-route-controller",
            # kwok heartbeats for every node from one process; on a loaded two-core machine a beat can come
            # later than the default 40 s, and a node marked NotReady would change what the tests assert
            "--node-monitor-grace-period=300s",
        )  # fmt: skip
        kwok_cfg = write_kubeconfig(
            workdir / "kwok.kubeconfig", server, ca, cert=pki / "kwok.crt", key=pki / "kwok.key"
        )
        kubelet_port = free_port()  # kwok answers the kubelet's API (logs, exec, port-forward) here
        pod_io = PodIO(POD_IO_NAMESPACE, workdir / "pod-io", workdir / "pod-io" / "ray-address",
                       also=(SERVE_CHAIN_NAMESPACE,))  # fmt: skip
        pod_io.workdir.mkdir()
        (workdir / "kwok-pod-io.yaml").write_text(pod_io.kwok_config())
        kwok = component("kwok", [
            str(bin_dir / "kwok"), f"--kubeconfig={kwok_cfg}", f"--config={bin_dir.parent / KWOK_STAGES}",
            f"--config={workdir / 'kwok-pod-io.yaml'}",
            "--manage-all-nodes=true", f"--cidr={net.pod_cidr}", f"--node-ip={LOOPBACK}",
            f"--node-port={kubelet_port}", f"--server-address={LOOPBACK}:{kubelet_port}",
            f"--tls-cert-file={pki / 'kwok-serving.crt'}", f"--tls-private-key-file={pki / 'kwok-serving.key'}",
        ], env=pod_io.kwok_env())  # fmt: skip
        wait_until("default ServiceAccount", lambda: _has_default_sa(admin), 60, kwok, workdir / "kwok.log")
        yield ControlPlane(server, admin, ca, net, workdir, bin_dir, tuple(pids), pod_io)


def _etcd_healthy(url: str) -> bool:
    status, body = http_get(f"{url}/health", timeout_s=2)
    return status == 200 and b"true" in body


def _has_default_sa(kubeconfig: Path) -> bool:
    result = subprocess.run(["kubectl", f"--kubeconfig={kubeconfig}", "get", "serviceaccount", "default", "-o", "name"],
                            capture_output=True, text=True, timeout=20)  # fmt: skip
    return result.returncode == 0


def wait_for(what: str, check, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.5)
    raise AssertionError(f"{what}: not after {timeout_s:g}s")
