"""diag.collect.kubeconfig against the `kubernetes` package's loader, on the same kubeconfigs: the same
server, TLS files, proxy and Authorization header, except where this project follows kubectl on purpose
(the module's docstring names those three, and the last tests here pin them)."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kubernetes import client, config
from kubernetes.client.rest import should_bypass_proxies

from diag.collect import exec_credential, kubeconfig
from diag.collect.kube import KubeAccess

CA, CERT, KEY = b"-----CA-----\n", b"-----CERT-----\n", b"-----KEY-----\n"


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _write(path: Path, cluster: dict, user: dict, namespace: str | None = "ml", context: str = "c") -> Path:
    ctx: dict[str, Any] = {"cluster": "c", "user": "u"}
    if namespace:
        ctx["namespace"] = namespace
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": context,
        "clusters": [{"name": "c", "cluster": cluster}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": context, "context": ctx}],
    }))  # fmt: skip
    return path


def _plugin(tmp_path: Path, status: dict) -> dict:
    script = tmp_path / "get-token"
    answer = {"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential", "status": status}
    script.write_text(f"#!/bin/sh\ncat <<'EOF'\n{json.dumps(answer)}\nEOF\n")
    script.chmod(0o755)
    return {"apiVersion": "client.authentication.k8s.io/v1", "command": str(script), "interactiveMode": "Never"}


def _read(path: str | None) -> bytes | None:
    return Path(path).read_bytes() if path else None


def _by_package(path: Path, context: str | None = None) -> dict:
    configuration = client.Configuration()
    config.load_kube_config(
        config_file=str(path), context=context, client_configuration=configuration, persist_config=False
    )
    return {
        "server": configuration.host,
        "ca": _read(configuration.ssl_ca_cert),
        "cert": _read(configuration.cert_file),
        "key": _read(configuration.key_file),
        "verify": configuration.verify_ssl,
        "tls_server_name": configuration.tls_server_name,
        # the package keeps NO_PROXY aside and applies it when it builds its pool
        "proxy": None
        if should_bypass_proxies(configuration.host, configuration.no_proxy or "")
        else configuration.proxy,
        "authorization": configuration.get_api_key_with_prefix("BearerToken", alias="authorization"),
    }


def _by_us(path: Path, context: str | None = None) -> dict:
    connection = kubeconfig.load(str(path), context, 10)
    return {
        "server": connection.server,
        "ca": _read(connection.ca_file),
        "cert": _read(connection.cert_file),
        "key": _read(connection.key_file),
        "verify": connection.verify,
        "tls_server_name": connection.tls_server_name,
        "proxy": connection.proxy,
        "authorization": connection.authorization(),
    }


def _cases(tmp_path: Path) -> dict[str, Path]:
    (tmp_path / "pki").mkdir()
    for name, data in (("ca.crt", CA), ("client.crt", CERT), ("client.key", KEY)):
        (tmp_path / "pki" / name).write_bytes(data)
    (tmp_path / "token").write_text("file-token")
    https = {"server": "https://10.0.0.1:6443/", "certificate-authority-data": _b64(CA)}
    files = {"client-certificate": "pki/client.crt", "client-key": "pki/client.key"}
    datas = {"client-certificate-data": _b64(CERT), "client-key-data": _b64(KEY)}

    def at(name: str, cluster: dict, user: dict) -> Path:
        folder = tmp_path / name
        folder.mkdir()
        if name != "absolute-paths":
            (folder / "pki").symlink_to(tmp_path / "pki")
            (folder / "token").symlink_to(tmp_path / "token")
        return _write(folder / "config", cluster, user)

    return {
        "token, CA data": at("inline-token", https, {"token": "abc"}),
        "tokenFile, CA file, relative": at(
            "token-file",
            {"server": "https://api.example:443", "certificate-authority": "pki/ca.crt"},
            {"tokenFile": "token"},
        ),
        "client certificate files": at("cert-files", {**https, "certificate-authority": "pki/ca.crt"}, files),
        "client certificate data": at("cert-data", https, datas),
        "absolute paths": at(
            "absolute-paths",
            {"server": "https://h:1", "certificate-authority": str(tmp_path / "pki/ca.crt")},
            {"client-certificate": str(tmp_path / "pki/client.crt"), "client-key": str(tmp_path / "pki/client.key")},
        ),  # fmt: skip
        "basic auth": at("basic", https, {"username": "admin", "password": "s3cret:x"}),
        "token and certificate": at("token-cert", https, {"token": "abc", **datas}),
        "empty token, then exec": at("empty-token", https, {"token": "", "exec": _plugin(tmp_path, {"token": "t1"})}),
        "exec token": at(
            "exec",
            https,
            {"exec": _plugin(tmp_path, {"token": "from-plugin", "expirationTimestamp": "2099-01-01T00:00:00Z"})},
        ),  # fmt: skip
        "exec certificate": at(
            "exec-cert",
            https,
            {"exec": _plugin(tmp_path, {"clientCertificateData": CERT.decode(), "clientKeyData": KEY.decode()})},
        ),  # fmt: skip
        "insecure": at("insecure", {"server": "https://h:6443", "insecure-skip-tls-verify": True}, {"token": "a"}),
        "tls-server-name": at("sni", {**https, "tls-server-name": "kubernetes.default.svc"}, {"token": "a"}),
        "proxy-url": at("proxy", {**https, "proxy-url": "http://127.0.0.1:3128"}, {"token": "a"}),
        "socks proxy-url": at("socks", {**https, "proxy-url": "socks5://127.0.0.1:1080"}, {"token": "a"}),
        "plain http": at(
            "http", {"server": "http://127.0.0.1:8080", "certificate-authority-data": _b64(CA)}, {"token": "a", **datas}
        ),  # fmt: skip
        "IPv6 server": at("ipv6", {"server": "https://[fd00::1]:6443", "certificate-authority-data": _b64(CA)}, {}),
        "no user": at("no-user", https, {}),
    }


@pytest.fixture
def no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    """No proxy from the environment, whatever the machine that runs the tests has set."""
    for name in ("HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)


def test_every_kubeconfig_gives_what_the_package_gives(tmp_path: Path, no_proxy: None) -> None:
    for case, path in _cases(tmp_path).items():
        assert _by_us(path) == _by_package(path), case


@pytest.mark.parametrize(
    ("environment", "proxied"),
    [
        ({"HTTPS_PROXY": "http://proxy:3128"}, True),
        ({"https_proxy": "http://proxy:3128", "NO_PROXY": "example.com"}, True),
        ({"HTTPS_PROXY": "http://proxy:3128", "NO_PROXY": "10.0.0.0/8"}, False),
        ({"HTTPS_PROXY": "http://proxy:3128", "NO_PROXY": ".cluster.internal,10.0.0.1"}, False),
        ({"HTTPS_PROXY": "http://proxy:3128", "NO_PROXY": "*"}, False),
        ({"ALL_PROXY": "socks5://proxy:1080"}, True),
        ({"HTTP_PROXY": "http://proxy:3128"}, False),  # the server is https
    ],
)
def test_the_environment_proxy_is_the_packages(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_proxy: None, environment: dict[str, str], proxied: bool
) -> None:
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    path = _write(tmp_path / "config", {"server": "https://10.0.0.1:6443"}, {"token": "a"})
    ours, theirs = _by_us(path), _by_package(path)
    assert ours == theirs
    assert (ours["proxy"] is not None) is proxied


def test_a_kubeconfig_list_merges_as_both_merge_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = tmp_path / "a"
    first.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "prod",
        "clusters": [{"name": "shared", "cluster": {"server": "https://first:6443"}}],
        "users": [{"name": "me", "user": {"token": "first-token"}}],
        "contexts": [{"name": "prod", "context": {"cluster": "shared", "user": "me", "namespace": "serving"}}],
    }))  # fmt: skip
    second = tmp_path / "b"
    second.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "shared", "cluster": {"server": "https://second:6443"}},
                     {"name": "dev", "cluster": {"server": "https://dev:6443"}}],
        "users": [{"name": "me", "user": {"token": "second-token"}}],
        "contexts": [{"name": "dev", "context": {"cluster": "dev", "user": "me"}}],
    }))  # fmt: skip
    listed = f"{first}:{tmp_path / 'missing'}:{second}"
    monkeypatch.setenv("KUBECONFIG", listed)
    for context in (None, "dev"):
        ours, theirs = _by_us(Path(listed), context), _by_package(Path(listed), context)
        assert ours == theirs
    assert _by_us(Path(listed))["server"] == "https://first:6443"
    assert _by_us(Path(listed), "dev")["authorization"] == "Bearer first-token"
    names, current = kubeconfig.contexts(None)
    package_contexts, package_current = config.list_kube_config_contexts(listed)
    assert names == [c["name"] for c in package_contexts] and current == package_current["name"] == "prod"


def test_the_namespace_and_context_are_the_packages(tmp_path: Path) -> None:
    for namespace in ("ml", None):
        path = _write(tmp_path / f"config-{namespace}", {"server": "https://h:1"}, {"token": "a"}, namespace=namespace)
        kube = KubeAccess(str(path))
        _, active = config.list_kube_config_contexts(str(path))
        assert (kube.context, kube.current_namespace()) == (
            active["name"],
            active["context"].get("namespace") or "default",
        )


# ------------------------------------------------------------------ where kubectl is followed instead


def test_the_first_file_that_sets_current_context_wins_as_in_kubectl(tmp_path: Path) -> None:
    first = _write(tmp_path / "a", {"server": "https://first:1"}, {"token": "a"}, context="first")
    second = _write(tmp_path / "b", {"server": "https://second:1"}, {"token": "b"}, context="second")
    listed = f"{first}:{second}"
    assert kubeconfig.contexts(listed)[1] == "first"
    assert config.list_kube_config_contexts(listed)[1]["name"] == "second"  # the package takes the last


def test_a_token_file_is_trimmed_as_in_kubectl(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("abc\n")
    path = _write(tmp_path / "config", {"server": "https://h:1"}, {"tokenFile": "token"})
    assert _by_us(path)["authorization"] == "Bearer abc"
    assert _by_package(path)["authorization"] == "Bearer abc\n"  # a header urllib3 refuses to send


def test_no_proxy_does_not_override_the_kubeconfigs_proxy_as_in_kubectl(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NO_PROXY", "h")
    path = _write(tmp_path / "config", {"server": "https://h:1", "proxy-url": "http://proxy:3128"}, {"token": "a"})
    assert _by_us(path)["proxy"] == "http://proxy:3128"
    assert _by_package(path)["proxy"] is None


# ------------------------------------------------------------------ what the package leaves to us


def test_an_exec_token_is_renewed_before_it_expires(tmp_path: Path) -> None:
    counter = tmp_path / "runs"
    script = tmp_path / "get-token"
    script.write_text(
        "#!/bin/sh\necho x >> " + str(counter) + "\nn=$(wc -l < " + str(counter) + ")\n"
        'printf \'{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential",'
        '"status":{"token":"t%s","expirationTimestamp":"2000-01-01T00:00:00.123456789Z"}}\' $n\n'
    )
    script.chmod(0o755)
    spec = {"apiVersion": "client.authentication.k8s.io/v1", "command": str(script)}
    connection = kubeconfig.load(str(_write(tmp_path / "config", {"server": "https://h:1"}, {"exec": spec})), None, 10)
    assert [connection.authorization(), connection.authorization()] == ["Bearer t2", "Bearer t3"]


def test_a_rotated_token_file_is_read_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    token = tmp_path / "token"
    token.write_text("old")
    connection = kubeconfig.load(str(_write(tmp_path / "config", {"server": "https://h:1"}, {"tokenFile": str(token)})),
                                 None, 10)  # fmt: skip
    token.write_text("new")
    assert connection.authorization() == "Bearer old"
    monkeypatch.setattr(kubeconfig, "TOKEN_FILE_REREAD_S", 0.0)
    assert connection.authorization() == "Bearer new"


@pytest.mark.parametrize(
    ("cluster", "user", "context", "says"),
    [
        ({"server": "https://h:1"}, {"token": "a"}, "nope", "context 'nope' is not in the kubeconfig"),
        ({}, {"token": "a"}, None, "has no server"),
        ({"server": "https://h:1", "certificate-authority": "missing.crt"}, {}, None, "missing.crt: no such file"),
        ({"server": "https://h:1"}, {"tokenFile": "/nonexistent/token"}, None, "token file /nonexistent/token"),
    ],
)
def test_an_unusable_kubeconfig_is_one_line(
    tmp_path: Path, cluster: dict, user: dict, context: str | None, says: str
) -> None:
    with pytest.raises(kubeconfig.ConfigError, match=says) as raised:
        kubeconfig.load(str(_write(tmp_path / "config", cluster, user)), context, 10)
    assert "\n" not in str(raised.value)


@pytest.mark.parametrize("host", ["10.96.0.1", "fd00::1"])
def test_in_cluster_is_the_packages(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, host: str) -> None:
    from kubernetes.config.incluster_config import InClusterConfigLoader

    (tmp_path / "token").write_text("sa-token")
    (tmp_path / "ca.crt").write_bytes(CA)
    (tmp_path / "namespace").write_text("llmdiag\n")
    monkeypatch.setattr(kubeconfig, "IN_CLUSTER_DIR", str(tmp_path))
    environment = {"KUBERNETES_SERVICE_HOST": host, "KUBERNETES_SERVICE_PORT": "443"}
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    ours = kubeconfig.in_cluster()
    configuration = client.Configuration()
    InClusterConfigLoader(str(tmp_path / "token"), str(tmp_path / "ca.crt"), environ=environment).load_and_set(
        configuration
    )
    theirs = configuration.get_api_key_with_prefix("BearerToken", alias="authorization")
    assert (ours.server, ours.ca_file) == (configuration.host, configuration.ssl_ca_cert)
    assert (ours.authorization() or "").lower() == theirs.lower() == "bearer sa-token"
    assert ours.namespace == "llmdiag"


_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(), st.text(max_size=8), st.lists(st.text(max_size=4), max_size=2),
    st.lists(st.dictionaries(st.sampled_from(["name", "value"]), st.text(max_size=3)), max_size=2),
)  # fmt: skip
_maps = st.dictionaries(
    st.sampled_from(["server", "token", "tokenFile", "certificate-authority-data", "client-key", "exec", "env",
                     "command", "apiVersion", "args", "insecure-skip-tls-verify", "proxy-url", "username"]),
    st.one_of(_scalars, st.dictionaries(st.sampled_from(["command", "apiVersion", "env", "args"]), _scalars)),
    max_size=5,
)  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(cluster=_maps, user=_maps, context=st.one_of(st.none(), st.text(max_size=3)))
def test_any_kubeconfig_loads_or_says_why_in_one_line(
    tmp_path_factory: pytest.TempPathFactory, cluster: dict, user: dict, context: str | None
) -> None:
    if isinstance(user.get("exec"), dict) and "command" in user["exec"]:  # never run what was generated
        user["exec"]["command"] = "false" if user["exec"]["command"] else "/nonexistent/plugin"
    path = _write(tmp_path_factory.mktemp("fuzz") / "config", cluster, user)
    try:
        connection = kubeconfig.load(str(path), context, 2)
    except (kubeconfig.ConfigError, exec_credential.CredentialError) as e:
        assert str(e) and "\n" not in str(e)
    else:
        assert connection.server and "\n" not in (connection.authorization() or "")


@pytest.mark.parametrize(
    ("text", "says"),
    [
        (b"\xff\xfe not text", "is not YAML"),
        (b"clusters: {a: 1}\n", "clusters is not a list"),
        (b"clusters: 5\n", "clusters is not a list"),
        (b"- just\n- a list\n", "holds a list, not a Config object"),
        (b"clusters: [{cluster: {server: x}}]\n", "an entry of clusters has no name"),
    ],
)
def test_a_malformed_file_is_named_in_one_line(tmp_path: Path, text: bytes, says: str) -> None:
    path = tmp_path / "config"
    path.write_bytes(text)
    with pytest.raises(kubeconfig.ConfigError, match=says) as raised:
        kubeconfig.load(str(path), None, 2)
    assert str(path) in str(raised.value) and "\n" not in str(raised.value)


def test_an_auth_provider_user_is_loaded_by_the_package_and_its_file_is_left_as_it_was(tmp_path: Path) -> None:
    def segment(data: dict) -> str:
        return base64.urlsafe_b64encode(json.dumps(data).encode()).decode().rstrip("=")

    id_token = f"{segment({'alg': 'RS256'})}.{segment({'exp': 4102444800, 'sub': 'me'})}.c2lnbmF0dXJl"
    provider = {"name": "oidc", "config": {"id-token": id_token, "idp-issuer-url": "https://127.0.0.1:1"}}
    path = _write(tmp_path / "config", {"server": "https://h:1", "certificate-authority-data": _b64(CA)},
                  {"auth-provider": provider})  # fmt: skip
    before = path.read_bytes()
    ours = _by_us(path)
    assert ours == _by_package(path)
    assert ours["authorization"] == f"Bearer {id_token}" and ours["ca"] == CA
    assert path.read_bytes() == before


@pytest.mark.parametrize(("skip", "verified"), [(True, False), (False, True), ("false", True), ("true", True)])
def test_only_a_yaml_true_skips_the_servers_certificate(tmp_path: Path, skip: object, verified: bool) -> None:
    path = _write(tmp_path / "config", {"server": "https://h:1", "insecure-skip-tls-verify": skip}, {"token": "a"})
    assert kubeconfig.load(str(path), None, 2).verify is verified
