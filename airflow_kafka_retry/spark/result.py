"""
The result document a Spark run leaves behind: a run summary, or the reason it could not start.

The driver writes it to a local path or any fsspec URL (``s3://...``, ``gs://...``); whoever
submitted the run reads it back, once: :func:`read_result` deletes it. It holds counts, offsets and
dead-letter coordinates -- never payloads, never the Kafka configuration.

By default it lives in the submission's private work folder (``tempfile.mkdtemp``: ``0700``, a new
random name per run; see :func:`~airflow_kafka_retry.spark.submit.prepare_submission`), so no other
local user can plant or read it. A local result file is handled as if the folder were shared
anyway: the driver creates it with ``O_CREAT | O_EXCL | O_NOFOLLOW`` and mode ``0600`` (an existing
file or a planted symlink makes it refuse rather than write through it), and the reader opens it
with ``O_NOFOLLOW`` and accepts only a regular file owned by its own user.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
from typing import Any

import fsspec

from airflow_kafka_retry.engine.drain.summary import RunSummary

ERROR_STATUS = "error"


class SparkAppError(ValueError):
    """
    The Spark application refused to start; the message says why.

    Bad topology, handler, options or topics.
    """


class ResultMissingError(RuntimeError):
    """The Spark application left no result document (it crashed, or never started)."""


class UntrustedResultError(ValueError):
    """The result path holds something this run did not write (a symlink, another user's file)."""


def is_local(url: str) -> bool:
    """A plain path or a ``file://`` URL: a file on this machine."""
    return "://" not in url or url.startswith("file://")


def _local_path(url: str) -> str:
    return url[len("file://") :] if url.startswith("file://") else url


def check_result_path_free(url: str) -> None:
    """
    Refuse a local result path that already holds something.

    The driver checks before reading any record.
    """
    if is_local(url) and os.path.lexists(_local_path(url)):
        kind = "a symlink" if os.path.islink(_local_path(url)) else "a file"
        raise UntrustedResultError(
            f"the result path {url} already holds {kind}; the run writes its summary "
            "only to a new file (remove it, or use the default private result path)"
        )


def _write_local(path: str, data: bytes) -> None:
    parent = os.path.dirname(path)
    if parent:
        os.makedirs(parent, mode=0o700, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except FileExistsError:
        raise UntrustedResultError(
            f"the result path {path} appeared while the run was going: not writing through it"
        ) from None
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)


def write_result(url: str, document: dict[str, Any]) -> None:
    """
    Write ``document`` as JSON to ``url`` (a local path or an fsspec URL), creating parent folders.

    A local file is created new (``O_EXCL | O_NOFOLLOW``, ``0600``): :class:`UntrustedResultError`
    if anything (a file, a symlink) is already there.
    """
    if is_local(url):
        _write_local(_local_path(url), json.dumps(document, indent=1).encode("utf-8"))
        return
    fs, path = fsspec.core.url_to_fs(url)
    parent = path.rsplit("/", 1)[0] if "/" in path else ""
    if parent:
        fs.makedirs(parent, exist_ok=True)
    with fs.open(path, "w", encoding="utf-8") as fh:
        json.dump(document, fh, indent=1)


def error_document(message: str) -> dict[str, Any]:
    """What the driver writes when it stops before reading any record."""
    return {"status": ERROR_STATUS, "engine": "spark", "error": message}


def remove_result(url: str) -> None:
    """
    Delete a result left by an earlier try, so it cannot be mistaken for this run's.

    A symlink is deleted itself, never its target.
    """
    if is_local(url):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(_local_path(url))
        return
    fs, path = fsspec.core.url_to_fs(url)
    if fs.exists(path):
        fs.rm(path)


def _read_local(path: str) -> bytes:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)  # a planted FIFO must not block
    except FileNotFoundError:
        if os.path.islink(path):  # a dangling symlink
            raise UntrustedResultError(f"the result path {path} is a symlink; not following it") from None
        raise ResultMissingError(f"the Spark application wrote no result to {path}") from None
    except OSError as exc:  # ELOOP: the last component is a symlink
        raise UntrustedResultError(
            f"the result path {path} is a symlink; not following it ({exc.strerror})"
        ) from None
    with os.fdopen(fd, "rb") as fh:
        info = os.fstat(fh.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid():
            raise UntrustedResultError(
                f"the result file {path} is not a regular file of this user "
                f"(owner uid {info.st_uid}); not trusting it"
            )
        return fh.read()


def read_result(url: str) -> RunSummary:
    """
    The run summary at ``url``; the document is deleted once read (the summary's home is XCom or stdout).

    :raises ResultMissingError: there is no result document.
    :raises UntrustedResultError: a local result is a symlink or not this user's regular file.
    :raises SparkAppError: the application wrote why it refused to start.
    """
    if is_local(url):
        data = _read_local(_local_path(url))
    else:
        fs, path = fsspec.core.url_to_fs(url)
        if not fs.exists(path):
            raise ResultMissingError(f"the Spark application wrote no result to {url}")
        with fs.open(path, "rb") as fh:
            data = fh.read()
    remove_result(url)
    document = json.loads(data.decode("utf-8"))
    if document.get("status") == ERROR_STATUS:
        raise SparkAppError(document.get("error") or "the Spark application failed to start")
    return RunSummary.from_dict(document)
