"""Whether a write task's rows ended because there were no more, or because Spark failed the task.

A Python data source's writer gets its rows as an Arrow stream from the task's JVM. When what
computes those rows fails midway (a `raise_error`, a bad cast, a failed shuffle read), Spark does
not say so to the Python worker: it shuts its end of the socket down, and the Arrow reader takes
that for the end of the stream. `write()` then sees fewer rows, ending as if they were all, and
Spark fails the task only after `write()` returned. A transactional task must not commit then.

What tells the two apart is what follows the Arrow stream on the worker's input: after the last
row, Spark sends END_OF_STREAM (-4, big-endian); after a failure the input is closed. Nothing of
PySpark's public API carries this, so `input_ended_cleanly` finds the worker's input stream (the
`infile` of `pyspark.worker.main`, up the call stack of the running task) and peeks at it without
consuming anything. Where it cannot find it, it says so, and the writer refuses to commit.
"""
from __future__ import annotations

import os
import struct
import sys

# pyspark.serializers.SpecialLengths.END_OF_STREAM
END_OF_STREAM = struct.pack(">i", -4)
_WORKER_MODULE = os.path.join("pyspark", "worker.py")


class UnknownTaskInput(RuntimeError):
    """The task's input stream was not found: this is not a Spark Python worker PySpark lays out as 4.x does."""


def _worker_input():
    frame = sys._getframe(1)
    while frame is not None:
        code = frame.f_code
        if code.co_name == "main" and code.co_filename.endswith(_WORKER_MODULE):
            stream = frame.f_locals.get("infile")
            if stream is not None and hasattr(stream, "peek"):
                return stream
        frame = frame.f_back
    return None


def input_ended_cleanly() -> bool:
    """True if Spark sent the task's last row and ended its input, False if it cut the input short.

    Call it only once the row iterator is exhausted: Spark sends END_OF_STREAM right after the
    last row, so the peek then returns at once.
    """
    stream = _worker_input()
    if stream is None:
        raise UnknownTaskInput("Cannot tell whether this task received all of its rows (the Spark Python worker's "
                               "input was not found), so its transaction is not committed")
    following = stream.peek(len(END_OF_STREAM))[:len(END_OF_STREAM)]
    return bool(following) and END_OF_STREAM.startswith(following)
