"""Where probes run: in this process, on a local process pool, or on Ray.

Ray (`pip install .[plan]`) runs them as tasks on `ray.init()`'s local cluster by default,
or on an existing cluster (`--ray-address`). Without Ray, a process pool of the machine's
cores. Every probe is deterministic (its scenario fixes its seed), so the same plan gives
the same answer on any of them.
"""

from __future__ import annotations

import multiprocessing
import os
import socket
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from typing import Any, Protocol

from workbench.errors import WorkbenchError
from workbench.planning.probe import run_probe

ProbeArgs = tuple[str, str | None, bool]  # run_probe's arguments


class Executor(Protocol):
    workers: int

    def submit(self, args: ProbeArgs) -> Any:
        """Start a probe; returns a handle."""

    def wait_any(self, handles: list[Any]) -> list[Any]:
        """Block until at least one handle is done; return the done ones."""

    def result(self, handle: Any) -> tuple:
        """The finished probe's `run_probe` result."""

    def close(self) -> None: ...


class _Done:
    """A finished probe's result behind a hashable handle."""

    def __init__(self, result: tuple) -> None:
        self.result = result


class InlineExecutor:
    """Runs each probe at once in this process (one worker: no pickling, no start-up)."""

    workers = 1

    def submit(self, args: ProbeArgs) -> _Done:
        return _Done(run_probe(*args))

    def wait_any(self, handles: list[Any]) -> list[Any]:
        return handles[:1]

    def result(self, handle: _Done) -> tuple:
        return handle.result

    def close(self) -> None:
        pass


class PoolExecutor:
    """A local process pool (spawned workers: nothing of the parent's state is shared)."""

    def __init__(self, workers: int) -> None:
        self.workers = workers
        context = multiprocessing.get_context("spawn")
        self._pool = ProcessPoolExecutor(max_workers=workers, mp_context=context)

    def submit(self, args: ProbeArgs) -> Future:
        return self._pool.submit(run_probe, *args)

    def wait_any(self, handles: list[Any]) -> list[Any]:
        done, _ = wait(handles, return_when=FIRST_COMPLETED)
        return [h for h in handles if h in done]  # in submission order: deterministic

    def result(self, handle: Future) -> tuple:
        return handle.result()

    def close(self) -> None:
        self._pool.shutdown(cancel_futures=True)


class RayExecutor:
    """Probes as Ray tasks, one CPU each."""

    def __init__(self, address: str | None) -> None:
        import ray

        self._ray = ray
        self._started = not ray.is_initialized()  # ours to shut down (or disconnect from)
        if self._started:
            if address is not None:
                check_reachable(address)
            ray.init(address=address, include_dashboard=False, log_to_driver=False)
        self.workers = max(int(ray.cluster_resources().get("CPU", 1)), 1)
        self._task = ray.remote(num_cpus=1)(run_probe)

    def submit(self, args: ProbeArgs) -> Any:
        return self._task.remote(*args)

    def wait_any(self, handles: list[Any]) -> list[Any]:
        done, _ = self._ray.wait(handles, num_returns=1)
        ready = set(done)
        return [h for h in handles if h in ready]

    def result(self, handle: Any) -> tuple:
        return self._ray.get(handle)

    def close(self) -> None:
        """Disconnect from what `ray.init` started here (a local cluster ends with it); a
        session the caller opened before stays open."""
        if self._started:
            self._ray.shutdown()


# Ray retries an unreachable cluster for minutes, printing its log lines; a plain TCP
# connection tells in seconds whether anything listens there.
CONNECT_TIMEOUT_S = 5.0


def check_reachable(address: str, timeout_s: float = CONNECT_TIMEOUT_S) -> None:
    """A cluster address (`HOST:PORT`, `ray://HOST:PORT`; `auto` and `local` are Ray's own
    to resolve) must accept a connection: a one-line error otherwise."""
    scheme, _, rest = address.rpartition("://")
    if address in ("auto", "local") or scheme not in ("", "ray"):  # Ray's own, or a client's
        return
    host, _, port = rest.split("/")[0].split("?")[0].rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 2**16:
        raise WorkbenchError(
            f"expected HOST:PORT, ray://HOST:PORT or auto, got {address!r}", field="--ray-address"
        )
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
    except OSError as error:
        reason = error.strerror or type(error).__name__
        raise WorkbenchError(
            f"no Ray cluster answers at {address} ({reason})", field="--ray-address"
        ) from None


def build_executor(kind: str, workers: int | None, ray_address: str | None) -> Executor:
    """`auto`: Ray when it is installed, else a local pool; `local`, `ray` or `inline`."""
    if kind in ("auto", "ray"):
        try:
            return RayExecutor(ray_address)
        except ImportError:
            if kind == "ray" or ray_address:
                raise WorkbenchError(
                    "Ray is not installed: pip install -e '.[plan]' (or use --executor local)",
                    field="--executor",
                ) from None
    count = workers or os.cpu_count() or 1
    return InlineExecutor() if count == 1 or kind == "inline" else PoolExecutor(count)
