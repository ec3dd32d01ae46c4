"""Fixtures that start REAL services (tests/live/live_services.py). Each skips with the reason when
its binary is absent, or fails instead when LLMDIAG_REQUIRE_LIVE=1 (CI, where .ci/run installs them)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack
from pathlib import Path
from typing import NoReturn, TypeVar

import pytest
from helm_tool import helm_binary
from k8s_cluster import ControlPlane, running_control_plane
from live_services import (
    PROMETHEUS_BASIC_AUTH,
    PromServer,
    RayHead,
    ServiceUnavailable,
    StandIn,
    running_prometheus,
    running_ray_head,
    standin_launcher,
)
from vllm_server import require_vllm

T = TypeVar("T")


def _absent(why: ServiceUnavailable) -> NoReturn:
    """Skip the tests that need the service, or fail them under LLMDIAG_REQUIRE_LIVE=1 (CI)."""
    if os.environ.get("LLMDIAG_REQUIRE_LIVE") == "1":
        pytest.fail(f"{why} (LLMDIAG_REQUIRE_LIVE=1)", pytrace=False)
    pytest.skip(str(why))


def _enter(service: Callable[[], AbstractContextManager[T]]) -> Iterator[T]:
    """Run a service for the fixture's scope; skip (or, under LLMDIAG_REQUIRE_LIVE=1, fail) when absent."""
    with ExitStack() as stack:
        try:
            value = stack.enter_context(service())
        except ServiceUnavailable as e:
            _absent(e)
        yield value


@pytest.fixture(scope="session")
def vllm_cpu() -> None:
    """The CPU build of vLLM and the tiny model of ci/vllm_cpu/setup.sh; tests start their own servers."""
    try:
        require_vllm()
    except ServiceUnavailable as e:
        _absent(e)


@pytest.fixture(scope="session")
def ray_head() -> Iterator[RayHead]:
    yield from _enter(running_ray_head)


@pytest.fixture(scope="session")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PromServer]:
    yield from _enter(lambda: running_prometheus(tmp_path_factory.mktemp("prometheus")))


@pytest.fixture(scope="session")
def prometheus_basic_auth(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PromServer]:
    """A second real Prometheus, the same history, behind its own basic auth (PROMETHEUS_BASIC_AUTH)."""
    yield from _enter(
        lambda: running_prometheus(tmp_path_factory.mktemp("prometheus-auth"), basic_auth=PROMETHEUS_BASIC_AUTH)
    )


@pytest.fixture
def vllm_standin(tmp_path: Path) -> Iterator[Callable[..., StandIn]]:
    """`vllm_standin(metrics=[...], health=200)` starts a stand-in; all are stopped after the test."""
    yield from _enter(lambda: standin_launcher(tmp_path))


@pytest.fixture(scope="session")
def control_plane() -> Iterator[ControlPlane]:
    """etcd, kube-apiserver, kube-scheduler, kube-controller-manager and kwok on loopback (ci/k8s/build.sh)."""
    yield from _enter(running_control_plane)


@pytest.fixture(scope="session")
def helm() -> Path:
    """The helm binary of ci/helm/build.sh, to render deploy/helm/llmdiag."""
    try:
        return helm_binary()
    except ServiceUnavailable as e:
        _absent(e)
