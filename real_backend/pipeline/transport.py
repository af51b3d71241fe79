"""Messages between stage processes over a `torch.distributed` process group.

A message is a pickled object in a fixed-size frame (its length first), the part that does
not fit following in a second send. One receiver thread per peer blocks on a receive from
that peer (a receive from any source is 20x slower in gloo) and puts what arrives in
`inbox`; one sender thread per destination keeps each hop's messages in order and, when the
hop is emulated (`link.EmulatedLink`), holds each back until the link would deliver it.

Waits never use a timeout: gloo closes the pair when one expires. Silence is detected one
level up, from heartbeats (`launch.Pipeline.check`).
"""

from __future__ import annotations

import pickle
import queue
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch
import torch.distributed as dist

from real_backend.pipeline.link import EmulatedLink
from real_backend.pipeline.messages import LinkFailure

TAG_FRAME = 1  # frames, whose receive is always posted ahead
TAG_REST = 2  # the part of a long message after its frame
FRAME_BYTES = 8192  # most messages fit: results, cancels, heartbeats, a few hidden states
LENGTH_BYTES = 8

# (sender rank, message) -> True when the message is consumed in the receiver thread.
Intercept = Callable[[int, Any], bool]


class Channel:
    def __init__(
        self,
        group: dist.ProcessGroup,
        rank: int,
        peers: Iterable[int],
        intercept: Intercept | None = None,
        is_final: Callable[[int, Any], bool] | None = None,
    ) -> None:
        self.group = group
        self.rank = rank
        self.inbox: queue.Queue[tuple[int, Any]] = queue.Queue()
        self._intercept = intercept
        self._is_final = is_final or (lambda src, msg: False)
        self._senders: dict[int, _Sender] = {}
        self._link: tuple[float, float | None] | None = None
        for peer in sorted(set(peers) - {rank}):
            name = f"pipeline-recv-{peer}"
            threading.Thread(target=self._receive, args=(peer,), name=name, daemon=True).start()

    def emulate_link(self, latency_s: float, bytes_per_s: float | None) -> None:
        """Hold every later message back as a hop of this latency and bandwidth would."""
        self._link = (latency_s, bytes_per_s) if latency_s > 0 or bytes_per_s else None
        for sender in self._senders.values():
            sender.link = self._new_link()

    def send(self, dst: int, message: Any) -> None:
        """Queue `message` for `dst`; messages to one destination leave in order."""
        if dst not in self._senders:
            self._senders[dst] = _Sender(self, dst, self._new_link())
        self._senders[dst].put(pickle.dumps(message, protocol=5))

    def flush(self) -> None:
        """Wait until everything queued so far has been sent."""
        for sender in self._senders.values():
            sender.queue.join()

    def close(self) -> None:
        self.flush()
        for sender in self._senders.values():
            sender.put(None)

    def _new_link(self) -> EmulatedLink | None:
        return None if self._link is None else EmulatedLink(*self._link)

    def _receive(self, src: int) -> None:
        try:
            for body in receive_frames(self.group, src):
                message = pickle.loads(body)
                if self._intercept is None or not self._intercept(src, message):
                    self.inbox.put((src, message))
                if self._is_final(src, message):
                    return
        except Exception as exc:  # the group is broken: say so, then stop
            self.inbox.put((src, LinkFailure(src, f"receiving failed: {exc}")))


def send_frame(group: dist.ProcessGroup, dst: int, body: bytes) -> None:
    """`body` as a frame (length, then as much as fits), and the rest after it if any."""
    frame = torch.zeros(FRAME_BYTES, dtype=torch.uint8)
    frame[:LENGTH_BYTES] = torch.tensor([len(body)], dtype=torch.int64).view(torch.uint8)
    head = body[: FRAME_BYTES - LENGTH_BYTES]
    frame[LENGTH_BYTES : LENGTH_BYTES + len(head)] = torch.frombuffer(
        bytearray(head), dtype=torch.uint8
    )
    group.send([frame], dst, TAG_FRAME).wait()
    if len(body) > len(head):
        rest = torch.frombuffer(bytearray(body[len(head) :]), dtype=torch.uint8)
        group.send([rest], dst, TAG_REST).wait()


def receive_frames(group: dist.ProcessGroup, src: int) -> Iterator[bytes]:
    """Message bodies from `src`, in order. The next frame's receive is posted before a
    body is handed on: a message that arrives before its receive is posted takes gloo's
    slow path (about 1 ms more per hop here)."""
    frame = torch.empty(FRAME_BYTES, dtype=torch.uint8)
    pending = group.recv([frame], src, TAG_FRAME)
    while True:
        pending.wait()
        current, frame = frame, torch.empty(FRAME_BYTES, dtype=torch.uint8)
        pending = group.recv([frame], src, TAG_FRAME)
        size = int(current[:LENGTH_BYTES].view(torch.int64))
        body = current[LENGTH_BYTES : LENGTH_BYTES + size].numpy().tobytes()
        if size > len(body):
            rest = torch.empty(size - len(body), dtype=torch.uint8)
            group.recv([rest], src, TAG_REST).wait()
            body += rest.numpy().tobytes()
        yield body


class _Sender:
    """One destination's queue and the thread that sends it in order."""

    def __init__(self, channel: Channel, dst: int, link: EmulatedLink | None) -> None:
        self.channel = channel
        self.dst = dst
        self.link = link
        self.queue: queue.Queue[tuple[bytes, float] | None] = queue.Queue()
        self.thread = threading.Thread(target=self._run, name=f"pipeline-send-{dst}", daemon=True)
        self.thread.start()

    def put(self, body: bytes | None) -> None:
        self.queue.put(None if body is None else (body, time.perf_counter()))

    def _run(self) -> None:
        group = self.channel.group
        while (item := self.queue.get()) is not None:
            body, enqueued = item
            try:
                if self.link is not None:
                    due = self.link.delivery_time(enqueued, len(body))
                    time.sleep(max(0.0, due - time.perf_counter()))
                send_frame(group, self.dst, body)
            except Exception as exc:
                self.channel.inbox.put((self.dst, LinkFailure(self.dst, f"sending failed: {exc}")))
            finally:
                self.queue.task_done()
        self.queue.task_done()
