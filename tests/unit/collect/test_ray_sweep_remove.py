"""The sweep's job is removed for good: Ray's job manager writes a deleted job's record again (FAILED,
"Job supervisor actor died") when it notices the supervisor gone after the delete, as seen with Ray
2.60.0 on a loopback cluster (3 of 6 sweeps left such a record). The removal must delete it again."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
import requests

from diag.collect import ray_sweep


@dataclass
class FakeJobs:
    """A dashboard's job records on a fake clock; `rewrite_at`: when the job manager writes the record again."""

    rewrite_at: float | None
    now: float = 0.0
    record: bool = True
    deletes: list[float] = field(default_factory=list)  # when each DELETE came

    def _tick(self) -> None:
        if self.rewrite_at is not None and self.now >= self.rewrite_at:
            self.record, self.rewrite_at = True, None

    def delete(self, url: str, timeout: float) -> requests.Response:
        self._tick()
        self.deletes.append(self.now)
        answer = requests.Response()
        answer.status_code = 200 if self.record else 404
        self.record = False
        return answer

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        self._tick()


@pytest.fixture
def jobs(monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> FakeJobs:
    fake = FakeJobs(rewrite_at=request.param)
    monkeypatch.setattr(requests, "delete", fake.delete)
    monkeypatch.setattr(ray_sweep.time, "sleep", fake.sleep)
    monkeypatch.setattr(ray_sweep.time, "monotonic", lambda: fake.now)
    return fake


@pytest.mark.parametrize("jobs", [1.2, 2.9], indirect=True)
def test_a_record_written_again_after_the_delete_is_deleted_again(jobs: FakeJobs) -> None:
    ray_sweep._remove("http://ray:8265", "llmdiag-gpu-sweep-x")
    jobs.sleep(60)  # long after the removal: what is left on the cluster
    assert not jobs.record
    assert len(jobs.deletes) >= 2


@pytest.mark.parametrize("jobs", [None], indirect=True)
def test_without_a_rewrite_the_removal_ends_after_the_watch(jobs: FakeJobs) -> None:
    ray_sweep._remove("http://ray:8265", "llmdiag-gpu-sweep-x")
    assert not jobs.record
    assert jobs.now == pytest.approx(ray_sweep._REWRITE_WATCH_S)
