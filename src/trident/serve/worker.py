"""The engine's own thread on rank 0: it steps the continuous-batching scheduler whenever there is
work and sleeps otherwise, so the HTTP event loop never waits for the model. With several ranks
every step broadcasts its plan to the followers; `close` lets in-flight requests finish, then
tells the followers to return."""
from __future__ import annotations

import logging
import threading

from trident.infer.batching import Request, Scheduler

log = logging.getLogger("trident.serve")


class EngineLoop:
    def __init__(self, engine, eod_id: int):
        self.engine = engine
        self.scheduler = Scheduler(engine, eod_id, broadcast_plan=engine.world > 1)
        self.wake = threading.Event()
        self.closing = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._loop, name="trident-engine", daemon=True)

    def start(self) -> "EngineLoop":
        self.thread.start()
        return self

    def submit(self, request: Request) -> None:
        if self.error is not None:
            raise RuntimeError(f"the engine stopped: {self.error}")
        if self.closing.is_set():
            raise RuntimeError("the server is shutting down")
        self.scheduler.submit(request)
        self.wake.set()

    @property
    def load(self) -> dict:
        return {"running": len(self.scheduler.running), "waiting": len(self.scheduler.waiting),
                "slots": self.engine.slots, "finished": dict(self.scheduler.finished)}

    def _loop(self) -> None:
        try:
            while True:
                if self.scheduler.busy:
                    self.scheduler.step()
                    continue
                if self.closing.is_set():
                    break
                self.wake.wait(0.05)
                self.wake.clear()
        except BaseException as error:  # every waiting client gets an answer, not a hang
            log.exception("engine step failed")
            self.error = error
            self.scheduler.fail_all("error")
        finally:
            self.engine.stop_followers()

    def close(self, timeout: float | None = None) -> None:
        """Finish what is in flight, then stop (and release the followers)."""
        self.closing.set()
        self.wake.set()
        self.thread.join(timeout)
