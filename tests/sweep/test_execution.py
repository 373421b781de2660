"""jfl.sweep's execution pipeline: interrupts and the chunk writer."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from jfl.sweep import _execution


def test_a_ctrl_c_in_the_final_wait_still_lets_every_chunk_finish_writing(tmp_path):
    """A real SIGINT while the main thread waits for the chunk writer: the KeyboardInterrupt is
    raised only once the chunk in the writer is on disk, so the interrupt message counts what
    the process leaves behind. (In CPython 3.11 an interrupted ``Thread.join`` marks the running
    thread as stopped, gh-90882: a drain that joined the writer's thread again returned while
    the chunk was still being written.)"""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        pytest.fail("the tests run on the main thread, where signals are delivered")
    writer, done, release = (
        ThreadPoolExecutor(max_workers=1),
        tmp_path / "written",
        threading.Event(),
    )

    def write():  # finishes only after the signal was sent, while the drain waits
        release.wait(60)
        time.sleep(0.3)
        done.touch()

    def interrupt():
        signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)
        release.set()

    writer.submit(write)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        threading.Timer(0.2, interrupt).start()
        with pytest.raises(KeyboardInterrupt):
            _execution._drain(writer)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert done.exists()


def test_a_ctrl_c_in_the_drains_own_submit_still_waits_for_every_write(tmp_path):
    """A Ctrl-C inside the drain's ``submit`` after the job was queued: the drain submits again
    and waits for that one, behind the write."""

    class InterruptedOnce(ThreadPoolExecutor):
        interrupts = 0

        def submit(self, fn, /, *args, **kwargs):
            future = super().submit(fn, *args, **kwargs)
            if self.interrupts:
                self.interrupts -= 1
                raise KeyboardInterrupt
            return future

    writer, done = InterruptedOnce(max_workers=1), tmp_path / "written"
    writer.submit(lambda: (time.sleep(0.3), done.touch()))
    writer.interrupts = 1
    with pytest.raises(KeyboardInterrupt):
        _execution._drain(writer)
    assert done.exists() and writer.interrupts == 0


def test_under_the_command_line_device_waits_leave_the_main_thread_free_for_ctrl_c(monkeypatch):
    """With the command line's Ctrl-C handler (``WAIT_OFF_MAIN``), a chunk's wait runs on a
    thread of its own: a SIGINT raises KeyboardInterrupt on the main thread while the wait is
    still blocked (a compilation or an XLA computation would hold the main thread until it
    ends); without the handler it runs on the caller's thread."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        pytest.fail("the tests run on the main thread, where signals are delivered")
    release, seen = threading.Event(), []

    def blocked():
        seen.append(threading.current_thread())
        release.wait(60)

    monkeypatch.setattr(_execution, "WAIT_OFF_MAIN", threading.Event())
    # Its own ABANDONED: the process's would make a later command line in this worker leave
    # with os._exit (jfl.cli.main), as it must after a real Ctrl-C.
    monkeypatch.setattr(_execution, "ABANDONED", threading.Event())
    _execution.WAIT_OFF_MAIN.set()
    main = threading.main_thread().ident
    threading.Timer(0.3, lambda: signal.pthread_kill(main, signal.SIGINT)).start()
    with pytest.raises(KeyboardInterrupt):
        _execution._interruptible(blocked)
    assert not release.is_set() and seen[0] is not threading.main_thread()
    assert _execution.ABANDONED.is_set()  # the wait left running: the command line exits at once
    release.set()
    _execution.WAIT_OFF_MAIN.clear()
    assert _execution._interruptible(threading.current_thread) is threading.main_thread()
